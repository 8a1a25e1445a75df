#!/usr/bin/env bash
# End-to-end checks of //experiments:sweep: outputs on success, exit 2 and no output on bad
# input, the first round of hostile input; the second is testing/sweep_hostile_test.sh (split
# for time: each under a third of its timeout beside the suite).
# shellcheck source=testing/sweep_cli_lib.sh
source "$(dirname "$0")/sweep_cli_lib.sh"


# --predict: a depth-6 model profiled at depth 2, predict.csv with a header and a row per
# strategy, all ok, predict.md naming the shallow spec; no results.csv.
"${sweep[@]}" --predict --models=gpt2:depth=6:hidden=8:heads=2:seq=4:batch=1:vocab=16:context=4 \
  --strategies=store_all,uniform --out="$tmp/predict" >"$tmp/predict.stdout" 2>/dev/null ||
  fail "--predict exited $?"
[[ $(wc -l <"$tmp/predict/predict.csv") -eq 3 ]] || fail "predict.csv: $(cat "$tmp/predict/predict.csv")"
[[ $(cut -d, -f4 "$tmp/predict/predict.csv" | sort -u | tr '\n' ' ') == "ok status " ]] ||
  fail "predict.csv statuses: $(cut -d, -f4 "$tmp/predict/predict.csv")"
grep -q "Profiled as gpt2:.*depth=2" "$tmp/predict/predict.md" || fail "predict.md: $(cat "$tmp/predict/predict.md")"
grep -q "uniform" "$tmp/predict.stdout" || fail "--predict printed no table"
[[ ! -e "$tmp/predict/results.csv" ]] || fail "--predict wrote results.csv"
# Extrapolated and priced on a card: a sequence past its samples (16 to 28) extrapolated, the
# rows' times the h100 model's, both said in predict.md and predict.csv's last two columns.
"${sweep[@]}" --predict --models=gpt2:depth=4:hidden=8:heads=2:seq=40:batch=1:vocab=16:context=40 \
  --strategies=store_all,uniform --device_model=h100 --out="$tmp/predict-h100" >/dev/null \
  2>&1 || fail "--predict --device_model=h100 exited $?"
[[ $(tail -n +2 "$tmp/predict-h100/predict.csv" | grep -c ',seq=16..28 in steps of 4,h100$') -eq 2 ]] ||
  fail "--device_model's rows: $(cat "$tmp/predict-h100/predict.csv")"
grep -q "priced on the h100 model" "$tmp/predict-h100/predict.md" ||
  fail "predict.md does not name the device model: $(cat "$tmp/predict-h100/predict.md")"
# Its profile was kept untimed (the card's prices are the times); the same question for this
# machine's times in that folder is profiled again, timed, not answered from it.
grep -q "timed%20no" "$tmp/predict-h100/profiles.txt" ||
  fail "the device model's profile was timed: $(head -3 "$tmp/predict-h100/profiles.txt")"
"${sweep[@]}" --predict --models=gpt2:depth=4:hidden=8:heads=2:seq=40:batch=1:vocab=16:context=40 \
  --strategies=store_all,uniform --out="$tmp/predict-h100" >/dev/null 2>&1 ||
  fail "--predict after --device_model=h100 in its folder exited $?"
[[ $(tail -n +2 "$tmp/predict-h100/predict.csv" | cut -d, -f4 | sort -u) == ok &&
  $(grep -c "^key " "$tmp/predict-h100/profiles.txt") -eq 2 ]] ||
  fail "this machine's question answered from the untimed profile: $(cat "$tmp/predict-h100/predict.csv")"
# The same for one of 4 ranks sharding everything, under autocast: the rows say so, and the
# rank's parameters are a quarter of the one process's (each parameter's numel divides by 4).
"${sweep[@]}" --predict --models=gpt2:depth=6:hidden=8:heads=2:seq=4:batch=1:vocab=16:context=4 \
  --strategies=store_all --amp --states=zero3 --world_size=4 --collective_bandwidth=1GB/s \
  --out="$tmp/predict-zero3" >/dev/null 2>&1 || fail "--predict --states=zero3 exited $?"
