#!/usr/bin/env bash
# End-to-end checks of //experiments:sweep, continued from testing/sweep_cli_test.sh: the second
# round of hostile input (docs/testing.md): text from files, outputs whole or not at all, the
# file policy.
# shellcheck source=testing/sweep_cli_lib.sh
source "$(dirname "$0")/sweep_cli_lib.sh"

# --- Hostile input, round 2 (docs/testing.md): every case below once broke the sweep. ---

tiny=(--models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=store_all --steps=1 --warmup=0)
# A finished sweep folder to work on: two models, one row each. Swept once, then copied (a
# sweep with its report and plot takes seconds; the folder names no path but in report.md's
# command line).
finished() {  # $1: folder
  if [[ ! -d "$tmp/finished" ]]; then
    "${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=3:hidden=4:batch=2 \
      --strategies=store_all --steps=1 --warmup=0 --out="$tmp/finished" >/dev/null 2>&1 ||
      fail "the finished folder could not be made"
  fi
  rm -rf "$1"
  cp -R "$tmp/finished" "$1"
}
# Rewrites the model cell of results.csv's row $2 in folder $1 as $3 (quoted as CSV quotes).
set_model_cell() {
  python3 - "$1/results.csv" "$2" "$3" <<'PY'
import csv, sys
path, row, text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = list(csv.reader(open(path, newline="")))
rows[row][rows[0].index("model")] = text
csv.writer(open(path, "w", newline=""), lineterminator="\n").writerows(rows)
PY
}
# Runs the sweep with $1 the expected exit status, $2 a text its stderr must hold, then flags.
expect_exit() {
  local want="$1" text="$2"
  shift 2
  set +e
  run_sweep "$@" >"$tmp/expect.stdout" 2>"$tmp/expect.stderr"
  local rc=$?
  set -e
  [[ $rc -eq $want ]] || fail "$*: exit $rc, expected $want: $(cat "$tmp/expect.stderr")"
  grep -qF -- "$text" "$tmp/expect.stderr" ||
    fail "$*: stderr lacks '$text': $(cat "$tmp/expect.stderr")"
}
# --predict into a sweep's folder: refused with advice it takes (another --out, not --resume).
finished "$tmp/ok"
expect_exit 2 "--predict writes into a folder of its own; pass another --out" --predict \
  --models=heavy_mlp:depth=2:hidden=4:batch=2 --out="$tmp/ok"
if grep -q -- "--resume" "$tmp/expect.stderr"; then fail "--predict advised --resume"; fi
# An older sweep's folder (no run.csv): --report_only reports on it; with a file of the user's
# beside it, it is refused as before, the file unchanged.
finished "$tmp/older"
rm "$tmp/older/run.csv" "$tmp/older/report.md"
run_sweep --report_only --out="$tmp/older" >/dev/null 2>"$tmp/older.stderr" ||
  fail "--report_only on an older sweep's folder: exit $?: $(cat "$tmp/older.stderr")"
grep -q "the caps of the run are not recorded" "$tmp/older/report.md" ||
  fail "--report_only on an older sweep's folder: $(head -20 "$tmp/older/report.md")"
rm "$tmp/older/report.md" && echo mine >"$tmp/older/notes.txt"
expect_exit 2 "holds files the sweep did not write (notes.txt" --report_only --out="$tmp/older"
[[ ! -e "$tmp/older/report.md" && "$(cat "$tmp/older/notes.txt")" == mine ]] ||
  fail "--report_only wrote into a folder with a user's file"
# Waits at most $2 seconds for process $1 (a child of this shell), then ends it; its exit status
# in $waited (124: ended).
wait_bounded() {
  local pid="$1" deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    wait "$pid" 2>/dev/null || true
    waited=124
    return
  fi
  set +e
  wait "$pid"
  waited=$?
  set -e
}
# The first child process of process $1 (read from /proc: a bare root may have no pgrep).
child_of() {
  local status
  for status in /proc/[0-9]*/status; do
    if grep -q "^PPid:[[:space:]]*$1\$" "$status" 2>/dev/null; then
      basename "$(dirname "$status")"
      return
    fi
  done
}
# No temporary of an output is left in folder $1.
no_temporaries() {
  local left
  left=$(find "$1" -maxdepth 1 -name '.*.tmp.*' | head -3)
  [[ -z "$left" ]] || fail "temporaries left in $1: $left"
}

# 1. Text from a file never reaches gnuplot as code: a backquoted command in a model cell is
# drawn as text; a cell with a line break (which would end gnuplot's command) is refused.
finished "$tmp/gp"
set_model_cell "$tmp/gp" 1 'x`touch '"$tmp"'/PWNED_BACKQUOTE`'
run_sweep --out="$tmp/gp" --report_only --models=heavy_mlp:depth=2:hidden=4:batch=2 \
  >/dev/null 2>"$tmp/gp.stderr" || fail "--report_only with a backquote in a cell: $(cat "$tmp/gp.stderr")"
