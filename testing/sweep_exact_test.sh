#!/usr/bin/env bash
# End-to-end: a row that says ok holds what ran (docs/testing.md, round 4). Model files holding
# what users' models hold (aliased and view outputs, tuples between stages, in-place writes,
# state read after its update, random numbers without a generator, alike-looking stages that
# differ in an attribute, a zero-element parameter) give rows whose predicted activation bytes
# are the measured ones and whose gradients were compared; the gradient check cannot switch
# itself off (a cap store_all does not fit, an empty gradient); a model that cannot be built or
# checked is one line and exit 2; the records say what ran.
# shellcheck source=testing/sweep_cli_lib.sh
source "$(dirname "$0")/sweep_cli_lib.sh"

find_torch_python
if [[ -z "$torch_python" ]]; then
  [[ -n "${TEST_SRCDIR:-}" ]] && fail "no Python with torch: tools/bazel installs python3-torch"
  finish sweep_exact_test
  exit 0
fi

# Every row of results.csv $1: ok, its gradients compared, predicted activation bytes as
# measured ($2 names the case).
all_exact() {
  "$torch_python" - "$1" "$2" <<'PY' || fail "$2: $(cat "$1" 2>/dev/null | head -20)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bad = [r for r in rows if r["status"] != "ok" or not r["grad_check"]
       or r["predicted_activation_bytes"] != r["activation_bytes"]]
for r in bad:
    print(f"FAIL: {sys.argv[2]}: {r['strategy']}: {r['status']} {r['message']!r}, grad_check "
          f"{r['grad_check']!r}, activations predicted {r['predicted_activation_bytes']}, "
          f"measured {r['activation_bytes']}", file=sys.stderr)
sys.exit(1 if bad or len(rows) < 2 else 0)
PY
}

m="$tmp/models"
rm -rf "$m" && mkdir -p "$m"
# (From a file: scripting reads each class's source.)
cat >"$m/make.py" <<'PY'
import sys
import torch
from torch import nn

m = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from stage_modules import (Counter, Depth, EmptyJoin, EmptyParameter, EmptySlice, InPlace,
                           Integer, PassThrough, Random, Scale, TrainingOnly, Transposed, Twice,
                           TupleJoin)

torch.manual_seed(0)

def save(name, *stages):
    torch.jit.script(nn.Sequential(*stages)).save(f"{m}/{name}.pt")

save("aliases", nn.Linear(6, 6), Twice(), TupleJoin(), nn.Linear(6, 6), PassThrough(),
     TupleJoin(), Transposed(), Transposed(), nn.Flatten(), Scale(), InPlace(), EmptySlice(),
     EmptyJoin(), nn.BatchNorm1d(6), Counter(), Random(), EmptyParameter(), nn.Linear(6, 6))
save("depth", nn.Linear(6, 6), Depth(6, 0.0), Depth(6, 0.5), Depth(6, 0.5), nn.Linear(6, 6))
save("integer", nn.Linear(6, 6), Integer())
save("training_only", nn.Linear(6, 6), TrainingOnly(), nn.Linear(6, 6))
PY
"$torch_python" "$m/make.py" "$m" "$(dirname "$0")" || fail "could not write the TorchScript files"

# Aliased and view outputs, tuples taken whole, in-place writes, state, random numbers and a
# zero-element parameter: every strategy's row exact, its gradients compared, under a written
# plan of every segment mode too.
printf '%s\n' "[0,1) stored, [1,13) checkpointed {[1,3) stored, [3,6) checkpointed, [6,9) checkpointed, [9,11) offloaded, [11,13) stored}, [13,15) recompute-all, [15,18) stored" \
  >"$m/plan.txt"
"${sweep[@]}" --models="torchscript:file=$m/aliases.pt:input=6:batch=4" \
  --strategies="store_all,uniform,revolve,recompute_all,optimal,plan:file=$m/plan.txt" \
  --steps=1 --warmup=0 --out="$tmp/aliases" >/dev/null 2>"$tmp/aliases.stderr" ||
  fail "aliases: exit $?: $(cat "$tmp/aliases.stderr")"
