#!/usr/bin/env python3
"""ckptlab against PyTorch's own torch.utils.checkpoint, side by side on this machine.

The same model (heavy_mlp: `depth` blocks of Linear(hidden, hidden) + ReLU, batch rows of
`hidden` floats, loss = the output's sum per row averaged over the rows, the input requiring
grad) is trained one step at a time by ckptlab's sweep (store_all and uniform:segments=K) and by PyTorch on the same LibTorch
(Debian's python3-torch: a plain forward and backward, and checkpoint_sequential with K
segments), in rounds that alternate the two so that drift on a shared machine hits both.
PyTorch runs under every thread split (intra-op threads x OpenBLAS threads) and both with
glibc's default allocator behaviour and with glibc told to keep freed memory (what ckptlab's
caching allocator does for its tensors); its best configuration is the one to beat.

  python3 experiments/compare_pytorch.py                   # after: tools/bazel build //experiments:sweep
  python3 experiments/compare_pytorch.py --rounds=5 --out=compare.csv

Prints a table and, with --out, writes every measurement as CSV. Every program is started
without a shell (argument lists), and nothing from the command line is interpreted.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# glibc: keep freed memory instead of handing it back (and faulting it in again).
KEEP_FREED_MEMORY = {
    "MALLOC_MMAP_THRESHOLD_": "4294967296",
    "MALLOC_TRIM_THRESHOLD_": "68719476736",
    "MALLOC_TOP_PAD_": "1073741824",
}

# Runs in a fresh python3 with the thread counts and allocator settings of its environment:
# store_all and checkpoint_sequential steps alternating, the median of each and of their
# per-step ratio, as JSON on stdout.
WORKER = r"""
import json, statistics, sys, time
import torch
from torch.utils.checkpoint import checkpoint_sequential
depth, hidden, batch, segments, steps, warmup, intra = map(int, sys.argv[1:8])
torch.set_num_threads(intra)
torch.manual_seed(0)
blocks = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU())
                               for _ in range(depth)])
x = torch.randn(batch, hidden, requires_grad=True)
def step(checkpointed):
    for p in blocks.parameters():
        p.grad = None
    x.grad = None
    start = time.perf_counter()
    y = checkpoint_sequential(blocks, segments, x) if checkpointed else blocks(x)
    (y.sum() / batch).backward()
    return (time.perf_counter() - start) * 1000
plain, ckpt = [], []
for i in range(warmup + steps):
    a, b = step(False), step(True)
    if i >= warmup:
        plain.append(a)
        ckpt.append(b)
print(json.dumps({"store_all_ms": statistics.median(plain),
                  "checkpoint_ms": statistics.median(ckpt),
                  "overhead": statistics.median(b / a for a, b in zip(plain, ckpt))}))