[[ ! -e "$tmp/PWNED_BACKQUOTE" ]] || fail "a backquote in results.csv ran a command in gnuplot"
grep -qF "set title (('x\`touch" "$tmp/gp/pareto.gp" || fail "the cell is not a literal title"
finished "$tmp/gp2"
set_model_cell "$tmp/gp2" 2 $'y\nsystem("touch '"$tmp"'/PWNED_NEWLINE")'
before=$(md5sum <"$tmp/gp2/results.csv")
expect_exit 2 "results.csv line 3 holds a line break in field 1" \
  --out="$tmp/gp2" --report_only --models=heavy_mlp:depth=2:hidden=4:batch=2
[[ ! -e "$tmp/PWNED_NEWLINE" ]] || fail "a line break in results.csv ran a command in gnuplot"
[[ "$(md5sum <"$tmp/gp2/results.csv")" == "$before" ]] || fail "the refused file was changed"
check_bad "holds a control character (byte 0x1b)" --models=$'heavy_mlp:depth=2\x1b[2J'
check_bad "holds a line break at position 19" --strategies=$'uniform:segments=2\nx'
check_bad "holds a C1 control character (U+009B)" --models=$'heavy_mlp:depth=2\xc2\x9b2J'
# The largest link rate is recorded as given, not through a double that overflows to a negative.
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=store_all --steps=1 \
  --warmup=0 --link_bandwidth=9223372036854775807B/s --out="$tmp/link" >/dev/null 2>&1 ||
  fail "the largest --link_bandwidth exited $?"
grep -qx 'link_bandwidth,9223372036854775807B/s' "$tmp/link/run.csv" ||
  fail "run.csv's link rate: $(grep link "$tmp/link/run.csv")"
if grep -q -- '-[0-9.]* GB/s' "$tmp/link/report.md"; then fail "report.md: a negative link rate"; fi
check_bad "holds a byte that is not UTF-8 (0xff)" --models=$'heavy_mlp:depth=2\xff'

# 2. Outputs whole or not at all, with a file size limit for a full disk (under_limit).
# At the first output: nothing left behind, the reason named, and a --resume starts afresh.
rm -rf "$tmp/full0"
mkdir "$tmp/full0"
under_limit 0 "${tiny[@]}" --out="$tmp/full0"
[[ $limit_rc -eq 1 ]] || fail "a full disk at the first output: exit $limit_rc, expected 1"
grep -q "cannot write $tmp/full0/run.csv: File too large" "$tmp/limit.out" ||
  fail "a full disk at the first output: $(cat "$tmp/limit.out")"
[[ -z "$(ls -A "$tmp/full0")" ]] || fail "a full disk at the first output left: $(ls -A "$tmp/full0")"
"${sweep[@]}" "${tiny[@]}" --out="$tmp/full0" --resume >/dev/null 2>&1 ||
  fail "--resume after a full disk at the first output"
# After the rows: results.csv (within the limit) is whole, report.md and pareto.png (past it)
# are not written at all, and the last line lists only what was written. The limit is taken
# from the same run's file sizes.
rm -rf "$tmp/full1" "$tmp/sizes"
"${sweep[@]}" "${tiny[@]}" --out="$tmp/sizes" >/dev/null 2>&1 || fail "the run that sizes the files"
kib=$((($(stat -c %s "$tmp/sizes/results.csv") + 1023) / 1024))
(($(stat -c %s "$tmp/sizes/report.md") > kib * 1024)) ||
  fail "the full-disk case needs report.md larger than results.csv's $kib KiB"
under_limit "$kib" "${tiny[@]}" --out="$tmp/full1"
[[ $limit_rc -eq 1 ]] || fail "a full disk after the rows: exit $limit_rc, expected 1"
grep -q "cannot write $tmp/full1/report.md: File too large" "$tmp/limit.out" ||
  fail "a full disk after the rows: $(cat "$tmp/limit.out")"
grep -q "^results: $tmp/full1 (results.csv" "$tmp/limit.out" ||
  fail "a full disk after the rows: no closing line: $(cat "$tmp/limit.out")"
# The kept profile, larger than the limit, is not written; said, and the rows go on.
grep -q "its profile is not kept (cannot write $tmp/full1/profiles.txt: File too large)" \
  "$tmp/limit.out" || fail "a full disk before the rows: $(cat "$tmp/limit.out")"
grep "^results: " "$tmp/limit.out" | grep -q "report.md\|pareto.png" &&
  fail "the closing line lists a file that was not written: $(grep '^results: ' "$tmp/limit.out")"
[[ ! -e "$tmp/full1/report.md" && ! -e "$tmp/full1/pareto.png" ]] ||
  fail "a full disk after the rows left a partial report.md or pareto.png"
[[ -z "$(find "$tmp/full1" -maxdepth 1 -empty -type f)" ]] ||
  fail "a full disk left empty files: $(find "$tmp/full1" -maxdepth 1 -empty -type f)"