all_exact "$tmp/aliases/results.csv" "aliases"
# Blocks alike but for their stochastic depth: each profiled as what it is.
"${sweep[@]}" --models="torchscript:file=$m/depth.pt:input=6:batch=4" \
  --strategies=store_all,uniform,revolve,recompute_all --steps=1 --warmup=0 \
  --out="$tmp/depth" >/dev/null 2>"$tmp/depth.stderr" || fail "depth: exit $?: $(cat "$tmp/depth.stderr")"
all_exact "$tmp/depth/results.csv" "stochastic depth"

# The gradient check does not switch itself off: under a cap store_all does not fit, the others
# are compared with store_all's uncapped reference.
"${sweep[@]}" --models=heavy_mlp:depth=6:hidden=16:batch=256 --strategies=store_all,recompute_all \
  --steps=1 --warmup=0 --memory_cap=125000 --out="$tmp/capped" >/dev/null 2>&1 ||
  fail "capped: exit $?"
"$torch_python" - "$tmp/capped/results.csv" <<'PY' || fail "capped: $(cat "$tmp/capped/results.csv")"
import csv, sys
rows = {r["strategy"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert rows["store_all"]["status"] == "oom", rows["store_all"]
assert rows["recompute_all"]["status"] == "ok" and rows["recompute_all"]["grad_check"] == "float32"
assert float(rows["recompute_all"]["max_grad_diff_vs_store_all"]) == 0
PY
# A plan that sums in another order, under autocast, is compared on float64 twins.
"${sweep[@]}" --models=llama:size=tiny:depth=2:seq=8 --strategies=store_all,chunked_sequence:chunks=2 \
  --steps=1 --warmup=0 --amp --out="$tmp/amp" >/dev/null 2>"$tmp/amp.stderr" ||
  fail "amp: exit $?: $(cat "$tmp/amp.stderr")"
grep -q ',chunked_sequence:chunks=2,cpu,ok,.*,float64 twin,' "$tmp/amp/results.csv" ||
  fail "amp: the chunked row is not ok on float64 twins: $(cat "$tmp/amp/results.csv")"
grep -q ',store_all,cpu,ok,.*,float32 under bfloat16 autocast,' "$tmp/amp/results.csv" ||
  fail "amp: store_all's row does not say what it compared in: $(cat "$tmp/amp/results.csv")"

# A model that cannot be built or checked: one line, exit 2, nothing written.
check_bad "has more than 2^40 elements" \
  --models="torchscript:file=$m/depth.pt:input=1048576x1048576:batch=8" --strategies=store_all
check_bad "no loss can be differentiated" \
  --models="torchscript:file=$m/integer.pt:input=6" --strategies=store_all
check_bad "does not fit stage 1.TrainingOnly in training" \
  --models="torchscript:file=$m/training_only.pt:input=6" --strategies=store_all

# The records say what ran: --predict's layout in run.csv, empty cells where a row failed, a small
# cap in its own bytes.
"${sweep[@]}" --predict --models=heavy_mlp:depth=2:hidden=1048576:batch=4,heavy_mlp:depth=2:hidden=4:batch=2 \
  --strategies=uniform --states=zero3 --world_size=8 --collective_bandwidth=1GB/s \
  --out="$tmp/predict" >/dev/null 2>&1 || fail "--predict: exit $?"
grep -qx 'states,zero3' "$tmp/predict/run.csv" && grep -qx 'states_world_size,8' "$tmp/predict/run.csv" &&
  grep -qx 'collective_bandwidth,1000000000B/s' "$tmp/predict/run.csv" &&
  grep -qx 'world_size,1' "$tmp/predict/run.csv" || fail "--predict's run.csv: $(cat "$tmp/predict/run.csv")"
awk -F, '$4 == "oom" && ($14 != "" || $15 != "" || $16 != "" || $17 != "") {exit 1}' \
  "$tmp/predict/predict.csv" || fail "predict.csv's oom rows hold numbers: $(cat "$tmp/predict/predict.csv")"
grep -q ',oom,' "$tmp/predict/predict.csv" || fail "predict.csv has no oom row: $(cat "$tmp/predict/predict.csv")"
grep -q "capped at 125000 bytes" "$tmp/capped/report.md" ||
  fail "the cap in report.md: $(grep -i cap "$tmp/capped/report.md")"

finish sweep_exact_test
