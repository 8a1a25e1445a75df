#!/usr/bin/env bash
# End-to-end checks of //experiments:sweep: outputs on success, exit 2 and no output on bad
# input. Under Bazel the binary is in the runfiles and $TEST_TMPDIR is private to this test;
# under CMake's ctest, $SWEEP names the binary.
set -euo pipefail
# On the CPU wherever it runs (a GPU host's ctest too): the checks below are the CPU's bytes.
sweep=("${SWEEP:-$TEST_SRCDIR/ckptlab/experiments/sweep}" --device=cpu)
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# A tiny run: results.csv with a header and one row per configuration, all ok.
"${sweep[@]}" --models=heavy_mlp:depth=4:hidden=8:batch=2 --strategies=store_all,uniform \
  --steps=2 --warmup=0 --out="$tmp/ok" >"$tmp/ok.stdout" 2>"$tmp/ok.stderr" ||
  fail "tiny sweep exited $?: $(cat "$tmp/ok.stderr")"
csv="$tmp/ok/results.csv"
if [[ -f "$csv" ]]; then
  head -1 "$csv" | grep -q '^model,strategy,device,status,baseline_bytes,activation_bytes,peak_bytes,' ||
    fail "header: $(head -1 "$csv")"
  [[ $(wc -l <"$csv") -eq 3 ]] || fail "expected header + 2 rows, got $(wc -l <"$csv") lines"
  columns=$(head -1 "$csv" | tr ',' '\n' | wc -l)
  # Every row has as many fields as the header (quoted fields, which may hold commas, are
  # blanked before counting).
  sed -E 's/"([^"]|"")*"//g' "$csv" | awk -F, -v n="$columns" 'NF != n {exit 1}' ||
    fail "ragged rows: $(cat "$csv")"
  grep -q '^heavy_mlp:depth=4:hidden=8:batch=2,uniform:segments=2,cpu,ok,' "$csv" ||
    fail "no ok row for uniform:segments=2: $(cat "$csv")"
  grep -q 'uniform:segments=2' "$tmp/ok.stdout" || fail "the table names no strategy"
else
  fail "no results.csv"
fi

for f in report.md pareto.dat pareto.gp; do
  [[ -s "$tmp/ok/$f" ]] || fail "no $f in the output folder"
done
# The picture where gnuplot is; where it is not (a GPU host), a line saying so.
if command -v gnuplot >/dev/null; then
  [[ -s "$tmp/ok/pareto.png" ]] || fail "no pareto.png in the output folder"
else
  grep -q "gnuplot is not installed" "$tmp/ok.stderr" || fail "no word on the missing gnuplot"
fi
grep -q '^## heavy_mlp:depth=4:hidden=8:batch=2$' "$tmp/ok/report.md" || fail "report.md has no model section"
grep -qx 'set xrange \[0:\*\]' "$tmp/ok/pareto.gp" || fail "pareto.gp's time axis does not start at 0"

# A model spec longer than a panel is wide (GPT-2's canonical spec) gets a title wrapped after a
# ':', in a string gnuplot still draws from.
"${sweep[@]}" --models=gpt2:depth=1:hidden=4:heads=1:seq=4:batch=1:vocab=16:context=4 \
  --strategies=store_all --steps=1 --warmup=0 --out="$tmp/title" >/dev/null 2>"$tmp/title.stderr" ||
  fail "gpt2 sweep exited $?: $(cat "$tmp/title.stderr")"
grep -qF 'set title "gpt2:size=small:depth=1:hidden=4:heads=1:seq=4:batch=1:\nvocab=16:context=4:dropout=0.1" noenhanced' \
  "$tmp/title/pareto.gp" || fail "no wrapped title: $(grep title "$tmp/title/pareto.gp")"
if command -v gnuplot >/dev/null; then
  [[ -s "$tmp/title/pareto.png" ]] || fail "gnuplot drew no pareto.png from the wrapped title"