row=$(sed -n 2p "$tmp/predict-zero3/predict.csv" 2>/dev/null)
[[ $(cut -d, -f4-8 <<<"$row") == "ok,zero3,4,BFloat16,true" ]] || fail "zero3 row: $row"
whole=$(sed -n 2p "$tmp/predict/predict.csv" | cut -d, -f9)
[[ $(cut -d, -f9 <<<"$row") -eq $((whole / 4)) ]] || fail "zero3 parameters: $row against $whole"
grep -q "One rank of 4, zero3 state" "$tmp/predict-zero3/predict.md" ||
  fail "predict.md does not name the setting: $(cat "$tmp/predict-zero3/predict.md")"
# For a card: the first line answers, optimal plans again to what the card leaves, run.csv
# records the card.
"${sweep[@]}" --predict --models=gpt2:depth=6:hidden=8:heads=2:seq=4:batch=1:vocab=16:context=4 \
  --strategies=store_all,optimal --device_memory=1GiB --out="$tmp/predict-card" \
  >"$tmp/predict-card.stdout" 2>/dev/null || fail "--predict --device_memory exited $?"
head -1 "$tmp/predict-card.stdout" | grep -q '^- gpt2:.*: \*\*fits\*\* in 1.00 GiB' ||
  fail "--device_memory's first line: $(head -1 "$tmp/predict-card.stdout")"
fits=$(cut -d, -f3,19 "$tmp/predict-card/predict.csv" | tail -n +2 | tr '\n' ' ')
[[ "$fits" == "store_all,true optimal:budget=auto,true optimal:budget="*",true " ]] ||
  fail "--device_memory's rows: $(cat "$tmp/predict-card/predict.csv")"
grep -qx 'device_memory,1073741824' "$tmp/predict-card/run.csv" ||
  fail "run.csv does not record --device_memory: $(cat "$tmp/predict-card/run.csv")"
# The same question again in that folder plans from the profile the first kept there: the same
# bytes and answers, not measured again. (Against a profile measured in another process the
# bytes may differ by a few: a transient's size can depend on the process's allocation history.)
cp "$tmp/predict-card/predict.csv" "$tmp/predict-card-first.csv"
"${sweep[@]}" --predict --models=gpt2:depth=6:hidden=8:heads=2:seq=4:batch=1:vocab=16:context=4 \
  --strategies=store_all,optimal --device_memory=1GiB --out="$tmp/predict-card" >/dev/null \
  2>"$tmp/predict-again.stderr" || fail "a second --predict in the folder exited $?"
grep -q "profile kept in $tmp/predict-card/profiles.txt by an earlier run; not measured again" \
  "$tmp/predict-again.stderr" || fail "a second --predict: $(cat "$tmp/predict-again.stderr")"
cmp -s <(cut -d, -f1-17,19 "$tmp/predict-card-first.csv") \
  <(cut -d, -f1-17,19 "$tmp/predict-card/predict.csv") ||
  fail "a second --predict answered otherwise: $(cat "$tmp/predict-card/predict.csv")"

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
grep -qF "set title (('gpt2:size=small:depth=1:hidden=4:heads=1:seq=4:batch=1:') . \"\\n\" . ('vocab=16:context=4:dropout=0.1')) noenhanced" \
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
"${sweep[@]}" --models="$models" --strategies=uniform --steps=40 --warmup=0 --out="$tmp/kill" \
  >/dev/null 2>"$tmp/kill.stderr" &
pid=$!
wait_rows "$tmp/kill/results.csv" 2  # the first model's, at most a minute
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
rows_before=$(($(wc -l <"$tmp/kill/results.csv") - 1))
((rows_before >= 2 && rows_before < 8)) || fail "killed sweep left $rows_before rows"
[[ $(tail -c 1 "$tmp/kill/results.csv" | od -An -c | tr -d ' ') == '\n' ]] ||
  fail "killed sweep left a partial line"
