#!/usr/bin/env python3
"""Models no one here wrote, cut by ckptlab.chain and swept: docs/results/anymodel-cpu.

For each torchvision model (weights=None, random images and labels, cross-entropy): the chain
(its stages, the seconds to cut it, the largest stage's share of the activations), then the
sweep on the saved chain: store_all, and `optimal` and `uniform` at budgets a fraction of the way
from the least step peak any plan reaches to store_all's (both predicted, above the parameters
and batch), measured. One CSV row per configuration; a table on stdout. Then the one call a user
makes, `ckptlab.optimize` at the middle budget (or the least peak, where that is above it): its
seconds (cut, profile, plan), its plan's predicted bytes, and the plan stepped in PyTorch beside
the plain model: the bytes PyTorch keeps for backward (ckptlab.kept_bytes, less the parameters,
buffers and batch) and whether the gradients equal the plain model's bitwise (optimize.csv).

  PYTHONPATH=python /usr/bin/python3 experiments/anymodel.py --out=anymodel \\
      --size=112 --batch=8 --fractions=0.1,0.4,0.7

--out is a folder this run makes (refused where it exists); it holds each model's chain file,
the sweep's folder per model, anymodel.csv and optimize.csv (each written whole: a temporary,
then renamed). The sweep is --sweep, $CKPTLAB_SWEEP, or this checkout's
bazel-bin/experiments/sweep.
"""

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import ckptlab  # noqa: E402
from ckptlab.optimized import sweep_path  # noqa: E402
from ckptlab.plan import printable  # noqa: E402

MODELS = ["resnet50", "vit_b_16", "convnext_tiny", "densenet121", "efficientnet_b0"]
FIELDS = ["model", "stages", "chain_s", "largest_stage_share", "strategy", "budget_fraction",
          "budget_bytes",
          "activation_bytes", "peak_above_baseline_bytes", "peak_vs_store_all",
          "predicted_peak_above_baseline_bytes", "step_ms", "step_vs_store_all"]
# (peak_vs_store_all and step_vs_store_all are the sweep's: its peaks' ratio, and the median of
# its rounds' step-time ratios, results.csv's overhead_vs_store_all.)
OPTIMIZE_FIELDS = ["model", "budget_bytes", "optimize_s", "segments", "predicted_activation_bytes",
                   "kept_bytes", "predicted_step_peak_bytes", "predicted_step_ratio",
                   "gradients_equal", "plan"]


def fail(message):
    print(f"anymodel: {message}", file=sys.stderr)
    sys.exit(2)


def fractions(text):
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(0 < v < 1 for v in values):
        fail(f"--fractions={printable(text)}; accepted: numbers in (0, 1) joined "
             "by ','")
    return values


