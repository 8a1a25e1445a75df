#!/usr/bin/env bash
# A newcomer's first commands, checked where nothing is installed: in a bare Debian root of this
# machine's release (debootstrap minbase from the archive this machine's apt uses; root, no
# compiler, no Bazel, no LibTorch), a copy of the working tree, and the commands of README.md's
# "Quick start" block, read from README.md and run verbatim, one after the other, in its
# top folder. tools/bazel must install all they need; each must exit 0.
#
# Exit status: 0 every command passed; 1 one failed (its output is above and in the log); 2
# nothing ran (not root, no debootstrap, no apt source, too little disk, no root made).
#
#   tools/check_fresh_install.sh              # the bare root, then README.md's commands in it
#   CKPT_FRESH_SOURCE=DIR tools/check_fresh_install.sh   # another tree (e.g. an older commit's)
#   tools/check_fresh_install.sh --here       # the same commands on this machine, in this tree
#
# $CKPT_ROOTS_DIR (default /var/tmp) holds the root (about 5 GB with Bazel's outputs) and the
# logs: ckptlab-root-fresh-<suite>.log (debootstrap) and ckptlab-check-fresh-<suite>.log (the
# commands). The root is removed after the run unless CKPT_KEEP_ROOTS=1 (a kept root is
# upgraded and reused, the tree copied afresh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/debian_root.sh
source tools/debian_root.sh

say() { echo "check_fresh_install: $*"; }
src=$(readlink -f "${CKPT_FRESH_SOURCE:-$PWD}")
roots=${CKPT_ROOTS_DIR:-/var/tmp}
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
root=$roots/ckptlab-root-fresh-$suite
log=$roots/ckptlab-root-fresh-$suite.log
check_log=$roots/ckptlab-check-fresh-$suite.log

if why=$(roots_unavailable); then
  say "skipped: $why" >&2
  exit 2
fi
if [[ -z "$suite" || ! -f "$src/README.md" ]]; then
  say "skipped: no release codename in /etc/os-release, or no README.md in $src" >&2
  exit 2
fi

# The Quick start block: the first fenced block after the "## Quick start" heading, its
# non-blank lines, each a command as a reader would paste it.
mapfile -t commands < <(awk '
  /^## Quick start/ { section = 1; next }
  section && /^```/ { if (block) exit; block = 1; next }
  block && NF' "$src/README.md")
if ((${#commands[@]} == 0)); then
  say "README.md has no fenced block after a '## Quick start' heading: nothing to run" >&2
  exit 1
fi

# Runs each command with bash in the current folder, stdin closed; exit status 1 when any failed.
run_commands() {
  local line rc status=0 started
  for line in "$@"; do
    echo "== \$ $line"
    started=$SECONDS
    bash -c "$line" </dev/null
    rc=$?
    echo "== exit $rc in $((SECONDS - started)) s: $line"
    ((rc == 0)) || status=1
  done
  return $status
}

if [[ "${1:-}" == --here ]]; then
  cd "$src"
  set +e
  run_commands "${commands[@]}"
  exit
fi

avail=$(free_gb "$roots")
if [[ ! -d "$root" ]] && ((avail < 6)); then
  say "skipped: $avail GB free in $roots; the root needs about 6 GB" >&2
  exit 2
fi
started=$SECONDS
if ! make_root "$suite" "$root" "$log"; then
  say "skipped: the $suite root could not be made (last lines of $log):" >&2
  tail -5 "$log" >&2
  exit 2
fi
say "bare $suite root ready in $((SECONDS - started)) s ($(chroot "$root" dpkg-query -W | wc -l)" \
  "packages)"

# The working tree as a clone would have it (tracked and untracked-but-not-ignored files),
# writable, in root's home.
tree=$root/root/ckptlab
rm -rf "$tree" && mkdir -p "$tree"
git -C "$src" ls-files -z --cached --others --exclude-standard |
  tar -C "$src" --null --ignore-failed-read -T - -cf - | tar -C "$tree" -xf -
printf '%s\n' "${commands[@]}" >"$root/root/readme-commands"

# Inside: each command with bash in the tree, as root, stdin closed; then Bazel's server, which
# outlives the commands, is stopped so the root can be removed.
inner="$(declare -f run_commands)
cd /root/ckptlab || exit 1
mapfile -t commands </root/readme-commands
run_commands \"\${commands[@]}\"
status=\$?
tools/bazel shutdown >/dev/null 2>&1 || true
exit \$status"

say "running README.md's Quick start in it (${#commands[@]} commands)"
set +e
in_root "$root" "$inner" "" 2>&1 | tee "$check_log"
rc=${PIPESTATUS[0]}
set -e
# Anything still running in the root (a Bazel server the shutdown missed) holds its files.
for p in /proc/[0-9]*; do
  if [[ "$(readlink "$p/root" 2>/dev/null)" == "$root" ]]; then kill "${p#/proc/}" 2>/dev/null || true; fi
done
[[ "${CKPT_KEEP_ROOTS:-0}" == 1 ]] || rm -rf "$root"

while IFS= read -r line; do say "$suite minbase: ${line#== }"; done < <(grep '^== exit ' "$check_log")
# The first command builds everything from nothing: what a newcomer sees holds no warning.
warnings=$(grep -E '^[^ ]+:[0-9]+:[0-9]+: warning: ' "$check_log" || true)
if [[ -n "$warnings" ]]; then
  echo "$warnings" >&2
  say "the build printed $(wc -l <<<"$warnings") warnings (above); it must print none"
  rc=1
fi
if ((rc != 0)); then
  say "FAILED in $((SECONDS - started)) s (the whole output is in $check_log)"
  exit 1
fi
say "passed in $((SECONDS - started)) s"
