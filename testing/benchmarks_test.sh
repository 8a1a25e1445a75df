#!/usr/bin/env bash
# //experiments:benchmarks end to end: Google Benchmark's flags and the project's coexist, the
# names select with --benchmark_filter, the counters are there, and an infeasible
# configuration is skipped with its error.
set -euo pipefail
# On the CPU wherever it runs (a GPU host's ctest too): real time, and the CPU's exact bytes.
bench=("${BENCHMARKS:-$TEST_SRCDIR/ckptlab/experiments/benchmarks}" --device=cpu)
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"${bench[@]}" --models=heavy_mlp:depth=3:hidden=8:batch=2 --strategies=store_all,uniform:segments=5,uniform \
  --benchmark_filter='^(store_all|uniform)' --benchmark_min_time=0.01 --benchmark_format=json \
  >"$tmp/out.json" 2>"$tmp/err.txt"
fail() { echo "FAIL: $*" >&2; cat "$tmp/out.json" >&2; exit 1; }
grep -q '"name": "store_all/heavy_mlp:depth=3:hidden=8:batch=2/real_time"' "$tmp/out.json" || fail "no store_all benchmark"
# store_all keeps one 2 x 8 float block output per block (64 bytes) and the 4-byte loss:
# 3 x 64 + 4 = 196.
grep -q '"activation_bytes": 1.96000*e+02' "$tmp/out.json" || fail "activation_bytes is not 196"
grep -q '"peak_bytes"' "$tmp/out.json" || fail "no peak_bytes counter"
grep -q '"recompute_forwards"' "$tmp/out.json" || fail "no recompute_forwards counter"
grep -q '"error_message": "uniform: segments=5 is more than the 3 stages' "$tmp/out.json" ||
  fail "the infeasible configuration was not skipped with its error"
grep -q '"libtorch": ' "$tmp/out.json" || fail "no libtorch context"
# --benchmark_filter selects by name: only the uniform ones.
"${bench[@]}" --models=heavy_mlp:depth=3:hidden=8:batch=2 --benchmark_filter='^uniform/' \
  --benchmark_min_time=0.01 --benchmark_format=json >"$tmp/filtered.json" 2>/dev/null
! grep -q '"name": "store_all' "$tmp/filtered.json" || fail "the filter let store_all through"
grep -q '"name": "uniform/' "$tmp/filtered.json" || fail "the filter dropped uniform"
# --predict: the question timed cold (its profile measured) and warm (the kept one taken).
"${bench[@]}" --predict=heavy_mlp:depth=3:hidden=8:batch=2 --strategies=store_all,uniform \
  --benchmark_filter='^predict_' --benchmark_min_time=0.01 --benchmark_format=json \
  >"$tmp/predict.json" 2>/dev/null || fail "the --predict benchmarks exited $?"
/usr/bin/python3 - "$tmp/predict.json" <<'PY' || fail "the --predict benchmarks' counters"
import json, sys
runs = {b["name"].split("/")[0]: b for b in json.load(open(sys.argv[1]))["benchmarks"]}
assert runs["predict_cold"]["profiled"] == 1 and runs["predict_cold"]["iterations"] == 1, runs
assert runs["predict_warm"]["profiled"] == 0, runs
PY
# The project's bad input still exits 2.
set +e
"${bench[@]}" --strategies=checkmate >/dev/null 2>"$tmp/bad.txt"
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "unknown strategy 'checkmate'" "$tmp/bad.txt" || fail "bad strategy: exit $rc"
set +e
"${bench[@]}" --models=heavy_mlp:depth=3:hidden=8:batch=2 --benchmark_filter='^checkmate/' \
  >/dev/null 2>"$tmp/bad.txt"
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "Failed to match any benchmarks against regex: ^checkmate/" "$tmp/bad.txt" ||
  fail "a filter matching nothing: exit $rc, stderr: $(cat "$tmp/bad.txt")"
echo "benchmarks_test: all checks passed"
