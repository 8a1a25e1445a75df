#!/usr/bin/env python3
"""PyTorch's own answer beside ckptlab's: torch.compile under activation_memory_budget.

A model in eager PyTorch, trained one step at a time on the CPU: the decoder of
examples/export_decoder.py (--model=decoder), or a torchvision model (weights=None, random
images of --size and labels, cross-entropy: experiments/anymodel.py's). Uncompiled (PyTorch's
store_all), then compiled with
torch._functorch.config.activation_memory_budget at each budget (AOTAutograd's partitioner
chooses what to recompute so that the saved activations fit that fraction of its default's).
For each: the median step time over rounds, the bytes kept for backward when forward and loss
return (ckptlab.kept_bytes: autograd's saved tensors, which a compiled graph saves through its
autograd function too, each storage once, less parameters and batch), and the step's peak above
what was allocated before it (ckptlab.step_peak: every allocation and free PyTorch's profiler
records).
ckptlab's side is its sweep of the same model exported (docs/results/compile-cpu and
docs/results/anymodel-cpu have both and the commands).

  python3 experiments/compare_compile.py --budgets=0.5,0.2,0.05 --out=compile.csv
  python3 experiments/compare_compile.py --model=resnet50 --size=112 --batch=8 --out=r50.csv

Needs torch 2.4 or later (activation_memory_budget) and a C++ compiler for inductor. Prints a
table; --out writes every configuration as CSV (written whole: a temporary, then renamed).
"""

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import ckptlab  # noqa: E402
from ckptlab.peaks import step_peak  # noqa: E402
from ckptlab.plan import printable  # noqa: E402
from export_cnn import positive  # noqa: E402
from export_decoder import make_decoder  # noqa: E402


def budget_list(text):
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: fractions in (0, 1] joined by ','")
    if not values or any(not 0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: fractions in (0, 1] joined by ','")
    return values


def workload(args):
    """(model, input, targets, loss of the output) for --model, seeded."""
    torch.manual_seed(0)
    if args.model == "decoder":
        model = make_decoder(args.vocab, args.seq, args.width, args.heads, args.layers,
                             args.dropout)
        ids = torch.randint(args.vocab, (args.batch, args.seq + 1))
        x, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        return model, x, targets, lambda out: nn.functional.cross_entropy(
            out.reshape(-1, args.vocab), targets.reshape(-1))
    import torchvision
    if not callable(getattr(torchvision.models, args.model, None)):
        print(f"compare_compile: --model={printable(args.model)}; accepted: decoder or a "
              "torchvision model", file=sys.stderr)
        sys.exit(2)
    # (A vision transformer's position embedding is sized for its images.)
    shaped = {"image_size": args.size} if args.model.startswith("vit_") else {}
    model = getattr(torchvision.models, args.model)(weights=None, **shaped)
    images = torch.randn(args.batch, 3, args.size, args.size)
    labels = torch.randint(1000, (args.batch,))
    return model, images, labels, lambda out: nn.functional.cross_entropy(out, labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="decoder",
                        help="decoder (the options below) or a torchvision model's name")
    parser.add_argument("--size", type=positive, default=112, help="a torchvision model's images")
    parser.add_argument("--layers", type=positive, default=4)
    parser.add_argument("--width", type=positive, default=256)
    parser.add_argument("--heads", type=positive, default=4)
    parser.add_argument("--vocab", type=positive, default=2048)
    parser.add_argument("--seq", type=positive, default=256)
    parser.add_argument("--batch", type=positive, default=8)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--budgets", type=budget_list, default=[0.5, 0.2, 0.05])
    parser.add_argument("--rounds", type=positive, default=7)
    parser.add_argument("--out", default="", help="CSV of every configuration")
    args = parser.parse_args()
    try:
        import torch._functorch.config as functorch_config
    except ImportError:
        functorch_config = None
    if not hasattr(functorch_config, "activation_memory_budget"):
        print(f"compare_compile: torch {torch.__version__} has no activation_memory_budget "
              "(torch 2.4 or later)", file=sys.stderr)
        return 2
    model, x, targets, loss_of = workload(args)
    model.train()
    params = list(model.parameters())

    def clear():
        for p in params:
            p.grad = None

    def step_of(run):
        def step():
            out = run(x)
            loss = loss_of(out)
            del out
            loss.backward()
        return step

    def measure(run):
        """(kept bytes, peak bytes, median step ms) of training through `run`."""
        step = step_of(run)
        for _ in range(2):  # compilation, and allocations a first run makes for good
            clear()
            step()
        clear()
        peak = step_peak(step)
        clear()
        torch.manual_seed(1)
        loss, kept = ckptlab.kept_bytes(lambda: loss_of(run(x)),
                                        exclude=params + list(model.buffers()) + [x, targets])
        loss.backward()
        times = []
        for _ in range(args.rounds):
            clear()
            begin = time.perf_counter()
            step()
            times.append((time.perf_counter() - begin) * 1000)
        return kept, peak, round(statistics.median(times), 2)

    rows = []
    for budget in [None] + args.budgets:
        row = {"configuration": "eager" if budget is None else "compiled",
               "budget": "" if budget is None else budget, "status": "ok"}
        if budget is None:
            row["kept_bytes"], row["peak_bytes"], row["step_ms"] = measure(model)
        else:
            torch._dynamo.reset()
            functorch_config.activation_memory_budget = budget
            # A configuration compile fails on is its row, not the end of the run.
            try:
                row["kept_bytes"], row["peak_bytes"], row["step_ms"] = measure(torch.compile(model))
            except Exception as e:  # noqa: BLE001 (whatever inductor raises)
                line = (str(e).strip().splitlines() or [""])[-1]
                row["status"] = f"failed: {type(e).__name__}: {printable(line)}"
        rows.append(row)
        if row["status"] != "ok":
            print(f"{row['configuration']:9} {row['budget']!s:6} {row['status']}", flush=True)
            continue
        print(f"{row['configuration']:9} {row['budget']!s:6} kept {row['kept_bytes']:>12,} "
              f"peak {row['peak_bytes']:>12,} step {row['step_ms']:8.1f} ms", flush=True)
    base = rows[0]
    for r in rows:
        ok = r["status"] == "ok"
        for key in ["kept_bytes", "peak_bytes", "step_ms"]:
            r.setdefault(key, "")
        r["kept_vs_eager"] = round(r["kept_bytes"] / base["kept_bytes"], 3) if ok else ""
        r["peak_vs_eager"] = round(r["peak_bytes"] / base["peak_bytes"], 3) if ok else ""
        r["time_vs_eager"] = round(r["step_ms"] / base["step_ms"], 3) if ok else ""
        r["model"] = args.model
        r["torch"] = torch.__version__
    if args.out:
        folder = os.path.dirname(os.path.abspath(args.out))
        temporary = None
        try:
            fd, temporary = tempfile.mkstemp(prefix=".compare.", suffix=".csv", dir=folder)
            with os.fdopen(fd, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                writer.writeheader()
                writer.writerows(rows)
            os.replace(temporary, args.out)
        except OSError as e:
            if temporary is not None:
                os.unlink(temporary)
            print(f"compare_compile: cannot write {args.out!r}: {e.strerror}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