# The killed sweep wrote no report; --report_only writes it from the rows there, running
# nothing, and names the models that have none.
[[ ! -e "$tmp/kill/report.md" ]] || fail "the killed sweep wrote report.md"
run_sweep --models="$models" --strategies=uniform --out="$tmp/kill" --report_only \
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
# A resume under other settings than the rows' is refused, naming them; under the same ones it
# completes the file.
set +e
"${sweep[@]}" --models="$models" --strategies=uniform --steps=2 --warmup=0 --out="$tmp/kill" --resume \
  >/dev/null 2>"$tmp/resume.stderr"
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "resume with other --steps: exit $rc, expected 2"
grep -q "holds rows measured with other settings: --steps (2 now, 40 there)" "$tmp/resume.stderr" ||
  fail "resume with other --steps: $(cat "$tmp/resume.stderr")"
"${sweep[@]}" --models="$models" --strategies=uniform --steps=40 --warmup=0 --out="$tmp/kill" --resume \
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

check_bad "unknown strategy 'checkmate'; known: .*store_all, uniform" --strategies=checkmate
check_bad "unknown model 'convnext'" --models=convnext
check_bad "unknown parameter 'layers'; accepted: depth, hidden, batch" --models=heavy_mlp:layers=3
check_bad "depth='0' is not accepted" --models=heavy_mlp:depth=0
check_bad "steps=0 is not accepted" --steps=0
check_bad "unknown device 'tpu'" --device=tpu
check_bad "--memory_cap='lots' is not a size; accepted: a whole byte count" --memory_cap=lots
check_bad "--memory_cap='nanGiB' is not a size" --memory_cap=nanGiB
check_bad "--link_bandwidth=25GB is not a rate; accepted: a positive size per second" \
  --link_bandwidth=25GB
check_bad "--link_bandwidth=0GB/s is not a rate" --link_bandwidth=0GB/s
check_bad "--budgets: '12XB' is not accepted; accepted: sizes in bytes" --budgets=8MiB,12XB
check_bad "--threads='0' is not accepted" --threads=0
check_bad "--blas_threads='x' is not accepted" --blas_threads=x
check_bad "unknown preset 'huge'; accepted: quick, paper" --preset=huge
check_bad "--preset=seed004 holds models no machine here can run; accepted: --preset=seed004 with --predict" \
  --preset=seed004
check_bad "--predict runs no step, so --explain cannot go with it" --predict --explain
check_bad "--predict runs no step, so --train_steps cannot go with it" --predict --train_steps=2
check_bad "--predict runs no step, so --memory_cap cannot go with it; accepted with --predict: --preset, --models, --strategies, --budgets" \
  --predict --memory_cap=1GiB
check_bad "--predict runs no step, so --nproc cannot go with it" --predict --nproc=2
check_bad "--states describes the training --predict predicts for; accepted: --states with --predict" \
  --states=zero3
check_bad "--device_memory describes the training --predict predicts for; accepted: --device_memory with --predict" \
  --device_memory=24GiB
check_bad "--extrapolate describes the training --predict predicts for; accepted: --extrapolate with --predict" \
  --extrapolate=false
check_bad "--device_model describes the training --predict predicts for; accepted: --device_model with --predict" \
  --device_model=h100
check_bad "--device_model=h9 is not accepted; accepted: h100, a100, l4" --predict --device_model=h9
check_bad "--device_memory=0 is not accepted; accepted: a size of at least 1 bytes" --predict --device_memory=0
check_bad "--device_memory=" --predict --device_memory=lots
check_bad "--states=zero4 is not accepted; accepted: replicated, zero1, zero2, zero3" --predict --states=zero4
check_bad "--world_size=0 is not accepted; accepted: 1..1048576" --predict --world_size=0
check_bad "--collective_bandwidth=fast is not a rate" --predict --collective_bandwidth=fast
# Every flag is used or refused in every mode (round 3): these were accepted and ignored.
for flag in --steps=3 --warmup=1 --time_limit_s=60 --dist_backend=gloo --resume; do
  check_bad "--predict runs no step, so ${flag%%=*} cannot go with it" --predict "$flag"
