#!/usr/bin/env bash
# Rehearses tools/gpu/run.sh on a CPU machine under the conditions of a GPU host, so that a
# session lent a GPU does not spend its minutes on a broken script:
#   - the C++ bundle is made afresh (tools/make_cmake_bundle.sh), or is $CKPT_BUNDLE's;
#   - every file of the installed packages built from the bundle's sources (Abseil,
#     GoogleTest/GoogleMock, RapidCheck, Google Benchmark) is hidden (whited out by an overlay in
#     a private mount namespace), as on the GPU host, which has none of them: the build succeeds
#     only from the bundle; gnuplot too;
#   - LibTorch is $PYTHON's torch where $PYTHON is set (CI's: PyPI's CUDA wheel in the pinned
#     environment of tools/python_env.sh, whose Python also runs the Python tests), else
#     $CKPT_TORCH_CMAKE_DIR's, else the system's; the device is the CPU, so the sweep is small.
# Then it checks what run.sh handed back in $OUT, that tools/gpu/publish.sh turns it into a
# docs/results folder, that the programs it built load their libraries from the bundle, and
# that a sweep killed at the budget's end still leaves a report.
# CI runs this on PyPI's torch, building every target (.ci/run); tools/check_libtorch_versions.sh
# runs it in other Debian releases' roots, on their LibTorch. Needs root for the mount namespace;
# where that is refused, it says so and runs without hiding the packages.
#
# --all, as CI runs it: every target built, and ctest runs every test but the sweep command
# line's two end-to-end tests (CI's bare root runs them: their flags, folders and hostile input
# are the same code whatever the LibTorch) and those testing/BUILD tags no_torch (their outcome
# is the same whatever torch is installed), RapidCheck's properties at most 25 cases each
# (RC_PARAMS; what differs between LibTorch versions shows in most cases of a property, and the
# full search runs against 1.13 in CI's bare root). The LibTorch must be a CUDA build that CMake
# finds with CUDA and NCCL, of the toolkit's CUDA major version where there is an nvcc (Python's
# torch.version.cuda against it; LibTorch's CMake config compiles with it).
#
#   tools/gpu/rehearse.sh            # most of its time compiling
#   PYTHON=/var/tmp/ckptlab-pypi-env/bin/python tools/gpu/rehearse.sh --all   # CI's
set -euo pipefail
cd "$(dirname "$0")/../.."
# The inner half, run in the private mount namespace: hide the packages, then run run.sh.
if [[ "${1:-}" == --inside ]]; then
  bundle=$2 root=$3
  shift 3
  # The bundle's packages may be another release's: what is hidden is every package installed
  # here that is built from the same sources.
  # shellcheck disable=SC2046
  sources=$(dpkg-query -W -f='${source:Package}\n' \
    $(sed -n 's/^  \([^ ]*\) .*/\1/p' "$bundle/PACKAGES") 2>/dev/null | sort -u || true)
  packages=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${source:Package}\n' |
    awk -v sources=" $(echo $sources) " '$1 == "ii" && index(sources, " " $3 " ") { print $2 }')
  [[ -n "$packages" ]] ||
    { echo "rehearse: none of the bundle's packages is installed here" >&2; exit 1; }
  # Every file of those packages, and gnuplot (not on the GPU host's image either).
  # shellcheck disable=SC2086
  hide=$( (dpkg -L $packages; ls -d /usr/bin/gnuplot*) | sort -u)
  for dir in /usr/include /usr/lib/x86_64-linux-gnu /usr/bin; do
    layer="$root/overlay${dir//\//_}"
    mkdir -p "$layer"
    mount -t tmpfs tmpfs "$layer"
    mkdir -p "$layer/upper" "$layer/work"
    # A character device 0:0 in the upper layer is an overlay whiteout: the file is gone.
    grep "^$dir/" <<<"$hide" | while read -r path; do
      if [[ -f "$path" || -L "$path" ]]; then
        mkdir -p "$layer/upper/$(dirname "${path#"$dir"/}")"
        mknod "$layer/upper/${path#"$dir"/}" c 0 0
      fi
    done
    mount -t overlay overlay \
      -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" "$dir"
  done
  if [[ -e /usr/include/absl/status/status.h || -e /usr/include/gtest/gtest.h ]] ||
    command -v gnuplot >/dev/null; then
    echo "rehearse: the packages are still visible" >&2
    exit 1
  fi
  echo "rehearse: Debian's $(wc -w <<<"$packages") packages and gnuplot hidden" >&2
  exec "$@"
fi

all=no
case "${1:-}" in
  --all) all=yes ;;
  "") ;;
  *)
    echo "rehearse: unknown argument '$1'; accepted: --all, or none" >&2
    exit 2
    ;;