no_temporaries "$tmp/full1"
# A finished folder resumed on a full disk: every earlier output as it was.
finished "$tmp/full2"
earlier=(pareto.dat pareto.gp report.md)
if command -v gnuplot >/dev/null; then earlier+=(pareto.png); fi
sums=$(cd "$tmp/full2" && md5sum "${earlier[@]}")
under_limit 0 --models=heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=3:hidden=4:batch=2 \
  --strategies=store_all --steps=1 --warmup=0 --out="$tmp/full2" --resume
[[ $limit_rc -eq 1 ]] || fail "resume of a finished folder on a full disk: exit $limit_rc"
[[ "$(cd "$tmp/full2" && md5sum "${earlier[@]}")" == "$sums" ]] ||
  fail "resume on a full disk changed earlier outputs"
grep "^results: " "$tmp/limit.out" | grep -q "pareto.png" &&
  fail "resume on a full disk lists pareto.png: $(grep '^results: ' "$tmp/limit.out")"
no_temporaries "$tmp/full2"
# --list names the part actions plan text takes, fused attention with whether this build has it.
run_sweep --list >"$tmp/list.out" || fail "--list exited $?"
grep -q '^  recompute: attention core, MLP hidden, norm$' "$tmp/list.out" ||
  fail "--list has no part actions: $(tail -5 "$tmp/list.out")"
grep -qE '^  fused: attention core without dropout \(scaled_dot_product_attention\)($|; unavailable here: LibTorch 1\.)' \
  "$tmp/list.out" || fail "--list: $(grep fused "$tmp/list.out")"
# Standard output is an output too.
set +e
run_sweep --list >/dev/full 2>"$tmp/full.stderr"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "--list > /dev/full: exit $rc, expected 1"
grep -q "cannot write to standard output: No space left on device" "$tmp/full.stderr" ||
  fail "--list > /dev/full: $(cat "$tmp/full.stderr")"
# An output replaced by a folder: refused before anything is measured, nothing left behind.
finished "$tmp/dirout"
rm "$tmp/dirout/report.md" && mkdir "$tmp/dirout/report.md"
before=$(md5sum <"$tmp/dirout/results.csv")
expect_exit 2 "report.md is a directory, where the sweep writes a file" \
  --models=heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=5:hidden=4:batch=2 \
  --strategies=store_all --steps=1 --warmup=0 --out="$tmp/dirout" --resume
[[ "$(md5sum <"$tmp/dirout/results.csv")" == "$before" ]] || fail "rows were measured before refusing"
no_temporaries "$tmp/dirout"
# A folder in which files cannot be made (results.csv itself writable): refused before measuring.
# Root may write anywhere, so as root the case runs as nobody, from a copy outside root's home,
# with copies of the shared libraries nobody cannot read there (a CMake build's and the C++
# bundle's, under root's home in tools/gpu/rehearse.sh: found through LD_LIBRARY_PATH once the
# RPATH's folder cannot be entered); where root cannot become nobody (Bazel's sandbox maps no
# other user), it is skipped, and runs under ctest (tools/gpu/rehearse.sh, as CI runs it).
as_user=()
((EUID == 0)) && as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if ((EUID == 0)) && ! "${as_user[@]}" true 2>/dev/null; then
  echo "sweep_hostile_test: skipped the unwritable-folder case: root cannot run as nobody here" >&2
