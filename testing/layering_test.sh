#!/usr/bin/env bash
# The floors of core/ include only what their BUILD files say they may depend on:
#   core/base   Abseil and the C++ library: no LibTorch, no other floor;
#   core/plan   core/base: no LibTorch (planning builds and runs without it);
#   core/run    core/plan, core/base, LibTorch: never core/train or core/dist;
#   core/train  core/run and below: never core/dist;
# and no strategy plugin includes another.
# Bazel's visibility already refuses such a dependency between targets; this catches the
# include that needs no target (LibTorch's headers sit on the system include path). Under Bazel
# the sources are in the runfiles; under CMake's ctest, $CKPT_SOURCE_ROOT names the checkout.
set -uo pipefail
root="${CKPT_SOURCE_ROOT:-$TEST_SRCDIR/ckptlab}"
failures=0
# Fails for each #include in the floor $1 that matches the extended regex $2 (what it names).
refuse() {
  local floor=$1 pattern=$2 what=$3 hits
  [[ -d "$root/core/$floor" ]] || {
    echo "FAIL: no folder $root/core/$floor" >&2
    failures=$((failures + 1))
    return
  }
  hits=$(grep -nHE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" \
    "$root/core/$floor"/*.h "$root/core/$floor"/*.cc 2>/dev/null)
  if [[ -n "$hits" ]]; then
    echo "FAIL: core/$floor includes $what:" >&2
    echo "${hits//$root\//}" >&2
    failures=$((failures + 1))
  fi
}
libtorch='ATen/|c10/|torch/|caffe2/'
refuse base "$libtorch|core/(plan|run|train|dist)/" "LibTorch or a floor above it"
refuse plan "$libtorch|core/(run|train|dist)/" "LibTorch or a floor above it"
refuse run "core/(train|dist)/" "a floor above it"
refuse train "core/dist/" "core/dist"
# A strategy plugin (strategies/<id>.cc) includes the libraries plugins share, never another
# plugin; only plan_file.cc, the `plan` plugin, includes its own header.
hits=$(grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"strategies/' "$root"/strategies/*.cc |
  grep -vE '"strategies/(plan_builders|chain_solver)\.h"' |
  grep -vE '^[^:]*/(plan_file|plan_builders|chain_solver)\.cc:')
if [[ -n "$hits" ]]; then
  echo "FAIL: a strategy plugin includes another's file:" >&2
  echo "${hits//$root\//}" >&2
  failures=$((failures + 1))
fi
# Each floor has sources (a glob that matched nothing would pass everything above).
for floor in base plan run train dist; do
  n=$(find "$root/core/$floor" -maxdepth 1 \( -name '*.h' -o -name '*.cc' \) | wc -l)
  ((n > 0)) || {
    echo "FAIL: core/$floor has no sources here" >&2
    failures=$((failures + 1))
  }
done
((failures == 0)) && echo "the floors of core include only what lies below them"
exit $((failures > 0))
