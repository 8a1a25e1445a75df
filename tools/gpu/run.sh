#!/usr/bin/env bash
# Builds ckptlab with CMake on a host that has a LibTorch but no Bazel (the lent GPU machines:
# a pip torch with CUDA), runs the test binaries, then on the device: the memory meter and
# conformance tests, the benchmarks, mixed-precision training (float16 with dynamic loss
# scaling on CUDA) and the paper-preset sweep, within a time budget. Everything lands in
# results/gpu-<timestamp>/; if $OUT is set (the device tool returns at most 8 files from it),
# the report, CSV, plot, logs and a tarball of the whole folder are copied there.
#
# The C++ dependencies come from third_party/cmake_bundle (tools/make_cmake_bundle.sh, made on
# a Debian 12 machine and carried along). LibTorch comes from the Python in PATH (or $PYTHON),
# or from $CKPT_TORCH_CMAKE_DIR. tools/gpu/rehearse.sh runs this script on a CPU machine with
# Debian's copies of those libraries hidden, which is how CI checks it.
#
#   tools/gpu/run.sh                        # build, tests, sweep on CUDA
#
# Settings, from the environment:
#   CKPT_DEVICE=cuda          the device for the conformance suite and the sweep (cpu: rehearsal)
#   CKPT_TIME_BUDGET_S=570    the whole run's budget: the sweep gets what the build and tests
#                             left, less a reserve, through --time_limit_s (default fits the
#                             device tool's 10-minute call)
#   CKPT_SWEEP_RESERVE_S=90   of what is left for the sweep, the part kept for the model in
#                             flight when its time limit passes; past even that the sweep is
#                             killed, and report.md is written from its rows (--report_only)
#   CKPT_STEPS="build test sweep"   which phases to run (build is always needed on a bare host);
#                             also `conformance` (the device's meter and conformance tests
#                             alone, each within CKPT_CONFORMANCE_S, RC_PARAMS as given) and
#                             `jobs` (the sweeps CKPT_JOBS lists, each within its seconds)
#   CKPT_BUILD_TARGETS="..."  build only these CMake targets (default: all); ctest then runs
#                             those of them that are tests
#   CKPT_CONFORMANCE_S=120    the conformance phase's bound per test binary
#   CKPT_JOBS=FILE            the jobs phase's list: a line per sweep, `name seconds flags...`
#                             (flags split at spaces, never through a shell; `#` comments);
#                             each runs with --device and --out=<results>/jobs/<name>
#   CKPT_SWEEP_ARGS="..."     more sweep flags; they come last, so --models=... overrides
#   CKPT_AMP_MODELS="..."     the models of the mixed-precision training check (test phase)
#   CKPT_CTEST_EXCLUDE=REGEX  tests ctest leaves out (its -E), where another run covers them;
#                             a test run in shards is NAME_shard0, NAME_shard1, ... there
#   CKPT_TORCH_CMAKE_DIR=DIR  LibTorch's CMake prefix, instead of asking Python's torch
#   CKPT_BUNDLE, CKPT_BUILD_DIR, CKPT_RESULTS_DIR   where the bundle, build and results are
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
python="${PYTHON:-python3}"
device="${CKPT_DEVICE:-cuda}"
budget="${CKPT_TIME_BUDGET_S:-570}"
reserve="${CKPT_SWEEP_RESERVE_S:-90}"
amp_models="transformer:depth=4:hidden=256:heads=4:seq=128:batch=8"
amp_models+=",gpt2:depth=4:hidden=256:heads=4:seq=128:batch=8:vocab=8192:context=128"
amp_models="${CKPT_AMP_MODELS:-$amp_models}"
steps=" ${CKPT_STEPS:-build test sweep} "
build_targets="${CKPT_BUILD_TARGETS:-}"
conformance_s="${CKPT_CONFORMANCE_S:-120}"
jobs_file="${CKPT_JOBS:-}"
ctest_exclude="${CKPT_CTEST_EXCLUDE:-}"
bundle="${CKPT_BUNDLE:-$PWD/third_party/cmake_bundle}"
build="${CKPT_BUILD_DIR:-build/gpu}"
out="${CKPT_RESULTS_DIR:-results/gpu-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
log() { echo "[gpu/run.sh +$((SECONDS - start))s] $*" | tee -a "$out/run.log" >&2; }
die() {
  log "error: $*"
  exit 2
}