else
  locked=$(mktemp -d /tmp/ckptlab-locked.XXXXXX)
  chmod 755 "$locked"
  cp "$(readlink -f "${sweep[0]}")" "$locked/sweep"
  mkdir "$locked/lib"
  while read -r library; do
    "${as_user[@]}" test -r "$library" || cp "$library" "$locked/lib/"
  done < <(ldd "$locked/sweep" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
  chmod -R a+rX "$locked"
  finished "$locked/out"
  chmod 666 "$locked/out/results.csv"
  chmod 555 "$locked/out"
  before=$(md5sum <"$locked/out/results.csv")
  set +e
  "${as_user[@]}" env LD_LIBRARY_PATH="$locked/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$locked/sweep" --device=cpu \
    --models=heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=5:hidden=4:batch=2 \
    --strategies=store_all --steps=1 --warmup=0 --out="$locked/out" --resume \
    >/dev/null 2>"$tmp/locked.stderr"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "a folder that takes no new files: exit $rc, expected 2: $(cat "$tmp/locked.stderr")"
  grep -q "files cannot be created in $locked/out" "$tmp/locked.stderr" ||
    fail "a folder that takes no new files: $(cat "$tmp/locked.stderr")"
  [[ "$(md5sum <"$locked/out/results.csv")" == "$before" ]] || fail "rows were added before refusing"
  chmod -R u+w "$locked" && rm -rf "$locked"
fi
# A folder of the user's own files is not the sweep's to overwrite.
rm -rf "$tmp/mine" && mkdir "$tmp/mine" && echo "my notes" >"$tmp/mine/report.md"
expect_exit 2 "holds files the sweep did not write (report.md)" "${tiny[@]}" --out="$tmp/mine"
[[ "$(cat "$tmp/mine/report.md")" == "my notes" && $(ls -A "$tmp/mine" | wc -l) -eq 1 ]] ||
  fail "the user's folder was changed"

# Two sweeps started at once on one new --out, new folders above it too: one of them wins (exit
# 0, its rows written), the other is refused in one line (exit 2). The one that made the folder
# and lost it to the other once removed it from under the winner: both failed, in 3 of 12.
for trial in 1 2 3 4 5 6; do
  race="$tmp/race$trial/a/b"
  "${sweep[@]}" "${tiny[@]}" --out="$race" >/dev/null 2>"$tmp/race1.stderr" &
  first=$!
  "${sweep[@]}" "${tiny[@]}" --out="$race" >/dev/null 2>"$tmp/race2.stderr" &
  second=$!
  set +e
  wait "$first"
  rc1=$?
  wait "$second"
  rc2=$?
  set -e
  ((rc1 + rc2 == 2 && rc1 * rc2 == 0)) ||
    fail "two sweeps at once on one new --out (trial $trial): exits $rc1 and $rc2, one 0 expected"
  [[ -s "$race/results.csv" ]] || fail "two sweeps at once on one new --out: no results.csv"
  loser=$((rc1 == 2 ? 1 : 2))
  [[ $(wc -l <"$tmp/race$loser.stderr") -eq 1 ]] &&
    grep -q "another sweep is using --out='$race' now" "$tmp/race$loser.stderr" ||
    fail "two sweeps at once on one new --out: the refusal: $(cat "$tmp/race$loser.stderr")"
done

# 3. Files that are not what they seem: refused at once, never read.
for what in fifo zero; do
  finished "$tmp/$what"
  rm "$tmp/$what/results.csv"
  if [[ $what == fifo ]]; then mkfifo "$tmp/$what/results.csv"; else ln -s /dev/zero "$tmp/$what/results.csv"; fi
  set +e
  timeout 60 "${sweep[@]}" "${tiny[@]}" --out="$tmp/$what" --resume >/dev/null 2>"$tmp/$what.stderr"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "results.csv as a $what: exit $rc, expected 2 (124: hung)"
  grep -q "results.csv is a \(FIFO\|character device\)" "$tmp/$what.stderr" ||
    fail "results.csv as a $what: $(cat "$tmp/$what.stderr")"
done

# A kept profile that is a FIFO is refused before anything runs; one that is a link is read
# through (text that is no profile is set aside, said) and replaced by a file, the link's target
# untouched.
finished "$tmp/kept"
rm "$tmp/kept/profiles.txt" && mkfifo "$tmp/kept/profiles.txt"
expect_exit 2 "profiles.txt is a FIFO" "${tiny[@]}" --out="$tmp/kept" --resume
predict=(--predict --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=store_all)
rm -rf "$tmp/kept" && "${sweep[@]}" "${predict[@]}" --out="$tmp/kept" >/dev/null 2>&1 ||
  fail "--predict into a new folder"
rm "$tmp/kept/profiles.txt" && echo "my notes" >"$tmp/notes" && ln -s "$tmp/notes" "$tmp/kept/profiles.txt"
"${sweep[@]}" "${predict[@]}" --out="$tmp/kept" >/dev/null 2>"$tmp/kept.stderr" ||
  fail "--predict beside a linked profiles.txt"
grep -q "profiles.txt set aside (profile text line 1: expected ckptlab-profiles, not 'my')" \
  "$tmp/kept.stderr" || fail "a linked profiles.txt: $(cat "$tmp/kept.stderr")"
[[ -f "$tmp/kept/profiles.txt" && ! -L "$tmp/kept/profiles.txt" && "$(cat "$tmp/notes")" == "my notes" ]] ||
  fail "the linked profiles.txt was followed, or not replaced"

# 4. A resume never measures a configuration twice, nor mixes runs.
rm -rf "$tmp/spell"
"${sweep[@]}" --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=uniform --steps=1 \
  --warmup=0 --out="$tmp/spell" >/dev/null 2>&1 || fail "the first spelling's run"
"${sweep[@]}" --models=heavy_mlp:batch=2:hidden=4:depth=2 --strategies=uniform:segments=auto \
  --steps=1 --warmup=0 --out="$tmp/spell" --resume >/dev/null 2>"$tmp/spell.stderr" ||
  fail "resume under another spelling: $(cat "$tmp/spell.stderr")"
grep -q "already in results.csv, skipped" "$tmp/spell.stderr" || fail "another spelling ran again"
[[ $(($(wc -l <"$tmp/spell/results.csv") - 1)) -eq 2 ]] || fail "rows twice: $(cat "$tmp/spell/results.csv")"
check_bad "--models lists transformer:depth=1:hidden=4:heads=1:seq=2:batch=1:dropout=0.1 twice" \
  --models=transformer:depth=1:hidden=4:heads=1:seq=2:batch=1:dropout=0.1,transformer:depth=1:hidden=4:heads=1:seq=2:batch=1:dropout=0.10
check_bad "dropout=0.125 twice" \
  --models=transformer:depth=1:hidden=4:heads=1:seq=2:batch=1:dropout=0x1p-3,transformer:depth=1:hidden=4:heads=1:seq=2:batch=1:dropout=0.125
rm -rf "$tmp/cap"
"${sweep[@]}" "${tiny[@]}" --memory_cap=0 --out="$tmp/cap" >/dev/null 2>&1 || fail "the capped run"
expect_exit 2 "--memory_cap (none now, 0 there)" \
  --models=heavy_mlp:depth=2:hidden=4:batch=2,heavy_mlp:depth=3:hidden=4:batch=2 \
  --strategies=store_all --steps=1 --warmup=0 --out="$tmp/cap" --resume
check_bad "--depths lists 2 twice" --models=heavy_mlp:depth=2:hidden=4:batch=1 --depths=2,2,3
# Sweeps started together without --out get folders of their own.
mkdir -p "$tmp/ws"
pids=()
for k in 1 2 3; do
  BUILD_WORKSPACE_DIRECTORY="$tmp/ws" "${sweep[@]}" "${tiny[@]}" >/dev/null 2>"$tmp/default$k.stderr" &
  pids+=($!)
done
for k in 1 2 3; do
  wait "${pids[k - 1]}" || fail "sweep $k of 3 started together: $(cat "$tmp/default$k.stderr")"
done
[[ $(ls "$tmp/ws/results" | wc -l) -eq 3 ]] || fail "3 sweeps, folders: $(ls "$tmp/ws/results")"

# 5. What the run records is what ran.
rm -rf "$tmp/chunks"
"${sweep[@]}" --models=transformer:depth=1:hidden=4:heads=1:seq=16:batch=1 \
  --strategies=chunked_sequence:chunks=1048576 --steps=1 --warmup=0 --out="$tmp/chunks" \
  >/dev/null 2>"$tmp/chunks.stderr" || fail "more chunks than positions: $(cat "$tmp/chunks.stderr")"
grep -q ',chunked_sequence:chunks=16,cpu,ok,.*sequence=chunk:16 @ 0-1' "$tmp/chunks/results.csv" ||
  fail "more chunks than positions: the row does not say 16: $(cat "$tmp/chunks/results.csv")"
cores=$(nproc)
check_bad "--blas_threads='1000' is not accepted; accepted: 1..$cores" --blas_threads=1000
check_bad "--threads='1000' is not accepted; accepted: 1..$cores" --threads=1000
check_bad "--flagfile is not supported" --flagfile="$tmp/no-such-file"
grep -q "^blas_threads,[0-9]" "$tmp/ok/run.csv" || fail "run.csv records no BLAS threads"

# 6. Profiling is linear in depth, and says how far it is: 20,000 stages in seconds (a profile
# quadratic in depth took minutes at this depth).
rm -rf "$tmp/deep"
set +e
timeout 120 "${sweep[@]}" --models=heavy_mlp:depth=20000:hidden=1:batch=1 --strategies=store_all \
  --steps=1 --warmup=0 --out="$tmp/deep" >/dev/null 2>"$tmp/deep.stderr"
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "20,000 stages: exit $rc (124: over 120 s): $(tail -3 "$tmp/deep.stderr")"

# 7. Data parallel (docs/data-parallel.md): ranks on this host, over loopback only.
dp_models="heavy_mlp:depth=3:hidden=8:batch=2,heavy_mlp:depth=4:hidden=8:batch=2"
dp_models+=",heavy_mlp:depth=6:hidden=512:batch=256"
# The ranks' meeting folders go to $TMPDIR: here, one of the test's own (a rank 0 killed below
# cannot remove its folder).
saved_tmpdir="${TMPDIR:-}"
mkdir -p "$tmp/dp-tmp"
export TMPDIR="$tmp/dp-tmp"
set +e
"${sweep[@]}" --nproc=2 --models=heavy_mlp:depth=4:hidden=8:batch=2 \
  --strategies=store_all,uniform,recompute_all --steps=2 --warmup=1 --train_steps=4 \
  --out="$tmp/dp" >"$tmp/dp.stdout" 2>"$tmp/dp.stderr"
rc=$?
set -e
if grep -q "data parallel is not available\|neither Gloo's headers\|data parallel on cpu is not built" \
  "$tmp/dp.stderr"; then
  [[ $rc -eq 2 ]] || fail "--nproc=2 without Gloo: exit $rc, expected 2"
  echo "sweep_hostile_test: this build has no Gloo: the data-parallel checks are skipped" >&2
else
  [[ $rc -eq 0 ]] || fail "--nproc=2 exited $rc: $(cat "$tmp/dp.stderr")"
  # Every row ok, run by 2 ranks over Gloo, with the all-reduce's figures.
  python3 - "$tmp/dp/results.csv" <<'PY' || fail "--nproc=2 rows: $(cat "$tmp/dp/results.csv")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 3, rows
for r in rows:
    assert r["status"] == "ok" and r["world_size"] == "2" and r["backend"] == "gloo", r
    assert float(r["allreduce_alone_ms"]) > 0 and r["allreduce_exposed_ms"] != "", r
    assert float(r["max_grad_diff_vs_store_all"]) <= 1e-5, r
PY
  # Resumed by one process: refused, naming the ranks that ran (not --predict's --world_size).
  expect_exit 2 "the ranks (--nproc, or a launcher's WORLD_SIZE) (1 now, 2 there)" --resume \
    --models=heavy_mlp:depth=4:hidden=8:batch=2 --strategies=store_all,uniform,recompute_all \
    --steps=2 --warmup=1 --train_steps=4 --out="$tmp/dp"
  # The 2-rank loss curve is the global batch's: one process on a batch twice the size draws
  # the same rows and trains to the same losses, up to float32 reduction order (1e-5 relative).
  "${sweep[@]}" --models=heavy_mlp:depth=4:hidden=8:batch=4 --strategies=store_all,uniform \
    --steps=1 --warmup=0 --train_steps=4 --out="$tmp/dp1" >/dev/null 2>"$tmp/dp1.stderr" ||
    fail "the one-process twin exited $?: $(cat "$tmp/dp1.stderr")"
  python3 - "$tmp/dp/losses.csv" "$tmp/dp1/losses.csv" <<'PY' || fail "loss curves, 2 ranks vs 1 process"
import csv, sys
def curves(path):
    out = {}
    for r in csv.DictReader(open(path)):
        out.setdefault(r["strategy"], []).append(float(r["loss"]))
    return out
two, one = curves(sys.argv[1]), curves(sys.argv[2])
for strategy in ("store_all", "uniform:segments=2"):
    a, b = two[strategy], one[strategy]
    assert len(a) == len(b) == 4, (strategy, a, b)
    for x, y in zip(a, b):
        assert abs(x - y) <= 1e-5 * max(1.0, abs(y)), (strategy, a, b)
PY
  grep -q '^world_size,2$' "$tmp/dp/run.csv" || fail "run.csv records no world size"
  [[ -z "$(ls "$tmp/dp-tmp")" ]] || fail "the ranks' folder is left in \$TMPDIR: $(ls "$tmp/dp-tmp")"

  # A rank killed mid-sweep: the other ends within 60 s with an error naming it, the rows
  # already written stay whole, and --resume completes the run.
  rm -rf "$tmp/dpkill"
  dp_flags=(--nproc=2 --models="$dp_models" --strategies=uniform --steps=30 --warmup=0)
  "${sweep[@]}" "${dp_flags[@]}" --out="$tmp/dpkill" >/dev/null 2>"$tmp/dpkill.stderr" &
  pid=$!
  wait_rows "$tmp/dpkill/results.csv" 2  # the first model's, at most a minute
  rank1=$(child_of "$pid")
  if [[ -z "$rank1" ]]; then
    fail "no rank 1 to kill: $(cat "$tmp/dpkill.stderr")"
  else
    kill -9 "$rank1"
    start=$SECONDS
    set +e
    wait "$pid"
    rc=$?
    set -e
    ((SECONDS - start <= 60)) || fail "rank 0 took $((SECONDS - start)) s to end after rank 1 died"
    [[ $rc -eq 1 ]] || fail "a killed rank: exit $rc, expected 1"
    grep -q "rank 1 was killed by signal 9" "$tmp/dpkill.stderr" ||
      fail "a killed rank is not named: $(cat "$tmp/dpkill.stderr")"
    rows=$(($(wc -l <"$tmp/dpkill/results.csv") - 1))
    ((rows >= 2 && rows < 6)) || fail "the killed run left $rows rows"
    "${sweep[@]}" "${dp_flags[@]}" --out="$tmp/dpkill" --resume >/dev/null 2>"$tmp/dpresume.stderr" ||
      fail "--resume after a killed rank exited $?: $(cat "$tmp/dpresume.stderr")"
    [[ $(wc -l <"$tmp/dpkill/results.csv") -eq 7 ]] ||
      fail "resumed: $(cat "$tmp/dpkill/results.csv")"
  fi

  # Rank 0 killed: the rank it started ends too, within seconds (its collectives fail when
  # rank 0's sockets close; for a rank in a long computation, the kernel's signal on its
  # starter's death, core/dist/launcher.h's EndWithLauncher, ends it).
  rm -rf "$tmp/dpkill0"
  "${sweep[@]}" "${dp_flags[@]}" --out="$tmp/dpkill0" >/dev/null 2>"$tmp/dpkill0.stderr" &
  pid=$!
  wait_rows "$tmp/dpkill0/results.csv" 2  # the first model's, at most a minute
  rank1=$(child_of "$pid")
  [[ -n "$rank1" ]] || fail "no rank 1 under rank 0: $(cat "$tmp/dpkill0.stderr")"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  ended=0
  for _ in $(seq 1 300); do  # gone, or a zombie waiting for its new parent
    if [[ -z "$rank1" || ! -e "/proc/$rank1" ]] ||
      grep -q '^State:[[:space:]]*Z' "/proc/$rank1/status" 2>/dev/null; then
      ended=1
      break
    fi
    sleep 0.1
  done
  ((ended)) || fail "rank 1 outlived rank 0 by 30 s"

  # Ranks of one run started alike, or not at all: a launcher's ranks with different flags fail
  # when they meet, both with exit 2, naming the setting, and write nothing.
  rm -rf "$tmp/dpa" "$tmp/dpb"
  store="$tmp/dp-meet.store"
  rm -f "$store"
  pids=()
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 CKPT_RENDEZVOUS_FILE="$store" "${sweep[@]}" \
      --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=store_all \
      --steps=$((1 + rank)) --warmup=0 --out="$tmp/dp-differ$rank" >/dev/null \
      2>"$tmp/dp-differ$rank.stderr" &
    pids+=($!)
  done
  for rank in 0 1; do
    wait_bounded "${pids[rank]}" 90
    rc=$waited
    [[ $rc -eq 2 ]] || fail "rank $rank started with other flags: exit $rc, expected 2"
    grep -q "rank 0 has 'steps=1', rank 1 'steps=2'" "$tmp/dp-differ$rank.stderr" ||
      fail "rank $rank: $(cat "$tmp/dp-differ$rank.stderr")"
    [[ ! -e "$tmp/dp-differ$rank" ]] || fail "rank $rank wrote an output folder"
  done

  # Ranks that a launcher started, meeting at rank 0's TCP store on loopback (a port free a
  # moment ago): both end with status 0, and rank 0 alone writes, rows of 2 ranks.
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  rm -rf "$tmp/dp-tcp0" "$tmp/dp-tcp1"
  pids=()
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${sweep[@]}" \
      --models=heavy_mlp:depth=2:hidden=4:batch=2 --strategies=store_all,recompute_all \
      --steps=1 --warmup=1 --out="$tmp/dp-tcp$rank" >/dev/null 2>"$tmp/dp-tcp$rank.stderr" &
    pids+=($!)
  done
  for rank in 0 1; do
    wait_bounded "${pids[rank]}" 90
    [[ $waited -eq 0 ]] || fail "TCP rank $rank: exit $waited: $(cat "$tmp/dp-tcp$rank.stderr")"
  done
  [[ $(grep -c ',2,gloo,' "$tmp/dp-tcp0/results.csv" 2>/dev/null) -eq 2 ]] ||
    fail "TCP ranks: rank 0's rows: $(cat "$tmp/dp-tcp0/results.csv" 2>&1)"
  [[ ! -e "$tmp/dp-tcp1" ]] || fail "TCP ranks: rank 1 wrote an output folder"

  # A port in use: rank 0 cannot serve the store there, exit 2 before anything is written.
  rm -f "$tmp/port"
  python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)' "$tmp/port" &
  listener=$!
  for _ in $(seq 1 100); do [[ -s "$tmp/port" ]] && break; sleep 0.1; done
  export RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT
  MASTER_PORT=$(cat "$tmp/port")
  expect_exit 2 "is the port in use?" --models=heavy_mlp:depth=2:hidden=4:batch=2 \
    --strategies=store_all --steps=1 --warmup=0 --out="$tmp/dp-port"
  [[ ! -e "$tmp/dp-port" ]] || fail "a port in use: an output folder was made"
  # --nproc under a launcher's world of another size, and out of range: exit 2.
  expect_exit 2 "--nproc=2 but the environment sets WORLD_SIZE=1" --nproc=2 \
    --models=heavy_mlp:depth=2:hidden=4:batch=2 --out="$tmp/dp-port"
  unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
  kill "$listener" 2>/dev/null || true
  check_bad "--nproc=0 is not accepted; accepted: 1..64" --nproc=0
  check_bad "--report_only runs nothing, so --nproc cannot go with it" --report_only --nproc=2
  # A backend that cannot reduce the device's tensors, with ranks or alone: exit 2, naming it.
  check_bad "--dist_backend=nccl: backend 'nccl' cannot reduce cpu tensors in this build; accepted: auto, gloo" \
    --device=cpu --nproc=2 --dist_backend=nccl
  check_bad "--dist_backend=mpi: backend 'mpi' cannot reduce cpu tensors in this build; accepted: auto, gloo" \
    --device=cpu --dist_backend=mpi
  # NCCL with two ranks on one GPU: exit 2 before any rank starts where NCCL is built (a GPU
  # host); elsewhere exit 2 all the same, for want of CUDA or NCCL.
  check_bad "needs a GPU per rank, and 2 ranks of this host would share --device=cuda:0\|without CUDA\|no CUDA GPU\|cannot reduce cuda:0" \
    --device=cuda:0 --nproc=2 --dist_backend=nccl
