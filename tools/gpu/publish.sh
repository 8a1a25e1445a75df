#!/usr/bin/env bash
# Turns what tools/gpu/run.sh handed back from a GPU host into docs/results/<gpu>/, the folder
# the README links to: run it here, on the files the device tool brought back.
#
#   tools/gpu/publish.sh FILES_DIR [NAME]
#
# FILES_DIR holds gpu-results.tar.gz (run.sh's whole results folder). NAME defaults to the GPU's
# name from the run's nvidia-smi line, e.g. "NVIDIA H100 80GB HBM3" -> nvidia-h100-80gb-hbm3.
# The folder gets the report, results.csv, the plots (drawn here with gnuplot from the run's
# .gp/.dat when the GPU host had no gnuplot), the logs, and an index README.md saying what ran,
# where, when and with which command. It is assembled aside and moved into place at the end:
# an existing folder is refused, and a failure leaves nothing half-written.
# CKPT_DOCS_DIR (default docs/results) is where the folder goes; tools/gpu/rehearse.sh sets it.
set -euo pipefail
cd "$(dirname "$0")/../.."
die() {
  echo "publish: $*" >&2
  exit 2
}
(($# >= 1 && $# <= 2)) || die "usage: tools/gpu/publish.sh FILES_DIR [NAME]"
files=$1
tarball="$files/gpu-results.tar.gz"
[[ -f "$tarball" ]] || die "no gpu-results.tar.gz in '$files' (what tools/gpu/run.sh hands back)"
docs="${CKPT_DOCS_DIR:-docs/results}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "$tarball" -C "$work" || die "$tarball cannot be unpacked"
mapfile -t tops < <(find "$work" -mindepth 1 -maxdepth 1 -type d)
((${#tops[@]} == 1)) || die "$tarball holds ${#tops[@]} top-level folders; expected run.sh's one"
run="${tops[0]}"

# gpu.txt: nvidia-smi's "name, memory.total, driver_version" line (CUDA runs only).
gpu=""
gpu_about=""
if [[ -s "$run/gpu.txt" ]]; then
  IFS=, read -r gpu memory driver <"$run/gpu.txt" || true
  gpu_about=" (${memory# }, driver ${driver# })"
fi
name="${2:-}"
if [[ -z "$name" ]]; then
  [[ -n "$gpu" ]] || die "the run has no gpu.txt (not a CUDA run?): give a NAME"
  name=$(tr '[:upper:]' '[:lower:]' <<<"$gpu" | sed 's/[^a-z0-9]\+/-/g; s/^-//; s/-$//')
fi
[[ "$name" =~ ^[a-z0-9][a-z0-9._-]*$ ]] ||
  die "NAME '$name' is not accepted; accepted: lower-case letters, digits, '.', '_', '-'"
dest="$docs/$name"
[[ ! -e "$dest" ]] || die "$dest exists; remove it first, or give another NAME"
[[ -s "$run/report.md" && -s "$run/results.csv" ]] ||
  die "the run has no report.md or results.csv: the sweep did not finish (its run.log is in $tarball)"

# Staged beside its destination, so that the final move is a rename.
mkdir -p "$docs"
staged=$(mktemp -d "$docs/.publish.XXXXXX")
trap 'rm -rf "$work" "$staged"' EXIT
# Copies the files of folder $1 that match the patterns after $2 into folder $2.
copy_matching() {
  local from=$1 to=$2 pattern f
  shift 2
  for pattern in "$@"; do
    for f in "$from"/$pattern; do
      if [[ -f "$f" ]]; then cp "$f" "$to/"; fi
    done
  done
}
copy_matching "$run" "$staged" report.md '*.csv' '*.png' '*.gp' '*.dat' gpu.txt run.log \
  ctest.log conformance.log benchmarks.json sweep.txt sweep.stderr configure.log amp.stderr
# The mixed-precision training check's own sweep folder.
if [[ -d "$run/amp" ]]; then
  mkdir "$staged/amp"
  copy_matching "$run/amp" "$staged/amp" report.md '*.csv' '*.png' '*.gp' '*.dat'
fi

# The plots the GPU host could not draw (paths relative to the staged folder).
drawn=()
for gp in "$staged"/*.gp "$staged"/amp/*.gp; do
  [[ -f "$gp" ]] || continue
  png="${gp%.gp}.png"
  [[ -f "$png" ]] && continue
  name_png=${png#"$staged"/}
  command -v gnuplot >/dev/null || die "no gnuplot here to draw $name_png"
  (cd "$(dirname "$gp")" && gnuplot "$(basename "$gp")") ||
    die "gnuplot failed on ${gp#"$staged"/}"
  [[ -s "$png" ]] || die "gnuplot drew no $name_png"
  drawn+=("$name_png")
  # The report beside it said why the picture was missing; it is here now.
  base=$(basename "$png")
  sed -i "/^${base//./\\.} was not drawn: /d" "$(dirname "$gp")/report.md"
done

# The index: what ran, where, when, how; then the files.
command_line=$(grep -m1 -o '`sweep [^`]*`' "$staged/report.md" || true)
# run.sh names its folder gpu-YYYYmmdd-HHMMSS.
when=$(basename "$run" | sed -n 's/^gpu-\([0-9]\{4\}\)\([0-9]\{2\}\)\([0-9]\{2\}\)-\([0-9]\{2\}\)\([0-9]\{2\}\).*/\1-\2-\3 \4:\5/p')
when_text=""
[[ -n "$when" ]] && when_text=" on $when (the host's clock)"
first_log=$(head -1 "$staged/run.log" 2>/dev/null || true)
ctest_summary=$(grep -m1 -E "tests passed, [0-9]+ tests? failed" "$staged/ctest.log" 2>/dev/null || true)
{
  echo "# Measured on ${gpu:-$name}${gpu_about}"
  echo
  echo "Produced by \`tools/gpu/run.sh\`$when_text, through the device tool:"
  echo
  echo '```'
  echo 'tools/make_cmake_bundle.sh   # here, once'
  echo 'run(command="bash tools/gpu/run.sh", carry=["third_party/cmake_bundle"])'
  echo "tools/gpu/publish.sh <the returned files>${2:+ $name}"
  echo '```'
  echo
  [[ -n "$command_line" ]] && echo "The sweep's command line: $command_line." && echo
  [[ -n "$ctest_summary" ]] && echo "ctest: $ctest_summary" && echo
  [[ -n "$first_log" ]] && echo "First line of run.log: \`$first_log\`" && echo
  ((${#drawn[@]})) &&
    echo "Drawn here by tools/gpu/publish.sh from the run's gnuplot scripts: ${drawn[*]}." && echo
  echo "| file | what |"
  echo "| --- | --- |"
  for f in $(cd "$staged" && ls); do
    case "$f" in
      README.md) continue ;;
      amp)
        echo "| [amp/report.md](amp/report.md) | mixed-precision training on the GPU (float16," \
          "dynamic loss scaling): every strategy's loss curve against store_all's, skipped" \
          "steps; amp/losses.csv, amp/loss.png |"
        continue
        ;;
      *.gp) what="gnuplot script for ${f%.gp}.png (\`gnuplot $f\` in this folder)" ;;
      *.dat) what="the data ${f%.dat}.gp plots" ;;
      report.md) what="the sweep's report: per model, memory and time against store_all, plans, predictions" ;;
      results.csv) what="one row per (model, strategy); columns in docs/sweep.md" ;;
      pareto.png) what="peak memory against step time per model, Pareto front marked" ;;
      gpu.txt) what="nvidia-smi: GPU, memory, driver" ;;
      run.log) what="run.sh's log: versions, phases, timings" ;;
      ctest.log) what="the test binaries (ctest)" ;;
      amp.stderr) what="the mixed-precision training run's progress and errors" ;;
      conformance.log) what="the conformance suite on the GPU" ;;
      benchmarks.json) what="Google Benchmark on the GPU (CUDA-event manual time)" ;;
      sweep.txt) what="the sweep's tables as it printed them" ;;
      sweep.stderr) what="the sweep's progress lines and warnings" ;;
      configure.log) what="CMake's configure output: the LibTorch, CUDA and compiler it found" ;;
      *) what="" ;;
    esac
    echo "| [$f]($f) | $what |"
  done
} >"$staged/README.md"

chmod 755 "$staged"
mv -T "$staged" "$dest"
echo "publish: $dest ($(ls "$dest" | wc -l) files); link it from README.md's \"Measured GPU results\""