done
check_bad "--report_only runs nothing, so --seed cannot go with it" --report_only --seed=3
# docs/sweep.md's table of the modes that do less lists the flags each accepts, as it says.
docs="$(dirname "${BASH_SOURCE[0]}")/../docs/sweep.md"
for mode in list predict report_only explain; do
  documented=$(awk -v row="| \`--$mode\` | " '/^\| mode \| also takes \|$/ { table = 1 }
    table && /^$/ { exit } table && index($0, row) == 1 { print }' "$docs" |
    cut -d'|' -f3 | tr -d '\`' | sed 's/^ *//; s/ *$//')
  [[ $documented == nothing ]] && documented=""
  set +e
  accepted=$(run_sweep "--$mode" --steps=3 2>&1 >/dev/null | sed -n "s/.*; accepted with --$mode: //p")
  set -e
  [[ $accepted == "no other flag" ]] && accepted=""
  [[ "$documented" == "$(tr -d ',' <<<"$accepted")" ]] ||
    fail "docs/sweep.md says --$mode takes '$documented'; the sweep accepts '$accepted'"
done
check_bad "--dist_backend=: an empty backend name cannot reduce cpu tensors in this build; accepted: auto" \
  --dist_backend=
check_bad "--explain prints plans and exits, so --out cannot go with it" --explain
set +e
run_sweep --explain --steps=3 >/dev/null 2>"$tmp/explain.stderr"
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q -- "--explain prints plans and exits, so --steps cannot go with it" \
  "$tmp/explain.stderr" || fail "--explain --steps=3: exit $rc, $(cat "$tmp/explain.stderr")"
check_bad "--list prints what this build offers and exits, so --models cannot go with it; accepted with --list: no other flag" \
  --list --models=heavy_mlp
check_bad "--depths: 'x' is not accepted" --depths=4,x
check_bad "time limit -5 s is not accepted" --time_limit_s=-5
check_bad "unexpected argument 'stray'" stray
check_bad "--accumulate=2 applies to training, which runs only with --train_steps=N" --accumulate=2
check_bad "--train_steps=-1 is not accepted; accepted: an integer >= 1" --train_steps=-1
check_bad "--accumulate=0 is not accepted" --train_steps=2 --accumulate=0
check_bad "--report_only: no results.csv in --out=" --report_only
check_bad "--report_only runs nothing, so --depths cannot go with it" --report_only --depths=4

# Hostile input: the table of cases that once broke the sweep (docs/testing.md), each an
# exit-2 error naming the value and what is accepted, with nothing written, or a run that works.
# Abseil's own flag errors, made ours:
check_bad "--steps='abc' is not accepted; accepted: an integer" --steps=abc
check_bad "--seed='-1' is not accepted; accepted: an integer >= 0" --seed=-1
check_bad "unknown flag --nonsense; accepted: .*--models" --nonsense=1
check_bad "--models needs a value" --models
# Counts that overflowed, so that nothing ran and the rows said ok:
check_bad "steps=2147483647 is not accepted; accepted: 1..1000000" --steps=2147483647
# Specs a model refuses, found before anything runs:
check_bad "transformer: hidden=30 is not a multiple of heads=4" --models=transformer:hidden=30:heads=4
check_bad "gpt2: seq=64 is longer than context=32" --models=gpt2:seq=64:context=32
check_bad "--depths: depth 200000 is outside heavy_mlp's range; accepted: 1..100000" \
  --models=heavy_mlp:depth=2:hidden=4:batch=1 --depths=4,200000
