#!/usr/bin/env bash
# Builds ckptlab with CMake on a GPU host that has a pip torch with CUDA but no Bazel, runs the
# test binaries (and the conformance suite on CUDA), then the sweep on CUDA. Everything lands
# in results/gpu-<timestamp>/; if $OUT is set (the device tool returns at most 8 files from
# it), the report, the CSV, the plot, the log and a tarball of the whole folder are copied
# there.
#
# The C++ dependencies come from third_party/cmake_bundle (make it with
# tools/make_cmake_bundle.sh on a Debian 12 machine and carry it along). LibTorch comes from
# the Python in PATH (or $PYTHON): its torch package's share/cmake/Torch.
#
#   tools/gpu/run.sh                       # build, ctest, sweep
#   CKPT_SWEEP_ARGS="--steps=3" tools/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-python3}"
out="results/gpu-$(date +%Y%m%d-%H%M%S)"
bundle="${CKPT_BUNDLE:-$PWD/third_party/cmake_bundle}"
build="${CKPT_BUILD_DIR:-build/gpu}"
mkdir -p "$out"
log() { echo "[gpu/run.sh $(date +%H:%M:%S)] $*" | tee -a "$out/run.log" >&2; }

[[ -d "$bundle/include/absl" ]] || {
  log "no C++ bundle at $bundle: run tools/make_cmake_bundle.sh on a Debian 12 machine first"
  exit 2
}
torch_cmake=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
log "torch $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  | tee "$out/gpu.txt" >&2 || true

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
log "configuring ($build)"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_cmake;$bundle" \
  -Dabsl_DIR="$bundle/lib/x86_64-linux-gnu/cmake/absl" \
  -DGTest_DIR="$bundle/lib/x86_64-linux-gnu/cmake/GTest" \
  -Drapidcheck_DIR="$bundle/lib/x86_64-linux-gnu/cmake/rapidcheck" \
  -DCMAKE_CUDA_ARCHITECTURES=native 2>&1 | tee "$out/configure.log" | tail -5 >&2
log "building"
cmake --build "$build" -j "$(nproc)" 2>&1 | tee "$out/build.log" | tail -3 >&2

log "tests"
set +e
ctest --test-dir "$build" --output-on-failure -j 4 2>&1 | tee "$out/ctest.log" | tail -15 >&2
tests_status=${PIPESTATUS[0]}
set -e

log "conformance suite on CUDA (every strategy x every model against store_all)"
set +e
CKPT_TEST_DEVICE=cuda "$build/conformance_test" 2>&1 | tee "$out/conformance_cuda.log" | tail -15 >&2
cuda_status=${PIPESTATUS[0]}
set -e
((tests_status == 0)) && tests_status=$cuda_status

log "sweep on CUDA"
# The classic demonstration sizes (issue "Measurement" names them the paper preset).
models="heavy_mlp:depth=20:hidden=4096:batch=32,heavy_mlp:depth=40:hidden=4096:batch=64"
models+=",deep_mlp:depth=20:hidden=1024:batch=32,transformer"
models+=",gpt2:size=small:seq=256:batch=2,gpt2:size=medium:seq=256:batch=2"
# shellcheck disable=SC2086
"$build/sweep" --device=cuda --models="$models" --out="$out" ${CKPT_SWEEP_ARGS:-} \
  > >(tee "$out/sweep.txt") 2> >(tee "$out/sweep.stderr" >&2)
log "done: results in $out (tests exit status $tests_status)"
if [[ -n "${OUT:-}" ]]; then
  tar czf "$OUT/gpu-results.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
  for f in report.md results.csv pareto.png run.log; do
    [[ -f "$out/$f" ]] && cp "$out/$f" "$OUT/"
  done
fi
exit "$tests_status"
