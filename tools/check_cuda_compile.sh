#!/usr/bin/env bash
# Compiles the CUDA-only code (every source with a `#if CKPT_HAS_CUDA` block) with
# CKPT_HAS_CUDA=1 on a machine without a GPU: against Debian's LibTorch 1.13 headers, which
# include c10/cuda and ATen/cuda, and the CUDA toolkit's headers ($CUDA_HOME, else
# /usr/local/cuda). Syntax and types only, nothing is linked or run: it keeps the CUDA path
# compiling as the code around it changes, between the sessions that have a GPU. Where there
# are no CUDA headers it says so and exits 0. CI runs it (.ci/run).
#
#   tools/check_cuda_compile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
torch_include="${TORCH_INCLUDE:-/usr/include}"
if [[ ! -f "$cuda_home/include/cuda_runtime_api.h" ]]; then
  echo "check_cuda_compile: no CUDA headers at $cuda_home/include: skipped"
  exit 0
fi
[[ -f "$torch_include/c10/cuda/CUDACachingAllocator.h" ]] || {
  echo "check_cuda_compile: no LibTorch CUDA headers under $torch_include" >&2
  exit 1
}
mapfile -t sources < <(grep -l --include='*.cc' -r 'if CKPT_HAS_CUDA' core strategies models experiments)
((${#sources[@]} > 0)) || {
  echo "check_cuda_compile: no source has a CKPT_HAS_CUDA block" >&2
  exit 1
}
# The one header a CUDA build of LibTorch generates that Debian's CPU build lacks.
generated=$(mktemp -d)
trap 'rm -rf "$generated"' EXIT
mkdir -p "$generated/c10/cuda/impl"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' \
  >"$generated/c10/cuda/impl/cuda_cmake_macros.h"
status=0
for source in "${sources[@]}"; do
  if "${CXX:-g++}" -std=c++17 -fsyntax-only -Wall -Werror=return-type -DCKPT_HAS_CUDA=1 \
    -I. -I"$generated" -I"$torch_include" -I"$torch_include/torch/csrc/api/include" \
    -isystem "$cuda_home/include" "$source"; then
    echo "check_cuda_compile: $source compiles with CKPT_HAS_CUDA=1"
  else
    echo "check_cuda_compile: $source does not compile with CKPT_HAS_CUDA=1" >&2
    status=1
  fi
done
exit "$status"