check_bad "--depths: depth 1 is outside deep_mlp's range; accepted: 2..100000" \
  --models=deep_mlp:depth=2:hidden=4:batch=1 --depths=1,4
# Empty and repeated lists, which silently meant the preset or ran twice:
check_bad "--models= is empty" --models=
check_bad "--strategies= is empty" --strategies=
check_bad "--models lists heavy_mlp:depth=4:hidden=8:batch=2 twice" \
  --models=heavy_mlp:depth=4:hidden=8:batch=2,heavy_mlp:batch=2:depth=+4:hidden=8
check_bad "--strategies lists uniform:segments=auto:budget=none:offload=no twice" \
  --strategies=uniform,uniform:segments=auto

# A results.csv that is damaged or not a file: --resume and --report_only refuse it, naming the
# file and the line, and change nothing.
make_damaged() {  # $1: folder, $2: what to append after the good rows
  rm -rf "$1" && mkdir -p "$1" && cp "$csv" "$tmp/ok/run.csv" "$1/" &&
    printf '%b' "$2" >>"$1/results.csv"
}
check_damaged() {  # $1: expected message, $2: folder, then the flags
  local expect="$1" dir="$2"
  shift 2
  local before
  before=$(md5sum <"$dir/results.csv" 2>/dev/null || echo dir)
  local measuring=()  # what --report_only would refuse
  [[ "$*" == *--report_only* ]] || measuring=(--steps=2 --warmup=0)
  set +e
  run_sweep --models=heavy_mlp:depth=4:hidden=8:batch=2 --strategies=store_all,uniform \
    "${measuring[@]}" --out="$dir" "$@" >/dev/null 2>"$tmp/damaged.stderr"
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "damaged results.csv ($*): exit $rc, expected 2"
  grep -q -- "$expect" "$tmp/damaged.stderr" ||
    fail "damaged results.csv ($*): stderr lacks '$expect': $(cat "$tmp/damaged.stderr")"
  [[ "$(md5sum <"$dir/results.csv" 2>/dev/null || echo dir)" == "$before" ]] ||
    fail "damaged results.csv ($*): the file changed"
  [[ ! -e "$dir/report.md" ]] || fail "damaged results.csv ($*): wrote report.md"
}
for flag in --resume --report_only; do
  make_damaged "$tmp/garbage" 'garbage\n'
  check_damaged "results.csv line 4 has 1 fields, not the header's" "$tmp/garbage" "$flag"
  make_damaged "$tmp/blank" '\n'
  check_damaged "results.csv line 4 is blank" "$tmp/blank" "$flag"
  make_damaged "$tmp/nul" 'a\0b\n'
  check_damaged "results.csv line 4 holds a NUL byte" "$tmp/nul" "$flag"
  rm -rf "$tmp/dir" && mkdir -p "$tmp/dir/results.csv" && cp "$tmp/ok/run.csv" "$tmp/dir/"
  check_damaged "results.csv is a directory" "$tmp/dir" "$flag"
done

# An --out with a quote, or one crafted to run a command if it ever reached a shell: a folder
# like any other (the plots are drawn by gnuplot started without a shell).
quoted="$tmp/it's here; touch $tmp/PWNED; echo '"
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=store_all --steps=1 \
  --warmup=0 --out="$quoted" >/dev/null 2>"$tmp/quoted.stderr" ||
  fail "--out with quotes exited $?: $(cat "$tmp/quoted.stderr")"
[[ -s "$quoted/results.csv" && -s "$quoted/report.md" ]] || fail "--out with quotes: no results"
if command -v gnuplot >/dev/null; then
  [[ -s "$quoted/pareto.png" ]] || fail "--out with quotes: no pareto.png: $(cat "$tmp/quoted.stderr")"
fi
[[ ! -e "$tmp/PWNED" ]] || fail "--out ran a command"