# Copies what there is to $OUT: after each phase, so that a run killed at the device's limit
# still returns the phases it finished, and at the exit, also when a phase failed.
hand_back() {
  [[ -n "${OUT:-}" ]] || return 0
  tar czf "$OUT/gpu-results.tar.gz.part" -C "$(dirname "$out")" "$(basename "$out")" &&
    mv "$OUT/gpu-results.tar.gz.part" "$OUT/gpu-results.tar.gz"
  for f in report.md results.csv pareto.png run.log ctest.log conformance.log; do
    if [[ -f "$out/$f" ]]; then cp "$out/$f" "$OUT/"; fi
  done
}
deliver() {
  local status=$?
  log "exit status $status; results in $out"
  hand_back
  exit "$status"
}
trap deliver EXIT

# --- Preflight: everything that can be checked in seconds, before minutes of compiling. ---
case "$device" in
  cuda | cuda:[0-9]* | cpu) ;;
  *) die "CKPT_DEVICE='$device' is not accepted; accepted: cuda, cuda:N, cpu" ;;
esac
[[ "$budget" =~ ^[0-9]+$ ]] || die "CKPT_TIME_BUDGET_S='$budget' is not accepted; accepted: seconds"
[[ "$reserve" =~ ^[0-9]+$ ]] ||
  die "CKPT_SWEEP_RESERVE_S='$reserve' is not accepted; accepted: seconds"
for step in $steps; do
  [[ "$step" =~ ^(build|test|conformance|jobs|sweep)$ ]] ||
    die "CKPT_STEPS has '$step'; accepted: build, test, conformance, jobs, sweep"
done
[[ "$conformance_s" =~ ^[0-9]+$ ]] ||
  die "CKPT_CONFORMANCE_S='$conformance_s' is not accepted; accepted: seconds"
