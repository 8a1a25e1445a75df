#!/usr/bin/env python3
"""The figures in docs/ that a command makes, made and checked again by this one.

    tools/doc_figures.py [--sweep PATH] [--root DIR] write [NAME ...]   run each figure's sweep,
                                                                         rewrite it
    tools/doc_figures.py [--sweep PATH] [--root DIR] check [NAME ...]   run them again; exit 1
                                                                         where one moved

A figure is a table in a page between the lines
`<!-- figure NAME, LibTorch X.Y.Z: tools/doc_figures.py -->` and `<!-- end of figure NAME -->`,
made from the rows of one `--predict` (FIGURES below), its step times priced on a card's model
(`--device_model`) so that nothing in it is measured: the same code on the same LibTorch makes
the same table, byte for byte. `check` holds every cell to that (testing/doc_figures_test.py runs
it on every figure); on another LibTorch than the figure's (its operators count other work, its
attention may fuse) it says so and checks nothing. No NAME: every figure. The sweep is --sweep,
else $SWEEP, else this checkout's bazel-bin/experiments/sweep; it starts without a shell and
writes into a temporary folder removed after. `write` replaces a page whole (a temporary beside
it, renamed over it).
"""

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20
LEAST = re.compile(r"least peak the planner reaches on [^,]*, ([0-9]+) bytes")
UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def mib(n):
    return f"{n / MIB:.2f} MiB"


def least_peak(row):
    """The least peak an error row names (a budget below every plan's), in bytes."""
    return int(LEAST.search(row["message"]).group(1))


def offload(row):
    return "no" if ":offload=no" in row["strategy"] else "yes"


def least_peaks(rows):
    """offload.md: the least peak optimal reaches with and without offload, per model."""
    table = [["model", "least peak, offload", "keep or recompute", "lower by"]]
    for model in dict.fromkeys(r["model"] for r in rows):
        least = {offload(r): least_peak(r) for r in rows
                 if r["model"] == model and r["strategy"].startswith("optimal")}
        table.append([f"`{model}`", mib(least["yes"]), mib(least["no"]),
                      f"{100 * (1 - least['yes'] / least['no']):.1f}%"])
    return table


def budgets(rows):
    """offload.md: one model at budgets around its least peak, optimal with and without
    offload: each plan's step over store_all's, and its peak above the baseline."""
    store_all = next(r for r in rows if r["strategy"] == "store_all")
    by_budget = {}
    for r in rows:  # optimal:budget=14MiB, optimal:budget=14MiB:offload=no, ...
        budget = re.match(r"optimal:budget=([0-9.]+)([A-Za-z]*)", r["strategy"])
        if budget:
            number, unit = budget.groups()
            by_budget.setdefault(float(number) * UNITS[unit], {})[offload(r)] = r
    table = [["budget", "with offload: step", "peak", "without: step", "peak"]]
    for budget, pair in by_budget.items():
        line = [mib(budget)]
        for side in ("yes", "no"):
            r = pair[side]
            if r["status"] != "ok":
                line += [f"no plan (least {mib(least_peak(r))})", ""]
                continue
            step = float(r["predicted_step_ms"]) / float(store_all["predicted_step_ms"])
            line += [f"{step:.3f}", mib(int(r["predicted_step_peak_bytes"]))]
        table.append(line)
    return table


# name: (its page, the --predict's arguments, the table from predict.csv's rows).
FIGURES = {
    "offload-least-peak": (
        "docs/offload.md",
        ["--models=heavy_mlp:depth=16:hidden=256:batch=2048,"
         "transformer:depth=4:hidden=256:heads=4:seq=128:batch=4,"
         "transformer:depth=8:hidden=256:heads=4:seq=256:batch=8",
         "--strategies=optimal:budget=1:offload=yes,optimal:budget=1:offload=no"],
        least_peaks),
    "offload-budgets": (
        "docs/offload.md",
        ["--models=transformer:depth=8:hidden=256:heads=4:seq=256:batch=8",
         "--strategies=store_all," + ",".join(
             f"optimal:budget={b}:offload={o}" for b in ("50MiB", "53MiB", "56MiB", "64MiB",
                                                         "80MiB") for o in ("yes", "no"))],
        budgets),
}
COMMON = ["--predict", "--device_model=h100", "--link_bandwidth=25GB/s"]


