#!/usr/bin/env bash
# Compiles the CUDA-only code (every source with a `#if CKPT_HAS_CUDA` or `#if CKPT_HAS_NCCL`
# block) with CKPT_HAS_CUDA=1, and CKPT_HAS_NCCL=1 where CUDA's headers include NCCL's nccl.h
# (with Gloo's, where they are, as a CUDA LibTorch's build has both), on a machine without a
# GPU: against the LibTorch headers under $TORCH_INCLUDE (default /usr/include: Debian's
# LibTorch 1.13, which includes c10/cuda and ATen/cuda) in the C++ standard that version needs,
# and the CUDA toolkit's headers ($CUDA_HOME, else /usr/local/cuda). Syntax and types only,
# nothing is linked or run: it keeps the CUDA path compiling as the code around it changes,
# between the sessions that have a GPU. Where there are no CUDA headers it says so and exits 0.
# CI runs it (.ci/run), and tools/check_libtorch_versions.sh runs it against LibTorch 2.x.
#
# It also checks the one CMake step the CUDA route depends on that a CPU LibTorch never runs:
# tools/cmake/torch_nvtx3.cmake must make LibTorch 2.x's NVTX 3 search (the find_path line of
# its Caffe2/public/cuda.cmake, repeated below) find this toolkit's headers; without it that
# search fails in any project but PyTorch's own, and CUDA 12.9+ has no old NVTX to fall back on.
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
mapfile -t sources < <(grep -l --include='*.cc' -r -E 'if CKPT_HAS_(CUDA|NCCL)' core strategies models experiments)
((${#sources[@]} > 0)) || {
  echo "check_cuda_compile: no source has a CKPT_HAS_CUDA block" >&2
  exit 1
}
generated=$(mktemp -d)
trap 'rm -rf "$generated"' EXIT
# The one header a CUDA build of LibTorch generates, for CPU packages that ship c10/cuda without
# it (Debian's).
if [[ ! -f "$torch_include/c10/cuda/impl/cuda_cmake_macros.h" ]]; then
  mkdir -p "$generated/c10/cuda/impl"
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' \
    >"$generated/c10/cuda/impl/cuda_cmake_macros.h"
fi
# LibTorch's headers as system headers (their warnings are not ours); /usr/include already is
# one, and naming it again would break the C++ library's #include_next.
torch_flags=(-isystem "$torch_include/torch/csrc/api/include")
[[ "$torch_include" == /usr/include ]] || torch_flags=(-isystem "$torch_include" "${torch_flags[@]}")
# The LibTorch version (torch/version.h, or in newer releases the torch/headeronly/version.h it
# includes), for the C++ standard: 20 from 2.14 on, as the CMake build picks, else 17.
version_h=("$torch_include/torch/csrc/api/include/torch/version.h"
  "$torch_include/torch/headeronly/version.h")
torch_define() { sed -n "s/^#define $1 \([0-9]*\)\$/\1/p" "${version_h[@]}" 2>/dev/null || true; }
major=$(torch_define TORCH_VERSION_MAJOR)
minor=$(torch_define TORCH_VERSION_MINOR)
[[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || {
  echo "check_cuda_compile: no TORCH_VERSION_MAJOR/MINOR in ${version_h[*]}" >&2
  exit 1
}
std=c++17
((major > 2 || (major == 2 && minor >= 14))) && std=c++20
against="LibTorch $major.$minor, C++${std#c++}"
# The data-parallel backends as a CUDA LibTorch's build would have them: NCCL where nccl.h is,
# Gloo where its headers are (with the shim for a LibTorch that lacks one header reducer.hpp
# reads, as libtorch.bzl adds it).
backend_flags=(-DCKPT_HAS_NCCL=0 -DCKPT_HAS_GLOO=0)
if [[ -f "$cuda_home/include/nccl.h" ]]; then
  backend_flags[0]=-DCKPT_HAS_NCCL=1
  against+=", NCCL"
fi
for dir in "$torch_include" /usr/include; do
  if [[ -f "$dir/gloo/algorithm.h" ]]; then
    backend_flags[1]=-DCKPT_HAS_GLOO=1
    [[ -f "$torch_include/torch/csrc/distributed/autograd/context/context.h" ]] ||
      backend_flags+=(-isystem third_party/libtorch/shims)
    against+=", Gloo"
    break
  fi
done
status=0
if command -v cmake >/dev/null && [[ -d "$cuda_home/include/nvtx3" ]]; then
  project="$generated/nvtx3_check"
  mkdir -p "$project"
  cat >"$project/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(nvtx3_check LANGUAGES CXX)
include("$PWD/tools/cmake/torch_nvtx3.cmake")
include(FindPackageHandleStandardArgs)
find_path(nvtx3_dir NAMES nvtx3 PATHS "\${PROJECT_SOURCE_DIR}/third_party/NVTX/c/include" NO_DEFAULT_PATH)
find_package_handle_standard_args(nvtx3 DEFAULT_MSG nvtx3_dir)
message(STATUS "nvtx3_check: \${nvtx3_FOUND} \${nvtx3_dir}")
EOF
  configured=$(CUDAToolkit_ROOT="$cuda_home" cmake -S "$project" -B "$project/build" 2>&1) || true
  if grep -q "nvtx3_check: TRUE $cuda_home/include\$" <<<"$configured"; then
    echo "check_cuda_compile: LibTorch's NVTX 3 search finds $cuda_home/include/nvtx3"
  else
    echo "check_cuda_compile: tools/cmake/torch_nvtx3.cmake does not lead LibTorch's NVTX 3" \
      "search to $cuda_home/include:" >&2
    echo "$configured" >&2
    status=1
  fi
fi
# The sources compile side by side (each on a core of its own), their verdicts said in order.
# Deprecations are errors: what a LibTorch deprecates, a later one removes.
pids=()
for k in "${!sources[@]}"; do
  "${CXX:-g++}" -std="$std" -fsyntax-only -Wall -Werror=return-type \
    -Werror=deprecated-declarations -DCKPT_HAS_CUDA=1 "${backend_flags[@]}" -I. \
    "${torch_flags[@]}" -isystem "$generated" -isystem "$cuda_home/include" "${sources[k]}" \
    >"$generated/compile.$k.log" 2>&1 &
  pids+=($!)
done
for k in "${!sources[@]}"; do
  if wait "${pids[k]}"; then
    cat "$generated/compile.$k.log"
    echo "check_cuda_compile: ${sources[k]} compiles with CKPT_HAS_CUDA=1 ($against)"
  else
    cat "$generated/compile.$k.log" >&2
    echo "check_cuda_compile: ${sources[k]} does not compile with CKPT_HAS_CUDA=1 ($against)" >&2
    status=1
  fi
done
exit "$status"