def sweep(executable, args, what):
    done = subprocess.run([executable] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, errors="replace")
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        fail(f"the sweep of {what} exited {done.returncode}: {printable(last)}")


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_whole(folder, name, write):
    """`folder`/`name` as write(file) writes it, whole or not at all (a temporary, then
    renamed)."""
    fd, temporary = tempfile.mkstemp(prefix=f".{name}-", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            write(f)
        os.replace(temporary, os.path.join(folder, name))
    except BaseException:
        os.unlink(temporary)
        raise


def write_csv(folder, name, fields, rows):
    """`rows` as `folder`/`name`, whole or not at all."""
    def write(f):
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    write_whole(folder, name, write)


def optimized(name, model, images, labels, budget, executable):
    """ckptlab.optimize at `budget` bytes, timed, and its plan stepped in PyTorch beside the
    plain model from the same state and random stream."""
    start = time.time()
    planned = ckptlab.optimize(model, images, budget, loss=F.cross_entropy, targets=labels,
                               sweep=executable, progress=False)
    seconds = time.time() - start
    params = list(model.parameters())
    state = [b.clone() for b in model.buffers()]

    def step(run):
        for p in params:
            p.grad = None
        with torch.no_grad():
            for b, value in zip(model.buffers(), state):
                b.copy_(value)
        torch.manual_seed(1)
        loss, kept = ckptlab.kept_bytes(lambda: run(images, labels),
                                        exclude=params + list(model.buffers()) + [images, labels])
        loss.backward()
        return kept, [p.grad for p in params]

    _, plain = step(lambda x, y: F.cross_entropy(model(x), y))
    kept, grads = step(planned)
    equal = all((a is None and b is None) or (a is not None and b is not None
                                              and torch.equal(a, b))
                for a, b in zip(plain, grads))
    predicted = planned.predicted
    return {"model": name, "budget_bytes": budget, "optimize_s": f"{seconds:.1f}",
            "segments": len(ckptlab.parse_plan(predicted.plan).segments),
            "predicted_activation_bytes": predicted.activation_bytes, "kept_bytes": kept,
            "predicted_step_peak_bytes": predicted.step_peak_bytes,
            "predicted_step_ratio": f"{predicted.step_ratio:.3f}", "gradients_equal": equal,
            "plan": predicted.plan}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a folder this run makes")
    parser.add_argument("--models", default=",".join(MODELS), help="torchvision model names")
    parser.add_argument("--size", type=int, default=112, help="image height and width")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--fractions", default="0.1,0.4,0.7",
                        help="budgets, as fractions of the way from the least peak to "
                        "store_all's")
    parser.add_argument("--sweep", default=None)
    args = parser.parse_args()
    budgets = fractions(args.fractions)
    if not 32 <= args.size <= 1024 or not 1 <= args.batch <= 1024:
        fail(f"--size={args.size} --batch={args.batch}; accepted: a size in [32, 1024] and a "
             "batch in [1, 1024]")
    import torchvision
    names = args.models.split(",")
    for name in names:
        if not callable(getattr(torchvision.models, name, None)):
            fail(f"--models: '{printable(name)}' is no torchvision model")
    executable = sweep_path(args.sweep)
    try:
        os.mkdir(args.out)
    except OSError as e:
        fail(f"--out={printable(args.out)}: {e.strerror}; accepted: a folder this "
             "run makes")

    table, optimize_table = [], []
    for name in names:
        torch.manual_seed(0)
        # (A vision transformer's position embedding is sized for its images.)
        shaped = {"image_size": args.size} if name.startswith("vit_") else {}
        model = getattr(torchvision.models, name)(weights=None, **shaped)
        images = torch.randn(args.batch, 3, args.size, args.size)
        labels = torch.randint(1000, (args.batch,))
        start = time.time()
        chain = ckptlab.chain(model, images, loss=F.cross_entropy, targets=labels)
        seconds = time.time() - start
        kept = chain.kept_per_stage(images, labels)
        share = max(kept) / sum(kept)
        path = os.path.join(args.out, f"{name}.pt")
        chain.save(path)
        spec = f"--models=chain:file={os.path.abspath(path)}"
        folder = os.path.join(args.out, name)
        # optimal at a budget of 1 byte fails, naming the least peak any plan reaches.
        sweep(executable, ["--predict", spec, "--strategies=store_all,optimal:budget=1",
                           f"--out={folder}-predict"], f"{name} (predicted)")
        predicted = rows_of(os.path.join(f"{folder}-predict", "predict.csv"))
        peak = int(predicted[0]["predicted_step_peak_bytes"])
        least = re.search(r"least peak the planner reaches on .*; accepted: a budget of at least "
                          r"([0-9]+) bytes", predicted[1]["message"])
        if least is None:
            fail(f"{name}: no least peak in the sweep's message: "
                 f"{printable(predicted[1]['message'])}")
        low = int(least.group(1))  # the least budget: the least peak and the planners' slack
        sizes = [str(int(low + f * (peak - low))) for f in budgets]
        sweep(executable, [spec, "--strategies=store_all,optimal,uniform",
                           f"--budgets={','.join(sizes)}", f"--out={folder}"], name)
        rows = rows_of(os.path.join(folder, "results.csv"))
        print(f"{name}: {len(chain)} stages, cut in {seconds:.1f} s", file=sys.stderr)
        # The middle budget, or the least peak where there is no room below store_all's (the
        # least is store_all's peak plus the planners' slack, above every fraction's budget).
        optimize_table.append(optimized(name, model, images, labels,
                                        max(low, int(sizes[len(sizes) // 2])), executable))
        for r in rows:
            if r["status"] != "ok":
                continue
            budget = next((f for f, s in zip(budgets, sizes) if f"budget={s}" in r["strategy"]),
                          "")
            table.append({
                "model": name, "stages": len(chain), "chain_s": f"{seconds:.2f}",
                "largest_stage_share": f"{share:.3f}", "strategy": r["strategy"],
                "budget_fraction": budget,
                "budget_bytes": next((s for s in sizes if f"budget={s}" in r["strategy"]), ""),
                "activation_bytes": r["activation_bytes"],
                "peak_above_baseline_bytes": r["peak_above_baseline_bytes"],
                "peak_vs_store_all": r["peak_vs_store_all"],
                "predicted_peak_above_baseline_bytes":
                    int(r["predicted_peak_bytes"]) - int(r["baseline_bytes"]),
                "step_ms": r["step_ms_median"],
                "step_vs_store_all": r["overhead_vs_store_all"]})
    write_csv(args.out, "anymodel.csv", FIELDS, table)
    write_csv(args.out, "optimize.csv", OPTIMIZE_FIELDS, optimize_table)
    print("| model | stages | cut s | largest stage | strategy | budget | peak vs store_all | "
          "step vs store_all |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for t in table:
        print(f"| {t['model']} | {t['stages']} | {t['chain_s']} | {t['largest_stage_share']} | "
              f"{t['strategy'].split(':')[0]} | {t['budget_fraction']} | "
              f"{t['peak_vs_store_all']} | {t['step_vs_store_all']} |")
    print("\n| model | budget | optimize s | segments | predicted activations | kept by PyTorch | "
          "predicted step ratio | gradients equal |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for t in optimize_table:
        print(f"| {t['model']} | {t['budget_bytes']} | {t['optimize_s']} | {t['segments']} | "
              f"{t['predicted_activation_bytes']} | {t['kept_bytes']} | "
              f"{t['predicted_step_ratio']} | {t['gradients_equal']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