fi
if [[ -n "$saved_tmpdir" ]]; then export TMPDIR="$saved_tmpdir"; else unset TMPDIR; fi

# A model from a TorchScript file (docs/torchscript.md): each kind of bad file is exit 2, one
# line naming the file, nothing written. The files that must be real TorchScript are written by
# a Python with torch (required under Bazel, whose tools/bazel installs python3-torch).
find_torch_python
ts="$tmp/torchscript"
rm -rf "$ts" && mkdir -p "$ts"
printf 'not a model\n' >"$ts/text.pt"
: >"$ts/empty.pt"
mkdir "$ts/folder.pt"
mkfifo "$ts/fifo.pt"
check_bad "torchscript:file=$ts/text.pt: not a TorchScript archive" \
  --models="torchscript:file=$ts/text.pt:input=4" --strategies=store_all
check_bad "torchscript:file=$ts/empty.pt: the file is empty" \
  --models="torchscript:file=$ts/empty.pt:input=4" --strategies=store_all
check_bad "$ts/folder.pt is a directory" \
  --models="torchscript:file=$ts/folder.pt:input=4" --strategies=store_all
check_bad "$ts/fifo.pt is a FIFO" --models="torchscript:file=$ts/fifo.pt:input=4" --strategies=store_all
check_bad "give one of input (3x224x224) and tokens" \
  --models="torchscript:file=$ts/text.pt" --strategies=store_all
