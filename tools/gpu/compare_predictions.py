#!/usr/bin/env python3
"""Predicted against measured: a sweep's rows from the card beside the predictions for them.

  /usr/bin/python3 tools/gpu/compare_predictions.py MEASURED_RESULTS_CSV [PREDICT_CSV]

MEASURED_RESULTS_CSV is a sweep's results.csv measured on the card (one model). Every row is
compared with the prediction the card's own profile made for it (its predicted_* columns), and,
with PREDICT_CSV (`sweep --predict`'s predict.csv, made elsewhere, e.g. on a CPU), with the row
there that runs the same plan (matched by plan text, the same strategy's row first: `plan:file=`
rows on the card meet the `optimal:budget=...` rows whose plans they are, and a planner that
chose another plan on the card is compared with nothing). Peaks are above the step's baseline
(parameters, batch, kept gradients), as --predict states them; step ratios are against
store_all's (the measured one: the median of per-round ratios). The reserved peak (what the
caching allocator held, rounding and cached blocks included) is absolute, against the card's
absolute prediction. Prints a markdown table.
Reads with the csv module only; writes nothing but stdout.
"""

import csv
import os
import stat
import sys

GIB = float(1 << 30)


def fail(message):
    """Bad input: one line on stderr, exit status 2."""
    print(f"compare_predictions: {message}", file=sys.stderr)
    sys.exit(2)


def read_rows(path):
    """A CSV file's rows; a regular file only, read whole (no FIFO or device is opened)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            fail(f"{path!r} is not a regular file; accepted: a results.csv or predict.csv")
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"cannot read {path!r}: {e.strerror}")
    except (UnicodeDecodeError, csv.Error) as e:
        fail(f"{path!r} is not a CSV file: {e}")
    if rows and not {"strategy", "status", "plan"} <= rows[0].keys():
        fail(f"{path!r} has no strategy, status and plan columns; accepted: a sweep's CSV")
    return rows


def number(row, column):
    """The column as a float, or None where it is empty or absent."""
    text = (row.get(column) or "").strip()
    try:
        return float(text) if text else None
    except ValueError:
        return None


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def cell(value, form):
    return "" if value is None else form.format(value)


def gib(value):
    return None if value is None else value / GIB


def main(argv):
    if len(argv) not in (2, 3):
        fail("usage: " + __doc__.strip().splitlines()[2].strip())
    measured = read_rows(argv[1])
    if not measured:
        fail(f"{argv[1]!r} holds no rows")
    predicted = read_rows(argv[2]) if len(argv) == 3 else []
    ok = [r for r in predicted if r.get("status") == "ok"]
    by_strategy = {r["strategy"]: r for r in ok}
    by_plan = {r["plan"]: r for r in ok}
    base = next((r for r in measured if r["strategy"] == "store_all" and r["status"] == "ok"),
                None)
    cpu_base = by_strategy.get("store_all")
    head = ("| strategy | status | predicted peak GiB (elsewhere) | predicted peak GiB (card) "
            "| measured peak GiB | measured / predicted (elsewhere) | measured / predicted (card) "
            "| reserved peak / predicted (card) "
            "| step ratio predicted (elsewhere) | step ratio predicted (card) "
            "| step ratio measured |")
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for row in measured:
        other = by_strategy.get(row["strategy"])
        if other is None or other["plan"] != row.get("plan"):
            other = by_plan.get(row.get("plan", ""))
        measured_peak = number(row, "peak_above_baseline_bytes")
        predicted_peak = number(row, "predicted_peak_bytes")
        baseline = number(row, "baseline_bytes")
        card_peak = None if None in (predicted_peak, baseline) else predicted_peak - baseline
        other_peak = number(other, "predicted_step_peak_bytes") if other else None
        other_step = (ratio(number(other, "predicted_step_ms"), number(cpu_base,
                                                                       "predicted_step_ms"))
                      if other and cpu_base else None)
        card_step = (ratio(number(row, "predicted_step_ms"), number(base, "predicted_step_ms"))
                     if base else None)
        print("| " + " | ".join([
            row["strategy"] + ("" if other is None or other["strategy"] == row["strategy"]
                               else f" (= {other['strategy']})"),
            row["status"],
            cell(gib(other_peak), "{:.3f}"),
            cell(gib(card_peak), "{:.3f}"),
            cell(gib(measured_peak), "{:.3f}"),
            cell(ratio(measured_peak, other_peak), "{:.4f}"),
            cell(ratio(measured_peak, card_peak), "{:.4f}"),
            cell(None if None in (measured_peak, card_peak) else measured_peak - card_peak,
                 "{:.0f}"),
            cell(ratio(number(row, "peak_reserved_bytes"), number(row, "predicted_peak_bytes")),
                 "{:.4f}"),
            cell(other_step, "{:.2f}"),
            cell(card_step, "{:.2f}"),
            cell(number(row, "overhead_vs_store_all"), "{:.2f}"),
        ]) + " |")


if __name__ == "__main__":
    main(sys.argv)
