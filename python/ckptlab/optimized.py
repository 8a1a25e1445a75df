"""One call for the user who wants the answer, not the testbed: a model in, a budget answered.

    planned = ckptlab.optimize(model, inputs, budget="8GiB", loss=..., targets=...)
    planned.predicted        # the plan text, its predicted bytes and step ratio (a Prediction)
    loss = planned(*inputs, *targets); loss.backward()

The model is cut (ckptlab.chain), saved with its batch to a temporary folder, profiled and
planned by ckptlab's sweep (`--predict`, `optimal` at the budget, store_all beside it for the
ratio), and the plan is applied to the chain (ckptlab.apply): the returned module trains the
model's own parameters. The sweep is $CKPTLAB_SWEEP, else this checkout's
bazel-bin/experiments/sweep (`tools/bazel build //experiments:sweep`); it starts without a
shell, and its progress lines are shown while it profiles.
"""

import csv
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from typing import Callable, Optional

import torch
from torch import nn

from ckptlab.chains import chain
from ckptlab.plan import printable
from ckptlab.planned import PlannedSequential, apply

__all__ = ["OptimizeError", "Prediction", "optimize", "sweep_path"]

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What a budget may hold before the sweep parses it (the sizes of docs/sweep.md): nothing that
# would end the spec it is written into (':', ',') or a line.
_BUDGET = re.compile(r"[0-9A-Za-z.+_-]{1,64}")


class OptimizeError(ValueError):
    """The sweep could not answer: its message, which names the value (a budget below the least
    peak any plan reaches names that peak)."""


@dataclasses.dataclass
class Prediction:
    """What the sweep predicted for the plan, from the model's profile on this machine, in the
    model's own dtypes."""
    plan: str                 # the plan's text (docs/plans.md)
    activation_bytes: int     # kept for backward when the forward ends
    step_peak_bytes: int      # the step's peak above the parameters, buffers and batch
    # The training step's whole peak: the parameters, buffers, AdamW's two moments and the
    # batch, and the larger of the step's peak above them and the gradients.
    total_peak_bytes: int
    step_ratio: float         # the step's time over store_all's
    parameter_bytes: int      # the model's parameters
    buffer_bytes: int         # its buffers (BatchNorm's statistics, a registered mask)
    gradient_bytes: int       # the gradients of the parameters that get one
    optimizer_bytes: int      # AdamW's two moments of those parameters
    batch_bytes: int          # the batch's inputs and targets


def sweep_path(sweep: Optional[str]) -> str:
    """`sweep`, else $CKPTLAB_SWEEP, else this checkout's built sweep: OptimizeError naming it
    where it is no executable file."""
    path = sweep or os.environ.get("CKPTLAB_SWEEP") or os.path.join(
        _REPOSITORY, "bazel-bin", "experiments", "sweep")
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise OptimizeError(f"ckptlab.optimize: no sweep at {printable(path)}; accepted: an "
                            "executable sweep (tools/bazel build //experiments:sweep), named by "
                            "sweep= or $CKPTLAB_SWEEP")
    return path


def _run_sweep(argv, progress: bool):
    """Runs the sweep, its progress lines shown on stderr if `progress`: OptimizeError with its
    last line of stderr where it fails."""
    last = ""
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          errors="replace") as process:
        for line in process.stderr:
            if progress:
                sys.stderr.write(line)
                sys.stderr.flush()
            if line.strip():
                last = line.strip()
    if process.returncode != 0:
        raise OptimizeError(f"ckptlab.optimize: the sweep exited {process.returncode}: "
                            f"{printable(last)}")


def optimize(model: nn.Module, inputs, budget, loss: Optional[Callable[..., torch.Tensor]] = None,
             targets=(), max_stages: Optional[int] = None, sweep: Optional[str] = None,
             progress: bool = True) -> PlannedSequential:
    """The fastest plan ckptlab finds for `model` whose step peaks at most `budget` above the
    parameters and the batch (optimal's budget: a number of bytes, or "8GiB", "512MiB"),
    applied. `inputs`, `loss`, `targets` and `max_stages` are ckptlab.chain's. The returned
    module holds `predicted` (a Prediction) and `stages` (the Chain); called with the batch it
    returns the loss. OptimizeError naming the value where the budget is not a size or nothing
    fits it (with the least peak any plan reaches), or where the sweep is missing or fails;
    ChainError where the model cannot be cut."""
    text = str(budget) if isinstance(budget, int) and not isinstance(budget, bool) else budget
    if not isinstance(text, str) or not _BUDGET.fullmatch(text):
        raise OptimizeError(f"ckptlab.optimize: budget={printable(repr(budget))}; accepted: a "
                            "number of bytes, or a size such as 8GiB or 512MiB")
    executable = sweep_path(sweep)
    cut = chain(model, inputs, loss=loss, targets=targets, max_stages=max_stages)
    with tempfile.TemporaryDirectory(prefix="ckptlab-optimize-") as folder:
        path = os.path.join(folder, "chain.pt")
        cut.save(path)
        out = os.path.join(folder, "out")
        _run_sweep([executable, "--predict", f"--models=chain:file={path}",
                    f"--strategies=store_all,optimal:budget={text}", f"--out={out}"], progress)
        with open(os.path.join(out, "predict.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
    baseline = next(r for r in rows if r["strategy"] == "store_all")
    row = next(r for r in rows if r["strategy"].startswith("optimal:"))
    if row["status"] != "ok":  # the chain's file is gone: the model is named instead
        message = row["message"].replace(f"chain:file={path}",
                                         f"the model ({type(model).__name__})")
        raise OptimizeError(f"ckptlab.optimize: {printable(message)}")
    prediction = Prediction(
        plan=row["plan"], activation_bytes=int(row["predicted_activation_bytes"]),
        step_peak_bytes=int(row["predicted_step_peak_bytes"]),
        total_peak_bytes=int(row["predicted_total_peak_bytes"]),
        step_ratio=float(row["predicted_step_ms"]) / float(baseline["predicted_step_ms"]),
        **{f: int(row[f]) for f in ("parameter_bytes", "buffer_bytes", "gradient_bytes",
                                    "optimizer_bytes", "batch_bytes")})
    planned = apply(cut, prediction.plan)
    planned.predicted = prediction
    return planned