"""


def run(argv, env):
    """Runs argv (a list: no shell) and returns its stdout; exits with its stderr on failure."""
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"compare_pytorch: {argv[0]} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def measure_ckptlab(args, workdir, round_index):
    out = os.path.join(workdir, f"ckptlab-{round_index}")
    model = f"heavy_mlp:depth={args.depth}:hidden={args.hidden}:batch={args.batch}"
    run([args.sweep, f"--models={model}", f"--strategies=uniform:segments={args.segments}",
         f"--steps={args.steps}", f"--warmup={args.warmup}", f"--out={out}", "--device=cpu"],
        dict(os.environ))
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = {r["strategy"]: r for r in csv.DictReader(f)}
    store_all = rows["store_all"]
    uniform = rows[f"uniform:segments={args.segments}"]
    return {"store_all_ms": float(store_all["step_ms_median"]),
            "checkpoint_ms": float(uniform["step_ms_median"]),
            "overhead": float(uniform["overhead_vs_store_all"]),
            "threads": f"{store_all['threads']}+{store_all['blas_threads']}"}


def measure_pytorch(args, intra, blas, keep_freed):
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = str(blas)
    env["OMP_NUM_THREADS"] = str(intra)
    if keep_freed:
        env.update(KEEP_FREED_MEMORY)
    out = run([args.python, "-c", WORKER, str(args.depth), str(args.hidden), str(args.batch),
               str(args.segments), str(args.steps), str(args.warmup), str(intra)], env)
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                        "..", "bazel-bin", "experiments", "sweep"),
                        help="the sweep binary (default: bazel-bin/experiments/sweep)")
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--steps", type=int, default=15, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="write every measurement to this CSV file")
    parser.add_argument("--python", help="a Python with torch (default: this one if it has "
                        "torch, else Debian's /usr/bin/python3 with python3-torch)")
    args = parser.parse_args()
    for name in ("depth", "hidden", "batch", "segments", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} is not accepted; accepted: >= 1")
    if not os.access(args.sweep, os.X_OK):
        parser.error(f"--sweep={args.sweep} is not an executable; build it with "
                     "tools/bazel build //experiments:sweep, or name it")
    if not args.python:
        for candidate in (sys.executable, "/usr/bin/python3"):
            if subprocess.run([candidate, "-c", "import torch"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                args.python = candidate
                break
        else:
            parser.error("no Python with torch found; install python3-torch or pass --python")
    cores = len(os.sched_getaffinity(0))
    splits = sorted({(1, 1), (1, cores), (cores, 1), (cores, cores)})
    configs = [("ckptlab", None, None, None)] + [
        ("pytorch", intra, blas, keep) for intra, blas in splits for keep in (False, True)]
    results = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            for c in configs:
                start = time.time()
                m = (measure_ckptlab(args, workdir, r) if c[0] == "ckptlab"
                     else measure_pytorch(args, c[1], c[2], c[3]))
                results[c].append(m)
                label = "ckptlab" if c[0] == "ckptlab" else \
                    f"pytorch intra={c[1]} blas={c[2]} keep_freed={c[3]}"
                print(f"round {r + 1}/{args.rounds}: {label}: store_all {m['store_all_ms']:.1f} ms, "
                      f"checkpointed {m['overhead']:.3f}x ({time.time() - start:.0f} s)",
                      file=sys.stderr, flush=True)
    summary = []
    for c, ms in results.items():
        summary.append({"system": c[0], "intra_op": c[1] or "", "blas": c[2] or "",
                        "keep_freed": "" if c[3] is None else c[3],
                        "store_all_ms": statistics.median(m["store_all_ms"] for m in ms),
                        "overhead": statistics.median(m["overhead"] for m in ms)})
    best = min((s for s in summary if s["system"] == "pytorch"), key=lambda s: s["store_all_ms"])
    ours = summary[0]
    print(f"heavy_mlp {args.depth}x{args.hidden}, batch {args.batch}; checkpointed: "
          f"{args.segments} segments; medians over {args.rounds} rounds of {args.steps} steps")
    print(f"{'system':8} {'intra':>5} {'blas':>4} {'keep freed':>10} {'store_all ms':>13} "
          f"{'checkpointed / store_all':>25}")
    for s in summary:
        print(f"{s['system']:8} {str(s['intra_op']):>5} {str(s['blas']):>4} "
              f"{str(s['keep_freed']):>10} {s['store_all_ms']:13.1f} {s['overhead']:25.3f}")
    print(f"ckptlab store_all / best PyTorch store_all: {ours['store_all_ms'] / best['store_all_ms']:.3f}"
          f"; uniform's overhead {ours['overhead']:.3f}x against checkpoint_sequential's "
          f"{best['overhead']:.3f}x in that configuration")
    if args.out:
        with open(args.out, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["system", "intra_op", "blas", "keep_freed", "round", "store_all_ms",
                             "checkpointed_ms", "overhead"])
            for c, ms in results.items():
                for r, m in enumerate(ms):
                    writer.writerow([c[0], c[1] or "", c[2] or "", "" if c[3] is None else c[3],
                                     r + 1, m["store_all_ms"], m["checkpoint_ms"], m["overhead"]])


if __name__ == "__main__":
    main()
