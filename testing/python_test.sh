#!/usr/bin/env bash
# Runs the Python test $1 (a path in the runfiles, relative to this script's folder) on a Python
# that has torch: python3 on PATH where it has one, else Debian's /usr/bin/python3
# (python3-torch, which tools/bazel installs; in CI's trixie root, python3-torch-cuda).
set -uo pipefail
here="$(dirname "$0")"
for python in python3 /usr/bin/python3; do
  if "$python" -c 'import torch' >/dev/null 2>&1; then
    exec "$python" "$here/$1"
  fi
done
echo "FAIL: no Python with torch found (install python3-torch)" >&2
exit 1