def run_predict(sweep, arguments, folder):
    """predict.csv's rows, and the LibTorch the sweep runs on (its kept profile's key says)."""
    out = os.path.join(folder, "predict")
    done = subprocess.run([sweep, *COMMON, *arguments, f"--out={out}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          errors="replace")
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or [""]
        sys.exit(f"doc_figures: the sweep exited {done.returncode}: {last[0]}")
    with open(os.path.join(out, "predict.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "profiles.txt")) as f:
        version = re.search(r"LibTorch ([0-9][0-9.]*)", urllib.parse.unquote(f.read()))
    return rows, version.group(1) if version else "unknown"


def markdown(table):
    lines = ["| " + " | ".join(table[0]) + " |",
             "| " + " | ".join("---" if k == 0 else "---:" for k in range(len(table[0]))) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in table[1:]]


def find(lines, name, page):
    """Figure `name` in a page's lines: (its first line, one past its last, its LibTorch)."""
    start = re.compile(rf"<!-- figure {re.escape(name)}, LibTorch ([0-9.]+|unknown): "
                       r"tools/doc_figures.py -->")
    end = f"<!-- end of figure {name} -->"
    first = next((k for k, line in enumerate(lines) if start.fullmatch(line)), None)
    if first is None or end not in lines[first:]:
        sys.exit(f"doc_figures: {page} holds no figure {name} (between '<!-- figure {name}, "
                 f"LibTorch X.Y.Z: tools/doc_figures.py -->' and '{end}')")
    return first, lines.index(end, first) + 1, start.fullmatch(lines[first]).group(1)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tools/doc_figures.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", default=os.environ.get("SWEEP") or os.path.join(
        ROOT, "bazel-bin", "experiments", "sweep"))
    parser.add_argument("--root", default=ROOT,
                        help="the checkout whose pages hold the figures (default: this one)")
    parser.add_argument("action", choices=["write", "check"])
    parser.add_argument("names", nargs="*", metavar="NAME")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in FIGURES]
    if unknown:
        print(f"doc_figures: no figure {unknown[0]}; accepted: {', '.join(FIGURES)}",
              file=sys.stderr)
        return 2
    if not (os.path.isfile(args.sweep) and os.access(args.sweep, os.X_OK)):
        print(f"doc_figures: no sweep at {args.sweep}; accepted: an executable sweep "
              "(tools/bazel build //experiments:sweep), named by --sweep or $SWEEP",
              file=sys.stderr)
        return 2
    moved = []
    for name in args.names or list(FIGURES):
        page, arguments, render = FIGURES[name]
        path = os.path.join(args.root, page)
        with open(path) as f:
            lines = f.read().split("\n")
        first, last, made_on = find(lines, name, page)
        with tempfile.TemporaryDirectory(prefix="doc-figures-") as folder:
            rows, version = run_predict(args.sweep, arguments, folder)
        table = markdown(render(rows))
        if args.action == "check":
            if made_on != version:
                print(f"{name}: made on LibTorch {made_on}, this sweep runs {version}: not "
                      "checked", file=sys.stderr)
            elif lines[first + 1:last - 1] != table:
                moved.append(f"{name} in {page} no longer holds; today's:\n" + "\n".join(table))
            else:
                print(f"{name}: holds", file=sys.stderr)
            continue
        lines[first:last] = ([f"<!-- figure {name}, LibTorch {version}: tools/doc_figures.py -->"]
                             + table + [f"<!-- end of figure {name} -->"])
        fd, temporary = tempfile.mkstemp(prefix=".doc-figures-", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w") as f:
                f.write("\n".join(lines))
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        print(f"{name}: written in {page}", file=sys.stderr)
    for line in moved:
        print(f"FAIL: {line}", file=sys.stderr)
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