esac
root=$(mktemp -d /tmp/ckpt-rehearsal.XXXXXX)
failures=0
fail() {
  echo "rehearse: FAIL: $*" >&2
  failures=$((failures + 1))
}

bundle=${CKPT_BUNDLE:-}
if [[ -z "$bundle" ]]; then
  bundle=$root/bundle
  tools/make_cmake_bundle.sh "$bundle" >&2
fi

export OUT="$root/out"
mkdir -p "$OUT"
# Every run.sh call here: the LibTorch and the bundle above, one build folder. By default it
# builds the library, the programs, the tests a GPU run's device phases run and three that use
# every bundled test library (GoogleTest, GoogleMock, RapidCheck) and the registries' lists, and
# ctest runs those less conformance_test, which is long on a CPU; --all sets both (above).
torch_cmake=${CKPT_TORCH_CMAKE_DIR:-}
[[ -n "$torch_cmake" || -n "${PYTHON:-}" ]] || torch_cmake=/usr/lib/x86_64-linux-gnu/cmake/Torch
python=${PYTHON:-/usr/bin/python3}
if [[ $all == yes ]]; then
  no_torch=$(awk '/^    name = "/ { gsub(/[",]/, "", $3); name = $3 }
    /^    tags = \["no_torch"\]/ { print name }' testing/BUILD | paste -sd'|')
  export CKPT_BUILD_TARGETS=""
  export CKPT_CTEST_EXCLUDE="^(sweep_cli_test|sweep_hostile_test|$no_torch)(_shard[0-9]+)?\$"
  export RC_PARAMS="${RC_PARAMS:-max_success=25}"
fi
host=(CKPT_TORCH_CMAKE_DIR="$torch_cmake"
      CKPT_BUNDLE="$bundle"
      CKPT_BUILD_DIR="$root/build"
      CKPT_BUILD_TARGETS="${CKPT_BUILD_TARGETS-sweep benchmarks device_meter_test conformance_test registry_test model_registry_test plan_text_test}")
# The oneDNN of Debian trixie's LibTorch 2.6 sizes convolution blocks by the CPU's cache sizes,
# which a virtual machine may report as none: it then divides by zero (SIGFPE) in a strided
# convolution's backward, plain PyTorch as much as ckptlab, and no GPU host trips on it. Where
# this probe dies so, the rehearsal runs oneDNN's SSE4.1 kernels, which read no cache sizes.
probe='import torch
x = torch.randn(2, 1024, 2, 2, requires_grad=True)
w = torch.randn(2048, 1024, 1, 1)
torch.nn.functional.conv2d(x, w, stride=2).sum().backward()'
# (Without torch both runs fail, and nothing is set.)
if ! "$python" -c "$probe" 2>/dev/null &&
  ONEDNN_MAX_CPU_ISA=SSE41 "$python" -c "$probe" 2>/dev/null; then
  host+=(ONEDNN_MAX_CPU_ISA=SSE41)
  echo "rehearse: oneDNN's convolution backward dies on this CPU (no cache sizes reported?);" \
    "ONEDNN_MAX_CPU_ISA=SSE41 for every run here" >&2
fi
run=(env "${host[@]}" CKPT_DEVICE=cpu CKPT_RESULTS_DIR="$root/results"
     CKPT_CTEST_EXCLUDE="${CKPT_CTEST_EXCLUDE-^conformance_test(_shard[0-9]+)?\$}"
     CKPT_TIME_BUDGET_S="${CKPT_TIME_BUDGET_S:-3000}"
     CKPT_SWEEP_ARGS="--models=heavy_mlp:depth=4:hidden=64:batch=8,transformer:depth=2:hidden=32:heads=2:seq=16:batch=2 --steps=2 --warmup=1"
     CKPT_AMP_MODELS="transformer:depth=2:hidden=16:heads=2:seq=8:batch=2,gpt2:depth=2:hidden=16:heads=2:seq=8:batch=2:vocab=64:context=8"
     tools/gpu/run.sh)
hidden=yes
if unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private "$0" --inside "$bundle" "$root" "${run[@]}" ||
    fail "run.sh exited $?"
else
  hidden=no
  echo "rehearse: no private mount namespace here (not root?): Debian's packages stay visible" >&2
  "${run[@]}" || fail "run.sh exited $?"
fi

# What the device tool would bring back. Without gnuplot there is no pareto.png, but its data
# and script are in the tarball, to be drawn where gnuplot is.
for f in report.md results.csv run.log ctest.log gpu-results.tar.gz; do
  [[ -s "$OUT/$f" ]] || fail "no $f in \$OUT"
done
[[ $hidden == yes || -s "$OUT/pareto.png" ]] || fail "no pareto.png in \$OUT"
# Listed once: `tar | grep -q` fails under pipefail when grep stops reading early.
listing=$(tar tzf "$OUT/gpu-results.tar.gz" || true)
grep -q "/pareto.gp$" <<<"$listing" || fail "no pareto.gp in the tarball"
# The mixed-precision training check: its folder in the tarball, its curves in run.log.
grep -q "/amp/losses.csv$" <<<"$listing" || fail "no amp/losses.csv in the tarball"
grep -q "amp: | gpt2:.* | chunked_sequence:chunks=4 | ok |" "$OUT/run.log" ||
  fail "run.log has no ok mixed-precision curve for gpt2 under chunked_sequence"
[[ $hidden == no ]] || grep -q "pareto.png was not drawn: gnuplot is not installed" "$OUT/report.md" ||
  fail "report.md does not say why pareto.png is missing"
(($(find "$OUT" -type f | wc -l) <= 8)) || fail "more than the 8 files the device tool returns"
if [[ -f "$OUT/results.csv" ]]; then
  # Both models under every registered strategy that runs from its defaults (the default list,
  # DefaultStrategies: one with a required parameter, plan's file, runs only when named), each ok.
  strategies=$("$root/build/sweep" --list | awk '
    /^strategies:/ { on = 1; next }
    on && /^$/ { on = 0 }
    on && /^  [a-z]/ { n++; id = $1; next }
    on && /\(required\)/ && !(id in required) { required[id] = 1; n-- }
    END { print n + 0 }')
  rows=$(grep -c ',cpu,ok,' "$OUT/results.csv" || true)
  ((strategies >= 5 && rows == 2 * strategies)) ||
    fail "results.csv: expected 2 models x $strategies strategies ok, got $rows ok rows"
fi
# ctest's summary line, passed on for .ci/run's count.
grep -E "tests passed, [0-9]+ tests? failed out of" "$OUT/ctest.log" || fail "ctest printed no summary"
grep -q "100% tests passed" "$OUT/ctest.log" 2>/dev/null || fail "ctest: $(tail -3 "$OUT/ctest.log")"
# Asked for CUDA where there is none, the conformance suite and run.sh refuse loudly rather
# than measure the CPU under a GPU's name.
set +e
CKPT_TEST_DEVICE=cuda timeout --signal=KILL 120 "$root/build/conformance_test" >/dev/null \
  2>"$root/cuda.stderr"
rc=$?
set -e
# (A CPU LibTorch says it has no CUDA; a CUDA one, that it sees no GPU.)
((rc == 2)) &&
  grep -qE "CKPT_TEST_DEVICE: .*(without CUDA|no CUDA GPU is visible)" "$root/cuda.stderr" ||
  fail "CKPT_TEST_DEVICE=cuda without CUDA: exit $rc, $(cat "$root/cuda.stderr")"
if command -v nvidia-smi >/dev/null; then
  echo "rehearse: nvidia-smi is here; the no-GPU refusal of run.sh is not checked" >&2
else
  set +e
  # Without $OUT: the run's files stay in its results folder, and $OUT keeps the rehearsal's.
  env -u OUT "${host[@]}" CKPT_DEVICE=cuda CKPT_RESULTS_DIR="$root/no-gpu" tools/gpu/run.sh \
    2>"$root/no-gpu.stderr"
  rc=$?
  set -e
  ((rc == 2)) && grep -q "sees no GPU" "$root/no-gpu.stderr" ||
    fail "run.sh with CKPT_DEVICE=cuda and no GPU: exit $rc, $(cat "$root/no-gpu.stderr")"
fi
# A sweep that overruns even the reserve is killed at the budget's end; run.sh then writes
# report.md from the rows it left (sweep --report_only). Here the first model cannot finish in
# the 40 s budget (what the build's check leaves of it, less 10 s that run.sh keeps for the
# report), so the report is all "incomplete"; run.sh exits 1.
killed_args="--models=heavy_mlp:depth=8:hidden=512:batch=512,heavy_mlp:depth=2:hidden=8:batch=2"
killed_args+=" --steps=100000"
set +e
env -u OUT "${host[@]}" CKPT_DEVICE=cpu CKPT_STEPS=sweep CKPT_TIME_BUDGET_S=40 \
  CKPT_SWEEP_RESERVE_S=5 CKPT_RESULTS_DIR="$root/killed" CKPT_SWEEP_ARGS="$killed_args" \
  tools/gpu/run.sh 2>"$root/killed.stderr"
rc=$?
set -e
((rc == 1)) && grep -q "killed at the budget's end" "$root/killed.stderr" ||
  fail "run.sh with a sweep past its budget: exit $rc, $(tail -5 "$root/killed.stderr")"
grep -q "written with --report_only" "$root/killed/report.md" 2>/dev/null &&
  grep -A2 "^## Incomplete" "$root/killed/report.md" | grep -q "heavy_mlp:depth=8:hidden=512" ||
  fail "run.sh wrote no report.md naming the killed model: $(tail -5 "$root/killed.stderr")"
# The phases of a measuring run (CKPT_STEPS="conformance jobs"): the device's tests within their
# bound, each job in a folder of its own, one killed at its seconds, and $OUT's tarball made
# again after each; a jobs file with a bad line is refused before anything runs.
printf '%s\n' "# comment" \
  "small 60 --models=heavy_mlp:depth=4:hidden=64:batch=8 --strategies=uniform --steps=1" \
  "slow 3 --models=heavy_mlp:depth=8:hidden=512:batch=512 --steps=100000" >"$root/jobs"
mkdir -p "$root/jobs-out"
set +e
env "${host[@]}" OUT="$root/jobs-out" CKPT_DEVICE=cpu CKPT_STEPS="conformance jobs" \
  CKPT_CONFORMANCE_S=120 RC_PARAMS=max_success=1 CKPT_JOBS="$root/jobs" \
  CKPT_RESULTS_DIR="$root/jobs-run" tools/gpu/run.sh 2>"$root/jobs.stderr"
rc=$?
set -e
jobs_listing=$(tar tzf "$root/jobs-out/gpu-results.tar.gz" 2>/dev/null || true)
((rc == 1)) && grep -q "conformance_test: \[  PASSED  \]" "$root/jobs.stderr" &&
  grep -q "job slow killed at 3 s" "$root/jobs.stderr" &&
  [[ -s "$root/jobs-run/jobs/small/results.csv" ]] &&
  grep -q "/jobs/small/results.csv$" <<<"$jobs_listing" ||
  fail "run.sh's conformance and jobs phases: exit $rc, $(tail -5 "$root/jobs.stderr")"
echo "bad-line sixty --steps=1" >"$root/bad-jobs"
set +e
env -u OUT "${host[@]}" CKPT_DEVICE=cpu CKPT_STEPS=jobs CKPT_JOBS="$root/bad-jobs" \
  CKPT_RESULTS_DIR="$root/bad-jobs-run" tools/gpu/run.sh 2>"$root/bad-jobs.stderr"
rc=$?
set -e
((rc == 2)) && grep -q "CKPT_JOBS line 'bad-line sixty ...' is not accepted" "$root/bad-jobs.stderr" ||
  fail "run.sh with a bad jobs line: exit $rc, $(tail -3 "$root/bad-jobs.stderr")"
# tools/gpu/publish.sh on what came back, as a GPU session will run it: the folder to commit,
# with the plot drawn here; refusals leave nothing behind.
docs="$root/docs"
if ! command -v gnuplot >/dev/null; then
  echo "rehearse: no gnuplot here: tools/gpu/publish.sh is not checked" >&2
elif [[ -s "$OUT/gpu-results.tar.gz" ]]; then
  set +e
  CKPT_DOCS_DIR="$docs" tools/gpu/publish.sh "$OUT" 2>"$root/publish.stderr"
  rc=$?
  set -e
  ((rc == 2)) && grep -q "no gpu.txt (not a CUDA run?): give a NAME" "$root/publish.stderr" ||
    fail "publish.sh on a CPU run without NAME: exit $rc, $(cat "$root/publish.stderr")"
  CKPT_DOCS_DIR="$docs" tools/gpu/publish.sh "$OUT" rehearsal-cpu >&2 || fail "publish.sh exited $?"
  for f in README.md report.md results.csv pareto.png pareto.gp run.log ctest.log \
    amp/report.md amp/losses.csv amp/loss.png; do
    [[ -s "$docs/rehearsal-cpu/$f" ]] || fail "publish.sh: no $f in $docs/rehearsal-cpu"
  done
  grep -q '^| \[amp/report.md\](amp/report.md) |' "$docs/rehearsal-cpu/README.md" ||
    fail "publish.sh: the index does not link amp/report.md"
  ! grep -q "was not drawn" "$docs/rehearsal-cpu/report.md" ||
    fail "publish.sh drew pareto.png but report.md still says it was not drawn"
  grep -q '^| \[pareto.png\](pareto.png) |' "$docs/rehearsal-cpu/README.md" ||
    fail "publish.sh: the index does not link pareto.png"
  set +e
  CKPT_DOCS_DIR="$docs" tools/gpu/publish.sh "$OUT" rehearsal-cpu 2>"$root/publish.stderr"
  rc=$?
  set -e
  ((rc == 2)) && grep -q "rehearsal-cpu exists" "$root/publish.stderr" ||
    fail "publish.sh over an existing folder: exit $rc, $(cat "$root/publish.stderr")"
  [[ -z $(find "$docs" -mindepth 1 -maxdepth 1 -name '.publish.*' 2>/dev/null) ]] ||
    fail "publish.sh left a staging folder in $docs"
fi
# --all: a build without warnings, CUDA and NCCL found by CMake (LibTorch's config found the
# toolkit, the NCCL route is on), and LibTorch's CUDA of the toolkit's major version.
if [[ $all == yes ]]; then
  # (A warning may be GCC's reading of ckptlab's code through LibTorch's inlined headers, as
  # -Wmaybe-uninitialized through an optional<Tensor>'s destructor was: it is still a warning.)
  ! grep -E "^[^ ]+:[0-9]+:[0-9]+: warning:" "$root/results/build.log" ||
    fail "the build printed the warnings above"
  grep -q "ckptlab: .*CUDA 1" "$OUT/run.log" || fail "CMake found no CUDA in the LibTorch"
  grep -q "ckptlab: .*NCCL 1" "$OUT/run.log" || fail "CMake found no NCCL beside the LibTorch"
  torch_cuda=$("$python" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)
  nvcc_cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p' || true)
  if [[ -n "$torch_cuda" && -n "$nvcc_cuda" ]]; then
    echo "rehearse: LibTorch's CUDA $torch_cuda, the toolkit's nvcc $nvcc_cuda" >&2
    [[ ${torch_cuda%%.*} == "${nvcc_cuda%%.*}" ]] ||
      fail "LibTorch's CUDA $torch_cuda and nvcc's $nvcc_cuda differ in major version"
  fi
fi
# The programs load Abseil from the bundle, not from the system (hidden or not).
absl=$(ldd "$root/build/sweep" | grep -m1 'libabsl_' || true)
[[ "$absl" == *"$bundle/"* ]] || fail "sweep loads Abseil from elsewhere: $absl"

if ((failures)); then
  grep -B2 -A25 -E "^[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Failed" "$OUT/ctest.log" 2>/dev/null |
    tail -80 >&2 || true
  echo "rehearse: $failures check(s) failed (packages hidden: $hidden); everything is in $root" >&2
  exit 1
fi
rm -rf "$root"
echo "rehearse: run.sh built, tested and swept from the bundle alone (packages hidden: $hidden)"