if [[ -n "$torch_python" ]]; then
  "$torch_python" - "$ts" <<'PY' 2>/dev/null || fail "could not write the TorchScript files"
import os, sys, zipfile
import torch
from torch import nn
ts = sys.argv[1]
torch.jit.script(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))).save(f"{ts}/ok.pt")
torch.jit.script(nn.Linear(4, 3)).save(f"{ts}/single.pt")
torch.jit.script(nn.Sequential(nn.Linear(4, 3), nn.Linear(5, 2))).save(f"{ts}/mismatch.pt")
with open(f"{ts}/ok.pt", "rb") as f:
    data = f.read()
with open(f"{ts}/truncated.pt", "wb") as f:
    f.write(data[: len(data) // 2])
# The same archive, its format version past any PyTorch's.
with zipfile.ZipFile(f"{ts}/ok.pt") as old, zipfile.ZipFile(f"{ts}/newer.pt", "w") as new:
    for item in old.infolist():
        body = b"99\n" if item.filename.endswith("/version") else old.read(item)
        new.writestr(item.filename, body)
PY
  check_bad "torchscript:file=$ts/truncated.pt: not a TorchScript archive" \
    --models="torchscript:file=$ts/truncated.pt:input=4" --strategies=store_all
  check_bad "torchscript:file=$ts/newer.pt: not a TorchScript archive this LibTorch" \
    --models="torchscript:file=$ts/newer.pt:input=4" --strategies=store_all
  grep -q "version" "$tmp/bad.stderr" || fail "a newer archive: no word on its version: $(cat "$tmp/bad.stderr")"
  check_bad "is not a sequence of stages" \
    --models="torchscript:file=$ts/single.pt:input=4" --strategies=store_all
  check_bad "the output of stage 0.Linear" \
    --models="torchscript:file=$ts/mismatch.pt:input=4" --strategies=store_all
  check_bad "the batch (" --models="torchscript:file=$ts/ok.pt:input=5" --strategies=store_all
  # The good file sweeps, and --list says which loss applies.
  "${sweep[@]}" --models="torchscript:file=$ts/ok.pt:input=4:classes=2:batch=3" \
    --strategies=store_all,uniform --steps=1 --warmup=0 --out="$ts/out" >/dev/null \
    2>"$ts/out.stderr" || fail "a TorchScript sweep: exit $?: $(cat "$ts/out.stderr")"
  [[ $(grep -c ",cpu,ok," "$ts/out/results.csv") -eq 2 ]] ||
    fail "a TorchScript sweep: $(cat "$ts/out/results.csv")"
elif [[ -n "${TEST_SRCDIR:-}" ]]; then
  fail "no Python with torch: tools/bazel installs python3-torch"
else
  echo "sweep_hostile_test: no Python with torch; the TorchScript files it writes are not checked"
fi
run_sweep --list >"$tmp/list.out" 2>&1 || fail "--list: exit $?"
grep -q "cross-entropy where the output is \[batch, classes\]" "$tmp/list.out" ||
  fail "--list does not say which loss a torchscript model has"

finish sweep_hostile_test