# Two sweeps on one --out: the second is refused while the first runs (with or without
# --resume), and the first's rows are each there once.
"${sweep[@]}" --models=heavy_mlp:depth=6:hidden=512:batch=512 --strategies=uniform --steps=400 \
  --warmup=0 --out="$tmp/busy" >/dev/null 2>"$tmp/busy.stderr" &
pid=$!
for _ in $(seq 1 600); do  # until the first has taken the folder
  [[ -s "$tmp/busy/results.csv" ]] && break
  sleep 0.1
done
for flags in "" --resume; do
  set +e
  # shellcheck disable=SC2086
  "${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=uniform --steps=1 \
    --warmup=0 --out="$tmp/busy" $flags >/dev/null 2>"$tmp/busy2.stderr"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "a second sweep on a busy --out ($flags): exit $rc, expected 2"
  grep -q "another sweep is using --out=" "$tmp/busy2.stderr" ||
    fail "a second sweep on a busy --out ($flags): $(cat "$tmp/busy2.stderr")"
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[[ -z "$(cut -d, -f1,2 "$tmp/busy/results.csv" | sort | uniq -d)" ]] || fail "busy --out: rows twice"

# A write cut short (a full disk, under_limit) leaves complete rows only, says why, and --resume
# completes the file. 2 KiB: the header and a row or two.
under_limit 2 --models=heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=3:hidden=4:batch=2 \
  --strategies=uniform,recompute_all,selective_mlp --steps=1 --warmup=0 --out="$tmp/full"
((limit_rc != 0)) || fail "a write past the file size limit: exit 0"
grep -q "File too large; the partial row was removed" "$tmp/limit.out" ||
  fail "a write past the file size limit: $(cat "$tmp/limit.out")"
[[ $(tail -c 1 "$tmp/full/results.csv" | od -An -c | tr -d ' ') == '\n' ]] ||
  fail "a write past the file size limit left a partial row"
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=3:hidden=4:batch=2 \
  --strategies=uniform,recompute_all,selective_mlp --steps=1 --warmup=0 --out="$tmp/full" \
  --resume >/dev/null 2>"$tmp/full2.stderr" || fail "resume after a short write: $(cat "$tmp/full2.stderr")"
[[ $(($(wc -l <"$tmp/full/results.csv") - 1)) -eq 8 ]] ||
  fail "resume after a short write: $(cat "$tmp/full/results.csv")"

# A model that fails as a whole (its parameters alone, 4 TiB, are past the memory this machine
# has) is a row per strategy with status oom and empty ratio cells, not a free strategy; the
# model after it is measured as if it had run alone.
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=1048576:batch=4,heavy_mlp:depth=2:hidden=4:batch=2 \
  --strategies=uniform --steps=1 --warmup=0 --out="$tmp/huge" >/dev/null 2>"$tmp/huge.stderr" ||
  fail "a model too large for the machine: exit $?: $(cat "$tmp/huge.stderr")"
grep -q '^heavy_mlp:depth=2:hidden=1048576:batch=4,uniform:segments=auto:budget=none:offload=no,cpu,oom,' \
  "$tmp/huge/results.csv" ||
  fail "a model too large for the machine: $(cat "$tmp/huge/results.csv")"
awk -F, '$4 == "oom" && ($16 != "" || $17 != "" || $18 != "") {exit 1}' \
  "$tmp/huge/results.csv" || fail "a failed model has ratio cells: $(cat "$tmp/huge/results.csv")"
# --predict likewise: the model's rows are oom, and the model after it is still answered.
"${sweep[@]}" --predict --models=heavy_mlp:depth=2:hidden=1048576:batch=4,heavy_mlp:depth=2:hidden=4:batch=2 \
  --strategies=uniform --out="$tmp/huge-predict" >/dev/null 2>"$tmp/huge-predict.stderr" ||
  fail "--predict with a model too large for the machine: exit $?: $(cat "$tmp/huge-predict.stderr")"
