#!/usr/bin/env bash
# Runs the Python test $1 (a path in the runfiles, relative to this script's folder), with the
# arguments after it, on a Python that has torch: $CKPT_PYTHON where set (and nothing else:
# CI's PyPI phase passes tools/python_env.sh's with --test_env), else python3 on PATH where it
# has one, else Debian's /usr/bin/python3 (python3-torch, which tools/bazel installs).
set -uo pipefail
here="$(dirname "$0")"
# One thread of each pool, as the C++ tests (testing/torch_test_main.cc): LibTorch's OpenMP
# threads and OpenBLAS's pthreads, both at every core, contend (a chain of 256x256 products
# ran 16 times slower on trixie's 2.6 with two of each on 2 cores; docs/performance.md).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if [[ -n "${CKPT_PYTHON:-}" ]]; then
  "$CKPT_PYTHON" -c 'import torch' || {
    echo "FAIL: CKPT_PYTHON=$CKPT_PYTHON cannot import torch (above)" >&2
    exit 1
  }
  exec "$CKPT_PYTHON" "$here/$1" "${@:2}"
fi
for python in python3 /usr/bin/python3; do
  if "$python" -c 'import torch' >/dev/null 2>&1; then
    exec "$python" "$here/$1" "${@:2}"
  fi
done
echo "FAIL: no Python with torch found (install python3-torch)" >&2
exit 1