fi

# An existing results.csv is not overwritten without --resume.
set +e
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=1 --out="$tmp/ok" >/dev/null 2>"$tmp/exists.stderr"
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "existing results.csv: exit $rc, expected 2"
grep -q "pass --resume" "$tmp/exists.stderr" || fail "existing results.csv: $(cat "$tmp/exists.stderr")"

# Killed mid-run, the file holds only complete rows; --resume skips the models already done
# and adds the rest, each row once.
models="heavy_mlp:depth=3:hidden=8:batch=2,heavy_mlp:depth=4:hidden=8:batch=2"
models+=",heavy_mlp:depth=5:hidden=8:batch=2,heavy_mlp:depth=6:hidden=512:batch=512"
"${sweep[@]}" --models="$models" --strategies=uniform --steps=400 --warmup=0 --out="$tmp/kill" \
  >/dev/null 2>"$tmp/kill.stderr" &
pid=$!
for _ in $(seq 1 600); do  # until the first model's rows are in (at most a minute)
  [[ $(wc -l <"$tmp/kill/results.csv" 2>/dev/null || echo 0) -ge 3 ]] && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
rows_before=$(($(wc -l <"$tmp/kill/results.csv") - 1))
((rows_before >= 2 && rows_before < 8)) || fail "killed sweep left $rows_before rows"
[[ $(tail -c 1 "$tmp/kill/results.csv" | od -An -c | tr -d ' ') == '\n' ]] ||
  fail "killed sweep left a partial line"
# The killed sweep wrote no report; --report_only writes it from the rows there, running
# nothing, and names the models that have none.
[[ ! -e "$tmp/kill/report.md" ]] || fail "the killed sweep wrote report.md"
"${sweep[@]}" --models="$models" --strategies=uniform --out="$tmp/kill" --report_only \
  >/dev/null 2>"$tmp/report_only.stderr" ||
  fail "--report_only exited $?: $(cat "$tmp/report_only.stderr")"
[[ $(($(wc -l <"$tmp/kill/results.csv") - 1)) -eq $rows_before ]] ||
  fail "--report_only changed results.csv: $(cat "$tmp/kill/results.csv")"
if [[ -f "$tmp/kill/report.md" ]]; then
  grep -q "written with --report_only" "$tmp/kill/report.md" ||
    fail "report.md: no --report_only note"
  grep -q '^## heavy_mlp:depth=3:hidden=8:batch=2$' "$tmp/kill/report.md" ||
    fail "report.md has no section for the model that finished"
  grep -A2 "^## Incomplete" "$tmp/kill/report.md" |
    grep -q "heavy_mlp:depth=6:hidden=512:batch=512" ||
    fail "report.md does not name the model the kill left without rows"
else
  fail "--report_only wrote no report.md"
fi
"${sweep[@]}" --models="$models" --strategies=uniform --steps=2 --warmup=0 --out="$tmp/kill" --resume \
  >/dev/null 2>"$tmp/resume.stderr" || fail "resume exited $?: $(cat "$tmp/resume.stderr")"
grep -q "already in results.csv, skipped" "$tmp/resume.stderr" || fail "resume skipped nothing"
[[ $(($(wc -l <"$tmp/kill/results.csv") - 1)) -eq 8 ]] ||
  fail "after resume: $(cat "$tmp/kill/results.csv")"
dupes=$(cut -d, -f1,2 "$tmp/kill/results.csv" | sort | uniq -d)
[[ -z "$dupes" ]] || fail "rows twice after resume: $dupes"

# A spent time limit: the first model runs, the rest are left for --resume, and the report
# says what is missing; the resumed run completes it.
models="heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=3:hidden=4:batch=2"
"${sweep[@]}" --models="$models" --strategies=uniform --steps=1 --warmup=0 --time_limit_s=1e-9 \
  --out="$tmp/limit" >/dev/null 2>"$tmp/limit.stderr" ||
  fail "time-limited sweep exited $?: $(cat "$tmp/limit.stderr")"