grep -q '^heavy_mlp:depth=2:hidden=1048576:batch=4,heavy_mlp:depth=2:hidden=1048576:batch=4,store_all,oom,' \
  "$tmp/huge-predict/predict.csv" && grep -q '^heavy_mlp:depth=2:hidden=4:batch=2,.*,uniform:[^,]*,ok,' \
  "$tmp/huge-predict/predict.csv" ||
  fail "--predict with a model too large for the machine: $(cat "$tmp/huge-predict/predict.csv")"
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=uniform --steps=1 \
  --warmup=0 --out="$tmp/alone" >/dev/null 2>&1 || fail "the small model alone exited $?"
[[ "$(grep '^heavy_mlp:depth=2:hidden=4:batch=2,store_all' "$tmp/huge/results.csv" | cut -d, -f5)" == \
   "$(grep '^heavy_mlp:depth=2:hidden=4:batch=2,store_all' "$tmp/alone/results.csv" | cut -d, -f5)" ]] ||
  fail "after the refused model, the next one's baseline differs from its baseline alone"

# Training under a cap that store_all does not fit: its curve is oom, the others are not
# compared with it (no false departure), and the sweep says so and exits 0.
# The cap: between uniform's peak and store_all's, as measured uncapped.
"${sweep[@]}" --models=heavy_mlp:depth=16:hidden=16:batch=512 --strategies=uniform --steps=1 \
  --warmup=0 --out="$tmp/uncapped" >/dev/null 2>&1 || fail "the uncapped run exited $?"
peak_of() { grep "^heavy_mlp:depth=16:hidden=16:batch=512,$1" "$tmp/uncapped/results.csv" | cut -d, -f7; }
cap=$((($(peak_of store_all) + $(peak_of uniform)) / 2))
"${sweep[@]}" --models=heavy_mlp:depth=16:hidden=16:batch=512 --strategies=uniform --steps=1 \
  --warmup=0 --train_steps=2 --memory_cap="$cap" --out="$tmp/capped_training" \
  >/dev/null 2>"$tmp/capped_training.stderr" ||
  fail "training under a cap store_all does not fit: exit $?: $(cat "$tmp/capped_training.stderr")"
grep -q "store_all's curve of .* is oom" "$tmp/capped_training.stderr" ||
  fail "training under a cap: $(cat "$tmp/capped_training.stderr")"
grep -q "not compared: store_all's curve is oom" "$tmp/capped_training/report.md" ||
  fail "training under a cap: the report does not say the curves were not compared"
# A cap no curve fits: every curve oom, still exit 0, and no link to a picture not drawn.
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=uniform --steps=1 \
  --warmup=0 --train_steps=2 --memory_cap=1 --out="$tmp/all_oom_training" \
  >/dev/null 2>"$tmp/all_oom_training.stderr" ||
  fail "training where no curve fits: exit $?: $(cat "$tmp/all_oom_training.stderr")"
if grep -q "loss.png" "$tmp/all_oom_training/report.md"; then
  fail "training where no curve fits: report.md links loss.png"
fi
grep -q "no picture" "$tmp/all_oom_training/report.md" ||
  fail "training where no curve fits: the report does not say why there is no picture"
[[ ! -e "$tmp/all_oom_training/loss.png" ]] || fail "training where no curve fits: a loss.png"

# An output directory that cannot be created.
set +e
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=1 --out=/proc/ckptlab-cannot >/dev/null 2>"$tmp/out.stderr"
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "unwritable --out: exit $rc, expected 2"
grep -q "cannot be created" "$tmp/out.stderr" || fail "unwritable --out: $(cat "$tmp/out.stderr")"

# Plans written as text (docs/plans.md) run as the strategy plan:file=; a plan file that is
# missing, not a file, or does not fit a model is exit 2 before anything runs, naming the file,
# the line and the column.
printf '# two checkpointed halves\n[0,2) checkpointed,\n[2,4) stored; rows=chunk:2 @ 3\n' \
  >"$tmp/plan.txt"
