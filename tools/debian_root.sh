# Sourced, not run: the machinery for throw-away Debian roots that tools/check_fresh_install.sh
# and tools/check_libtorch_versions.sh share. Needs root (debootstrap, chroot, a private mount
# namespace) and bash.
#
#   roots_unavailable          why no root can be made here, if so
#   free_gb DIR                gigabytes free where DIR is
#   debian_mirror              the archive this machine's apt already uses (see below)
#   make_root SUITE ROOT LOG [PACKAGES [RECIPE]]
#   in_root ROOT SCRIPT CUDA_DIR [NAME=VALUE...]

# Prints why roots cannot be made on this machine (not root; no debootstrap) and succeeds, or
# prints nothing and fails when they can: `if why=$(roots_unavailable); then ...`.
roots_unavailable() {
  if ((EUID != 0)); then
    echo "needs root (debootstrap, chroot, mount namespace)"
  elif ! command -v debootstrap >/dev/null; then
    echo "no debootstrap (apt-get install debootstrap; .ci/run installs it)"
  else
    return 1
  fi
}

# Prints the gigabytes available on the file system holding the folder $1.
free_gb() { df --output=avail -B1G "$1" | tail -1 | tr -d ' '; }

# Prints the Debian archive this machine's apt sources use for its own release (the entry whose
# suites include this system's codename, with the main component), so the project names no
# registry host; $CKPT_DEBIAN_MIRROR overrides it. Reads the one-line format (sources.list,
# sources.list.d/*.list) and the deb822 one (sources.list.d/*.sources), as apt does; files apt
# ignores (other suffixes) are ignored. Exit status 1, with a message, when none is found.
debian_mirror() {
  if [[ -n "${CKPT_DEBIAN_MIRROR:-}" ]]; then
    echo "$CKPT_DEBIAN_MIRROR"
    return 0
  fi
  local codename uri f
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  uri=$(
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f "$f" ]] || continue
      # deb [options] URI SUITE COMPONENT...
      awk -v want="$codename" '
        $1 == "deb" {
          i = 2
          if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          if ($(i + 1) != want) next
          for (j = i + 2; j <= NF; j++) if ($j == "main") { print $i; exit }
        }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -f "$f" ]] || continue
      # Paragraphs of "Key: value" lines; "#" lines are comments.
      awk -v want="$codename" '
        BEGIN { RS = "" }
        {
          delete field
          n = split($0, lines, "\n")
          for (k = 1; k <= n; k++) {
            if (lines[k] ~ /^#/ || lines[k] !~ /:/) continue
            key = tolower(substr(lines[k], 1, index(lines[k], ":") - 1))
            field[key] = " " substr(lines[k], index(lines[k], ":") + 1) " "
          }
          if (field["enabled"] ~ / no /) next
          if (field["types"] !~ / deb / || field["components"] !~ / main /) next
          if (field["suites"] !~ (" " want " ")) next
          split(field["uris"], uris, " ")
          print uris[1]
          exit
        }' "$f"
    done | head -1
  )
  if [[ -z "$uri" ]]; then
    echo "debian_mirror: no apt source for '$codename' with the main component in" \
      "/etc/apt/sources.list{,.d/*.list,.d/*.sources}; set CKPT_DEBIAN_MIRROR" >&2
    return 1
  fi
  echo "$uri"
}

# Makes the minimal (minbase) root of SUITE at ROOT from debian_mirror's archive, with the
# comma-separated PACKAGES when given, logging to LOG. A root kept from an earlier run is
# upgraded instead, when it was made by the same RECIPE (a digest of what makes and fills it,
# held in its marker file .ckptlab-root): one made otherwise could hold what the recipe no
# longer installs, so it is made afresh.
make_root() {
  local suite=$1 root=$2 log=$3 packages=${4:-} recipe=${5:-} mirror
  if [[ -x "$root/usr/bin/apt-get" && -f "$root/.ckptlab-root" &&
    "$(<"$root/.ckptlab-root")" == "$recipe" ]]; then
    echo "upgrading the kept root $root"
    in_root "$root" 'apt-get update -qq $CKPT_APT_OPTIONS &&
      DEBIAN_FRONTEND=noninteractive apt-get -y -qq dist-upgrade' "" \
      CKPT_APT_OPTIONS="${CKPT_APT_OPTIONS:-}" >"$log" 2>&1
    return
  fi
  mirror=$(debian_mirror) || return 1
  rm -rf "$root"
  echo "making a $suite root in $root from $mirror (debootstrap, about 3 minutes)"
  debootstrap --variant=minbase --components=main,contrib,non-free \
    ${packages:+--include="$packages"} "$suite" "$root" "$mirror" >"$log" 2>&1 &&
    printf '%s' "$recipe" >"$root/.ckptlab-root"
}

# Runs SCRIPT with bash as root inside ROOT, in a private mount namespace (the mounts end with
# it, also when this is interrupted): ROOT a mount point of its own (so that SCRIPT can make a
# private mount namespace in turn), /proc, /dev with a tmpfs of its own at /dev/shm (as a booted
# machine has; tools/bazel puts Bazel's sandboxes there), the sources read-only at /src when
# $CKPT_ROOT_SRC names them, CUDA_DIR read-only at /opt/host-cuda when given, and only the
# environment variables given after CUDA_DIR (this machine's CUDA_HOME, LIBRARY_PATH and PATH
# name its own CUDA).
in_root() {
  local root=$1 script=$2 cuda=$3
  shift 3
  mkdir -p "$root/src" "$root/opt/host-cuda"
  unshare -m --propagation private bash -c '
    set -e
    root=$1 src=$2 cuda=$3 script=$4
    shift 4
    mount --bind "$root" "$root"
    if [[ -n "$src" ]]; then
      mount --bind "$src" "$root/src"
      mount -o remount,bind,ro "$root/src"
    fi
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
    [[ -z "$cuda" ]] || mount -o bind,ro "$cuda" "$root/opt/host-cuda"
    exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
      "$@" /bin/bash -c "$script"' _ \
    "$root" "${CKPT_ROOT_SRC:-}" "$cuda" "$script" "$@"
}