# The jobs' lines, read and checked once, before the build.
job_lines=()
if [[ "$steps" == *" jobs "* ]]; then
  [[ -f "$jobs_file" ]] || die "CKPT_JOBS='$jobs_file' is not a file; the jobs phase needs one"
  while IFS= read -r line; do
    read -r name seconds _ <<<"$line"
    [[ -z "$name" || "$name" == \#* ]] && continue
    [[ "$name" =~ ^[a-z0-9][a-z0-9._-]*$ && "$seconds" =~ ^[0-9]+$ ]] ||
      die "CKPT_JOBS line '$name $seconds ...' is not accepted; accepted: name seconds flags..."
    job_lines+=("$line")
  done <"$jobs_file"
fi
[[ -f "$bundle/REQUIRES" && -d "$bundle/include/absl" ]] ||
  die "no C++ bundle at $bundle: run tools/make_cmake_bundle.sh on a Debian 12 machine and carry it"
if [[ -n "${CKPT_TORCH_CMAKE_DIR:-}" ]]; then
  torch_cmake="$CKPT_TORCH_CMAKE_DIR"
  log "LibTorch from $torch_cmake"
else
  torch_cmake=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') ||
    die "$python cannot import torch; set PYTHON or CKPT_TORCH_CMAKE_DIR"
  log "torch $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
  # The bundle's libraries use the C++11 string ABI (Debian's default); a torch built with the
  # old one would fail at link time with hundreds of undefined std::string symbols.
  [[ $("$python" -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))') == 1 ]] ||
    die "this torch uses the pre-C++11 string ABI and the bundle's libraries the new one"
fi
# The bundle's shared libraries need this libstdc++ and glibc version or newer.
cxx="${CXX:-c++}"
command -v "$cxx" >/dev/null || die "no C++ compiler '$cxx' (set CXX)"
command -v cmake >/dev/null || die "no cmake in PATH"
libstdcxx=$(readlink -f "$("$cxx" -print-file-name=libstdc++.so.6)")
need_glibcxx=$(sed -n 's/^glibcxx=//p' "$bundle/REQUIRES")
grep -aq "$need_glibcxx" "$libstdcxx" ||
  die "the bundle's libraries need $need_glibcxx, which this host's $libstdcxx lacks:" \
    "install GCC 12's libstdc++ or newer"
need_glibc=$(sed -n 's/^glibc=GLIBC_//p' "$bundle/REQUIRES")
have_glibc=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
[[ $(printf '%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1) == "$need_glibc" ]] ||
  die "the bundle's libraries need glibc $need_glibc; this host has $have_glibc"
log "$("$cxx" --version | head -1); cmake $(cmake --version | head -1 | cut -d' ' -f3)"
if [[ "$device" == cuda* ]]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
    tee "$out/gpu.txt" >&2 || die "nvidia-smi sees no GPU (CKPT_DEVICE=$device)"
fi

# --- Build. ---
if [[ "$steps" == *" build "* ]]; then
  # Keep going past a failing file: a first compile against a new LibTorch then reports every
  # error in one (10-minute) call, not one file per call.
  generator=()
  keep_going=(-- -k)
  if command -v ninja >/dev/null; then
    generator=(-G Ninja)
    keep_going=(-- -k 0)
  fi
  log "configuring $build"
  # The programs and the planner library (which Python loads) find the bundle's shared
  # libraries through their RPATH. --disable-new-dtags makes it DT_RPATH, which also serves the
  # libraries' own dependencies (libabsl_* load one another); DT_RUNPATH, the default, serves
  # only the program's direct ones.
  # LibTorch's own folder too (two above its CMake files), so that its libraries are found before
  # another LibTorch on the system's paths (CMakeLists.txt refuses such a mixed build).
  cmake_lib="$bundle/lib/x86_64-linux-gnu/cmake"
  # The Python tests run on $PYTHON, the Python whose torch is the LibTorch, where it is given.
  python_tests=()
  [[ -z "${PYTHON:-}" ]] || python_tests=(-DPython3_EXECUTABLE="$(command -v "$PYTHON")")
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_cmake;$torch_cmake/../..;$bundle" \
    -Dabsl_DIR="$cmake_lib/absl" -DGTest_DIR="$cmake_lib/GTest" \
    -Drapidcheck_DIR="$cmake_lib/rapidcheck" -Dbenchmark_DIR="$cmake_lib/benchmark" \
    -DCMAKE_BUILD_RPATH="$bundle/lib/x86_64-linux-gnu" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" \
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags" "${python_tests[@]}" \
    >"$out/configure.log" 2>&1 || {
    tail -30 "$out/configure.log" >&2
    die "cmake configure failed (configure.log)"
  }
  grep -E "ckptlab: " "$out/configure.log" | tee -a "$out/run.log" >&2 || true
  if [[ "$device" == cuda* ]] && ! grep -q "CUDA 1" "$out/configure.log"; then
    die "this LibTorch has no CUDA, and CKPT_DEVICE=$device"
  fi
  targets=()
  # shellcheck disable=SC2206
  [[ -z "$build_targets" ]] || targets=(--target $build_targets)
  log "building ${build_targets:-everything} with $(nproc) jobs"
  cmake --build "$build" -j "$(nproc)" "${targets[@]}" "${keep_going[@]}" >"$out/build.log" 2>&1 || {
    # The compiler's errors, also into run.log, which comes back as a file of its own.
    grep -E "error:|Error [0-9]|FAILED:" "$out/build.log" | head -60 | tee -a "$out/run.log" >&2
    die "build failed (build.log, in the tarball)"
  }
  hand_back
fi

# The tests that run on CKPT_TEST_DEVICE: the memory meter (first: it is the check that the
# meter starts CUDA itself), then every strategy x every model against store_all. Each within
# $1 seconds (0: unbounded), its gtest result lines into run.log, all of it into conformance.log.
device_tests() {
  local bound=$1 test test_status
  for test in device_meter_test conformance_test; do
    log "$test on $device$( ((bound == 0)) || echo ", within $bound s") (RC_PARAMS='${RC_PARAMS:-}')"
    test_status=0
    CKPT_TEST_DEVICE="$device" timeout --signal=KILL "$bound" "$build/$test" \
      >"$out/$test.log" 2>&1 || test_status=$?
    cat "$out/$test.log" >>"$out/conformance.log"
    ((test_status != 137)) || log "$test killed at its bound: the tests it finished are above"
    ((test_status == 0)) || status=1
    while read -r line; do log "$test: $line"; done < <(
      grep -E '^\[ +(OK|FAILED|PASSED) +\]' "$out/$test.log" || true)
  done
}

# Data parallel on the GPU (docs/data-parallel.md): the process-group test with every backend
# this build has for the device; then the quick preset's encoder swept on two ranks over Gloo
# (one GPU between them), and over NCCL with a rank per GPU: two where there are, else
# WORLD_SIZE=1 through a launcher's environment. Each sweep's folder goes back in the tarball.
data_parallel_on_device() {
  log "data parallel on $device: data_parallel_test's process-group cases"
  CKPT_TEST_DEVICE="$device" "$build/data_parallel_test" \
    --gtest_filter='BackendTest.*:ProcessGroupTest.ReducesOnTheTestDeviceWithEveryBackend' \
    >>"$out/conformance.log" 2>&1 || {
    log "data_parallel_test failed on $device (conformance.log)"
    status=1
  }
  local dp_args=(--device="$device" --models=transformer:depth=4:hidden=256:heads=4:seq=128:batch=4
    "--strategies=store_all,uniform,recompute_all,optimal" --steps=5 --warmup=2)
  local gpus
  gpus=$(nvidia-smi -L | grep -c '^GPU' || true)
  local runs=(gloo)
  grep -q "NCCL 1" "$out/configure.log" && runs+=(nccl)
  for backend in "${runs[@]}"; do
    local ranks=(--nproc=2) env=()
    if [[ "$backend" == nccl ]] && ((gpus < 2)); then
      ranks=()
      env=(RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
        CKPT_RENDEZVOUS_FILE="$out/dp-nccl.store")
      rm -f "$out/dp-nccl.store"  # a rerun's store starts empty
    fi
    log "sweep on $device, ${ranks[*]:-WORLD_SIZE=1} --dist_backend=$backend"
    env "${env[@]}" "$build/sweep" "${dp_args[@]}" "${ranks[@]}" --dist_backend="$backend" \
      --out="$out/dp-$backend" --resume >"$out/dp-$backend.txt" 2>"$out/dp-$backend.stderr" || {
      tail -3 "$out/dp-$backend.stderr" >&2
      log "the data-parallel sweep over $backend failed (dp-$backend.stderr)"
      status=1
    }
  done
}

# --- Tests: ctest (CPU), then the device meter and conformance tests on the device. ---
status=0
if [[ "$steps" == *" test "* ]]; then
  selection=()
  # Only the tests built (or their shards), where the build was of named targets.
  [[ -z "$build_targets" ]] ||
    selection=(-R "^($(tr -s ' ' '|' <<<"$build_targets"))(_shard[0-9]+)?\$")
  [[ -z "$ctest_exclude" ]] || selection+=(-E "$ctest_exclude")
  log "ctest${build_targets:+ of the targets built}${ctest_exclude:+, less what CKPT_CTEST_EXCLUDE matches}"
  # Each test's scratch files in a folder of this run's own, as Bazel gives them (not /tmp).
  scratch=$(mktemp -d)
  TEST_TMPDIR="$scratch" ctest --test-dir "$build" --output-on-failure \
    -j "$(($(nproc) < 4 ? $(nproc) : 4))" "${selection[@]}" >"$out/ctest.log" 2>&1 || status=1
  rm -rf "$scratch"
  # Through log, prefixed: the summary line at the start of a line is rehearse.sh's to print.
  while read -r line; do log "ctest: $line"; done < <(
    grep -E "tests passed|tests failed|Failed|Exception" "$out/ctest.log" || true)
  # The five slowest, where a run's time went.
  while read -r line; do log "ctest slowest: $line"; done < <(
    sed -nE 's/.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 s \1/p' "$out/ctest.log" |
      sort -rn | head -5)
  if [[ "$device" == cpu && -n "$ctest_exclude" && conformance_test =~ $ctest_exclude ]]; then
    log "conformance suite: left out on the CPU (CKPT_CTEST_EXCLUDE)"
  elif [[ "$device" == cpu ]]; then
    log "conformance suite: ctest ran it on the CPU"
  else
    device_tests 0
    # The benchmarks on the device: CUDA-event time reported as manual time.
    log "benchmarks on $device"
    "$build/benchmarks" --device="$device" --models=heavy_mlp:depth=8:hidden=1024:batch=64 \
      --strategies=store_all,uniform,recompute_all --benchmark_min_time=0.2 \
      --benchmark_format=json >"$out/benchmarks.json" 2>"$out/benchmarks.stderr" || status=1
    grep -q '/manual_time"' "$out/benchmarks.json" || {
      log "the benchmarks on $device did not report manual (CUDA-event) time"
      status=1
    }
    data_parallel_on_device
  fi
  # Mixed precision: float16 autocast with dynamic loss scaling on CUDA (bfloat16 on the CPU),
  # every strategy's loss curve against store_all's; the sweep exits 1 if one departs. Its
  # folder goes back in the tarball, the curves' table into run.log.
  log "mixed-precision training on $device (sweep --train_steps=30 --amp)"
  "$build/sweep" --device="$device" --models="$amp_models" --train_steps=30 --amp --steps=1 \
    --warmup=1 --out="$out/amp" >"$out/amp.txt" 2>"$out/amp.stderr" || {
    tail -3 "$out/amp.stderr" >&2
    log "mixed-precision training failed or a curve departs (amp/report.md, amp.stderr)"
    status=1
  }
  while read -r line; do log "amp: $line"; done < <(
    sed -n '/^## Training/,/^!\[loss curves\]/p' "$out/amp/report.md" 2>/dev/null |
      grep '^| [^-]' || true)
fi

# --- Conformance alone: the device's meter and conformance tests, each within its bound. ---
if [[ "$steps" == *" conformance "* ]]; then
  device_tests "$conformance_s"
  hand_back
fi

# --- Jobs: the sweeps CKPT_JOBS lists, in order, each within its seconds and what is left. ---
if [[ "$steps" == *" jobs "* ]]; then
  mkdir -p "$out/jobs"
  for line in "${job_lines[@]}"; do
    read -r name seconds flags <<<"$line"
    left=$((budget - (SECONDS - start) - 5))
    ((seconds < left)) || seconds=$left
    if ((left < 20)); then
      log "job $name: not started, $left s left"
      continue
    fi
    log "job $name, within $seconds s: $flags"
    job_status=0
    # Split at spaces, never through a shell: the flags are data.
    read -r -a job_flags <<<"$flags"
    timeout --signal=KILL "$seconds" "$build/sweep" --device="$device" --out="$out/jobs/$name" \
      "${job_flags[@]}" >"$out/jobs/$name.txt" 2>"$out/jobs/$name.stderr" </dev/null ||
      job_status=$?
    ((job_status != 137)) || log "job $name killed at $seconds s"
    ((job_status == 0)) || status=1
    log "job $name exited $job_status: $(tail -1 "$out/jobs/$name.stderr" | tr -d '\r' | cut -c1-200)"
    hand_back
  done
fi

# --- Sweep: the paper preset, bounded by what is left of the budget. ---
if [[ "$steps" == *" sweep "* ]]; then
  left=$((budget - (SECONDS - start)))
  # The limit stops new models from starting; the reserve is for the model in flight and the
  # report (90 s is a guess until a GPU run measures the paper models).
  limit=$((left - reserve))
  # The kill comes 10 s before the budget's end, kept for the report. (It must be a positive
  # number of seconds: `timeout 0` never kills.)
  kill_s=$((left - 10))
  ((limit > 0 && kill_s > 0)) ||
    die "no time left for the sweep ($left s of $budget s, $reserve s reserve, 10 s for the report)"
  log "sweep on $device, time limit $limit s"
  # A folder of its own: the sweep refuses one that holds files it did not write (this
  # script's logs). Its outputs are copied up below, where deliver, publish.sh and rehearse.sh
  # look for them; a rerun with the same CKPT_RESULTS_DIR resumes it.
  sweep_out="$out/sweep"
  sweep_args=(--device="$device" --preset=paper --out="$sweep_out")
  set +e
  # shellcheck disable=SC2086
  timeout --signal=KILL "$kill_s" "$build/sweep" "${sweep_args[@]}" \
    --time_limit_s="$limit" --resume ${CKPT_SWEEP_ARGS:-} >"$out/sweep.txt" 2>"$out/sweep.stderr"
  sweep_status=$?
  set -e
  grep -E "incomplete|time limit" "$out/sweep.stderr" | tee -a "$out/run.log" >&2 || true
  ((sweep_status == 0)) || {
    tail -5 "$out/sweep.stderr" >&2
    killed=""
    ((sweep_status != 137)) || killed=": killed at the budget's end"
    log "sweep exited $sweep_status$killed"
    status=1
  }
  # A killed sweep leaves its finished models' rows and no report: write it from them.
  if [[ ! -f "$sweep_out/report.md" && -f "$sweep_out/results.csv" ]]; then
    log "writing report.md from the rows in results.csv (sweep --report_only)"
    # --report_only takes only the flags that say which rows to expect (it refuses the others).
    report_args=(--preset=paper --out="$sweep_out")
    for arg in ${CKPT_SWEEP_ARGS:-}; do
      case "$arg" in --preset=* | --models=* | --strategies=* | --budgets=*) report_args+=("$arg") ;; esac
    done
    set +e
    "$build/sweep" "${report_args[@]}" --report_only >>"$out/sweep.txt" 2>>"$out/sweep.stderr"
    report_status=$?
    set -e
    ((report_status == 0)) || log "sweep --report_only exited $report_status (sweep.stderr)"
  fi
  for f in report.md results.csv run.csv pareto.png pareto.gp pareto.dat; do
    if [[ -f "$sweep_out/$f" ]]; then cp "$sweep_out/$f" "$out/"; fi
  done
  [[ -f "$out/report.md" ]] && log "report: $out/report.md"
  command -v gnuplot >/dev/null ||
    log "no gnuplot here: the plots' data and scripts (*.dat, *.gp) are in the tarball;" \
      "draw them elsewhere with: gnuplot pareto.gp"
fi
exit "$status"