rm -rf "$tmp/plan"
"${sweep[@]}" --models=heavy_mlp:depth=4:hidden=8:batch=2 --strategies="plan:file=$tmp/plan.txt" \
  --steps=1 --warmup=0 --out="$tmp/plan" >/dev/null 2>"$tmp/plan.stderr" ||
  fail "a written plan: exit $?: $(cat "$tmp/plan.stderr")"
grep -qF ",plan:file=$tmp/plan.txt,cpu,ok," "$tmp/plan/results.csv" ||
  fail "a written plan: no ok row: $(cat "$tmp/plan/results.csv")"
grep -qF "[0,2) checkpointed, [2,4) stored; rows=chunk:2 @ 3" "$tmp/plan/results.csv" ||
  fail "a written plan: its row does not hold its text"
# The plan file is fixed at the run's start: run.csv records its digest, a resume after it
# changed is refused naming it, and --report_only needs no plan file (it reads the rows).
grep -q "^plan_files,$tmp/plan.txt=[0-9a-f]\{16\}$" "$tmp/plan/run.csv" ||
  fail "run.csv records no plan file digest: $(cat "$tmp/plan/run.csv")"
cp "$tmp/plan.txt" "$tmp/plan.txt.kept"
printf '[0,4) stored\n' >"$tmp/plan.txt"
set +e
"${sweep[@]}" --models=heavy_mlp:depth=4:hidden=8:batch=2 --strategies="plan:file=$tmp/plan.txt" \
  --steps=1 --warmup=0 --out="$tmp/plan" --resume >/dev/null 2>"$tmp/plan-resume.stderr"
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -qF "holds rows measured with other settings: the plan files ($tmp/plan.txt=" \
  "$tmp/plan-resume.stderr" || fail "a resume with a changed plan file: exit $rc, $(cat "$tmp/plan-resume.stderr")"
rm "$tmp/plan.txt" "$tmp/plan/report.md"
run_sweep --report_only --out="$tmp/plan" >/dev/null 2>"$tmp/plan-report.stderr" ||
  fail "--report_only with the plan file gone: exit $?: $(cat "$tmp/plan-report.stderr")"
mv "$tmp/plan.txt.kept" "$tmp/plan.txt"
bad_plan() {  # $1: expected message, $2: the file's text
  printf '%b' "$2" >"$tmp/bad_plan.txt"
  check_bad "$1" --models=heavy_mlp:depth=4:hidden=8:batch=2 \
    --strategies="plan:file=$tmp/bad_plan.txt"
}
bad_plan "plan file $tmp/bad_plan.txt: line 2, column 6: expected ')' after the segment's end" \
  '[0,2) stored,\n[2,4 stored'
bad_plan "line 1, column 1: plan of plan:file=$tmp/bad_plan.txt is invalid: segment \\[0,5)" \
  '[0,5) stored'
bad_plan "line 1, column 15: stage 0 (block0) has no part 'core'; its parts: rows" \
  '[0,4) stored; core=recompute @ 0'
bad_plan "line 1, column 20: 'recompute' does not apply to part 'rows' (sequence) of stage 1" \
  '[0,4) stored; rows=recompute @ 1'
bad_plan "is to be chunked into 3 chunks; accepted: 2..2 (its axis has 2 positions)" \
  '[0,4) stored; rows=chunk:3 @ 0'
check_bad "plan:file=$tmp/no-such-plan.txt: $tmp/no-such-plan.txt does not exist" \
  --strategies="plan:file=$tmp/no-such-plan.txt"
mkdir -p "$tmp/plan_dir"
check_bad "plan:file=$tmp/plan_dir: $tmp/plan_dir is a directory, not a regular file" \
  --strategies="plan:file=$tmp/plan_dir"
check_bad "plan: file= must be given" --strategies=plan

finish sweep_cli_test