[[ $(($(wc -l <"$tmp/limit/results.csv") - 1)) -eq 2 ]] ||
  fail "time limit: expected the first model's 2 rows: $(cat "$tmp/limit/results.csv")"
grep -q "incomplete, 1 model(s) not run" "$tmp/limit.stderr" || fail "time limit: $(cat "$tmp/limit.stderr")"
grep -q "^## Incomplete" "$tmp/limit/report.md" || fail "time limit: report.md does not say so"
"${sweep[@]}" --models="$models" --strategies=uniform --steps=1 --warmup=0 --out="$tmp/limit" \
  --resume >/dev/null 2>"$tmp/limit2.stderr" || fail "resume after time limit exited $?"
[[ $(($(wc -l <"$tmp/limit/results.csv") - 1)) -eq 4 ]] || fail "resume after time limit: 4 rows expected"
if grep -q "^## Incomplete" "$tmp/limit/report.md"; then fail "resumed report still incomplete"; fi

# Bad input: exit status 2, a one-line message naming the value, nothing written.
check_bad() {
  local expect="$1"
  shift
  local out="$tmp/bad"
  rm -rf "$out"
  set +e
  "${sweep[@]}" "$@" --out="$out" >/dev/null 2>"$tmp/bad.stderr"
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$*: exit $rc, expected 2"
  grep -q -- "$expect" "$tmp/bad.stderr" || fail "$*: stderr lacks '$expect': $(cat "$tmp/bad.stderr")"
  [[ $(wc -l <"$tmp/bad.stderr") -eq 1 ]] || fail "$*: more than one line: $(cat "$tmp/bad.stderr")"
  [[ ! -e "$out" ]] || fail "$*: wrote $out"
}
check_bad "unknown strategy 'checkmate'; known: .*store_all, uniform" --strategies=checkmate
check_bad "unknown model 'resnet'" --models=resnet
check_bad "unknown parameter 'layers'; accepted: depth, hidden, batch" --models=heavy_mlp:layers=3
check_bad "depth='0' is not accepted" --models=heavy_mlp:depth=0
check_bad "steps=0 is not accepted" --steps=0
check_bad "unknown device 'tpu'" --device=tpu
check_bad "--memory_cap='lots' is not a size; accepted: a byte count" --memory_cap=lots
check_bad "--memory_cap='nanGiB' is not a size" --memory_cap=nanGiB
check_bad "--budgets: '12XB' is not a size" --budgets=8MiB,12XB
check_bad "--threads='0' is not accepted" --threads=0
check_bad "--blas_threads='x' is not accepted" --blas_threads=x
check_bad "unknown preset 'huge'; accepted: quick, paper" --preset=huge
check_bad "--depths: 'x' is not accepted" --depths=4,x
check_bad "time limit -5 s is not accepted" --time_limit_s=-5
check_bad "unexpected argument 'stray'" stray
check_bad "--accumulate=2 applies to training, which runs only with --train_steps=N" --accumulate=2
check_bad "--amp applies to training" --amp
check_bad "--train_steps=-1 is not accepted; accepted: an integer >= 1" --train_steps=-1
check_bad "--accumulate=0 is not accepted" --train_steps=2 --accumulate=0
check_bad "--report_only: no results.csv in --out=" --report_only
check_bad "--report_only runs nothing, so --depths cannot go with it" --report_only --depths=4

# An output directory that cannot be created.
set +e
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=1 --out=/proc/ckptlab-cannot >/dev/null 2>"$tmp/out.stderr"
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "unwritable --out: exit $rc, expected 2"
grep -q "cannot be created" "$tmp/out.stderr" || fail "unwritable --out: $(cat "$tmp/out.stderr")"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "sweep_cli_test: all checks passed"
