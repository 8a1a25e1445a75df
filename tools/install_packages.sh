#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are not installed yet, as root or with
# sudo, printing one line per phase (apt's own output goes to a log that is shown only when a
# phase fails). Installs without recommended packages: only what is named and what it depends
# on. Exit status: 0 all present (or installed now), 1 a phase failed (its line and the log's
# last lines say which and why).
#
#   tools/install_packages.sh g++ libtorch-dev      # from tools/bazel and .ci/run
set -euo pipefail

say() { echo "tools/install_packages: $*" >&2; }

(($#)) || exit 0
# dpkg-query prints "<package> <status>" for each package it knows and exits 1 when any named
# package was never installed (the usual case on a fresh machine), so its exit status says
# nothing here: the status column does ("ii" = installed).
listing=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true)
installed=" $(awk '$2 == "ii" {sub(/:.*/, "", $1); print $1}' <<<"$listing" | tr '\n' ' ') "
missing=()
for pkg in "$@"; do
  [[ "$installed" == *" $pkg "* ]] || missing+=("$pkg")
done
((${#missing[@]})) || exit 0

if ((EUID == 0)); then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  say "missing: ${missing[*]}; not root and no sudo, so install them as root with:" \
    "apt-get install --no-install-recommends ${missing[*]}"
  exit 1
fi

log=$(mktemp /tmp/ckptlab-apt.XXXXXX)
# Runs phase $1 (its name) as the command after it, logging to $log; on failure, says which
# phase failed with what exit status and shows the log's end.
phase() {
  local name=$1 started=$SECONDS rc=0
  shift
  "$@" >>"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    say "$name failed (exit $rc); the last lines of its output ($log):"
    tail -n 25 "$log" >&2
    exit 1
  fi
  say "$name: done in $((SECONDS - started)) s"
}

say "${#missing[@]} Debian package(s) missing: ${missing[*]}"
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
phase "apt-get update" "${apt[@]}" update
phase "apt-get install (${#missing[@]} packages and their dependencies)" \
  "${apt[@]}" install -y --no-install-recommends "${missing[@]}"
rm -f "$log"
