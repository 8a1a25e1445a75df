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

    applied = ckptlab.optimize(model, inputs, "8GiB", granularity="blocks")  # the model's blocks
    applied.predicted        # the blocks checkpointed, and the step's peak measured (BlocksAnswer)
    loss(model(*inputs), *targets).backward()   # the model itself, checkpointed in place

Blocks: for a model tracing cannot cut (ckptlab.chain refuses it, and optimize then says so in
a line and takes this path), or when asked. The model's own repeated blocks are profiled
(ckptlab.profile_blocks) and planned (ckptlab.plan_blocks: kept bytes within a target, least
time added), and the step's peak is measured, not predicted: a step of the model (its
buffers, random state and gradients put back after) under the plan, its peak above what was
allocated before it (ckptlab.step_peak), as the chain path's budget counts it; the step holds
the model's output through backward, as a training loop's `out = model(x)` does. The target starts
at the budget less what the stored step holds above its kept bytes, and is lowered by what a
plan's measured peak is over the budget, four times at most; where none of those fits, the plan
that checkpoints every block it can is measured too. The answer is the fastest plan measured
within the budget; the peak is of this batch, as the profile is.
"""

import csv
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from typing import Callable, Optional, Union

import torch
from torch import nn

from ckptlab import native
from ckptlab import selective as selective_policy
from ckptlab.block_plans import BlockPlan, BudgetError, checkpointable, plan_blocks, plan_of
from ckptlab.block_checkpoints import checkpoint_blocks
from ckptlab.block_values import BlocksError, _tensors
from ckptlab.blocks import Applied, _batch, _loss_of, profile_blocks
from ckptlab.chains import ChainError, _untouched, chain
from ckptlab.peaks import step_peak
from ckptlab.plan import printable
from ckptlab.planned import PlannedSequential, apply

__all__ = ["BlocksAnswer", "OptimizeError", "Prediction", "optimize", "sweep_path"]

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


@dataclasses.dataclass
class BlocksAnswer:
    """What optimize's blocks path found: the plan, and the step's peaks as measured."""
    plan: BlockPlan               # the blocks checkpointed, their kept bytes (predicted exactly)
    step_peak_bytes: int          # the planned step's peak above what it began with, measured
    stored_step_peak_bytes: int   # the same with every block stored
    budget_bytes: int


_GRANULARITIES = ("stages", "blocks")


def optimize(model: nn.Module, inputs, budget, loss: Optional[Callable[..., torch.Tensor]] = None,
             targets=(), max_stages: Optional[int] = None, sweep: Optional[str] = None,
             progress: bool = True, granularity: str = "stages",
             blocks: Optional[list] = None, planner: Optional[str] = None,
             selective: bool = False) -> Union[PlannedSequential, Applied]:
    """The fastest plan ckptlab finds for `model` whose step peaks at most `budget` above the
    parameters and the batch (optimal's budget: a number of bytes, or "8GiB", "512MiB"),
    applied. `inputs`, `loss`, `targets` and `max_stages` are ckptlab.chain's. The returned
    module holds `predicted` (a Prediction) and `stages` (the Chain); called with the batch it
    returns the loss. OptimizeError naming the value where the budget is not a size or nothing
    fits it (with the least peak any plan reaches), or where the sweep is missing or fails.

    granularity="blocks", or a model ckptlab.chain cannot cut (said in one line on stderr): the
    model's blocks (`blocks`, default ckptlab.find_blocks') checkpointed in place, the module
    docstring says how; an Applied is returned, its `predicted` a BlocksAnswer, and the model
    trains as before. `planner` names ckptlab's planner library (ckptlab.native); `selective`
    lets it checkpoint blocks selectively too (ckptlab.plan_blocks says at what estimate)."""
    if granularity not in _GRANULARITIES:
        raise OptimizeError(f"ckptlab.optimize: granularity={printable(repr(granularity))}; "
                            f"accepted: {', '.join(_GRANULARITIES)}")
    text = str(budget) if isinstance(budget, int) and not isinstance(budget, bool) else budget
    if not isinstance(text, str) or not _BUDGET.fullmatch(text):
        raise OptimizeError(f"ckptlab.optimize: budget={printable(repr(budget)[:80])}; accepted: a "
                            "number of bytes, or a size such as 8GiB or 512MiB")
    if not isinstance(selective, bool):
        raise OptimizeError(f"ckptlab.optimize: selective={printable(repr(selective)[:40])}; "
                            "accepted: True or False")
    if selective and granularity != "blocks":
        raise OptimizeError("ckptlab.optimize: selective=True is a policy of blocks; accepted: "
                            "with granularity='blocks'")
    if selective and selective_policy.available() is not None:
        raise OptimizeError(f"ckptlab.optimize: selective=True: {selective_policy.available()}")
    if granularity == "blocks":
        return _optimize_blocks(model, inputs, text, loss, targets, blocks, planner, progress,
                                selective)
    try:
        cut = chain(model, inputs, loss=loss, targets=targets, max_stages=max_stages)
    except ChainError as e:
        cut = None  # (the blocks path runs outside this handler: its errors are its own)
        print(f"ckptlab.optimize: {printable(str(e))}; planning its blocks instead "
              "(granularity='blocks': the model checkpointed in place)", file=sys.stderr)
    if cut is None:
        return _optimize_blocks(model, inputs, text, loss, targets, blocks, planner, progress,
                                False)
    executable = sweep_path(sweep)
    with tempfile.TemporaryDirectory(prefix="ckptlab-optimize-") as folder:
        path = os.path.join(folder, "chain.pt")
        cut.save(path)
        out = os.path.join(folder, "out")
        # The chain's file is gone when a message is read: the model is named instead.
        spec, named = f"chain:file={path}", f"the model ({type(model).__name__})"
        try:
            _run_sweep([executable, "--predict", f"--models={spec}",
                        f"--strategies=store_all,optimal:budget={text}", f"--out={out}"],
                       progress)
        except OptimizeError as e:
            raise OptimizeError(str(e).replace(spec, named)) from None
        with open(os.path.join(out, "predict.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
    baseline = next(r for r in rows if r["strategy"] == "store_all")
    row = next(r for r in rows if r["strategy"].startswith("optimal:"))
    if row["status"] != "ok":
        raise OptimizeError(f"ckptlab.optimize: {printable(row['message'].replace(spec, named))}")
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


def _described(plan: BlockPlan, profile) -> str:
    """A plan in a few words: "2 of 6 blocks checkpointed, 1 more selectively"."""
    words = f"{len(plan.checkpointed)} of {len(profile.blocks)} blocks checkpointed"
    return words + (f", {len(plan.selective)} more selectively" if plan.selective else "")


def _optimize_blocks(model, inputs, budget: str, loss, targets, blocks, planner, progress,
                     selective: bool):
    """optimize's blocks path (the module docstring)."""
    try:
        native.load(planner)
    except native.NativeError as e:
        raise OptimizeError(f"ckptlab.optimize: {printable(str(e))}") from None
    try:
        limit = native.parse_bytes(budget, planner)
    except native.NativeError as e:
        raise OptimizeError(f"ckptlab.optimize: budget: {printable(str(e))}") from None
    try:
        profile = profile_blocks(model, inputs, loss=loss, targets=targets, blocks=blocks)
    except BlocksError as e:
        raise OptimizeError(f"ckptlab.optimize: {printable(str(e))}") from None
    args, kwargs, targets = _batch(inputs, targets)
    parameters = list(model.parameters())
    device = next((t.device for t in parameters + _tensors((args, kwargs)) if t.is_cuda), None)
    # Every leaf a measured step's backward may give a gradient: put back after each.
    leaves = [t for t in parameters + _tensors((args, kwargs, targets)) + [
        v for m in model.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
        if t.requires_grad and t.is_leaf]

    peaks = {}  # by the blocks checkpointed: a plan's step is measured once in this call

    def measured(plan: BlockPlan) -> int:
        """The peak of a step under `plan`, the model as it was after."""
        key = (tuple(plan.checkpointed), tuple(plan.selective))
        if key in peaks:
            return peaks[key]
        grads = [t.grad for t in leaves]
        applied = checkpoint_blocks(model, plan.checkpointed, profile, plan.selective)
        try:
            with _untouched(model, _tensors((args, kwargs, targets))):
                for t in leaves:
                    t.grad = None

                def step():
                    output = model(*args, **kwargs)
                    value = _loss_of(loss, output, targets)
                    value.backward()

                peak = step_peak(step, device)
        finally:
            applied.undo()
            for t, g in zip(leaves, grads):
                t.grad = g
        if progress:
            print(f"ckptlab.optimize: {_described(plan, profile)}: the step peaks at {peak} "
                  "bytes", file=sys.stderr)
        peaks[key] = peak
        return peak

    plans = [plan_of(profile, [])]  # every block stored
    stored = measured(plans[0])
    target = limit - (stored - profile.kept_bytes([]))
    for _ in range(4):
        try:
            plans.append(plan_blocks(profile, max(target, 0), planner, reruns=True,
                                     selective=selective))
        except BudgetError:  # below what any plan keeps
            break
        except BlocksError as e:  # more block calls than the planner takes
            raise OptimizeError(f"ckptlab.optimize: {printable(str(e))}") from None
        overshoot = measured(plans[-1]) - limit
        if overshoot <= 0:
            break
        target = min(target - overshoot, plans[-1].kept_bytes - 1)
    if all(measured(p) > limit for p in plans):  # every block that can be, too
        plans.append(plan_of(profile, checkpointable(profile)))
    plan = min((p for p in plans if measured(p) <= limit),
               key=lambda p: (p.recompute_ms, measured(p)), default=None)
    if plan is None:
        lowest = min(plans, key=measured)
        raise OptimizeError(
            f"ckptlab.optimize: budget={budget} is below the peaks of every plan of its blocks "
            f"it measured: the lowest, {measured(lowest)} bytes, with "
            f"{_described(lowest, profile)} (every block stored: {stored})")
    peak = measured(plan)
    applied = checkpoint_blocks(model, plan.checkpointed, profile, plan.selective)
    applied.predicted = BlocksAnswer(plan, peak, stored, limit)
    return applied
