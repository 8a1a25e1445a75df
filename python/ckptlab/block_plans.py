"""The fastest blocks to checkpoint within a budget, planned by ckptlab's chain solver.

    profile = ckptlab.profile_blocks(model, inputs, loss, targets)
    plan = ckptlab.plan_blocks(profile, "2GiB")
    plan.checkpointed, plan.selective, plan.kept_bytes, plan.recompute_ms
    applied = ckptlab.checkpoint_blocks(model, plan.checkpointed, profile, plan.selective)

The budget bounds the bytes PyTorch keeps for backward when the loss is computed, as
profile.kept_bytes counts them (exactly; the parameters, buffers and batch not counted); the
plan is the fastest the solver finds within it (the least time added: each checkpointed block's
forward once more, as the profile timed it, and each selective block's selective_ms), and the
fastest of all where the chain counts every plan's bytes exactly (below).

The planner is strategies/chain_solver.h (ckptlab.native loads it), with checkpoints off: the
step's block calls, in the order it made them, are its stages, each stored under one of three
options, stored or (where the profile allows it) checkpointed or, asked, selectively.
Between two calls x_k is what the later one takes; stored, a call keeps what autograd saved while
it ran, checkpointed its random state and buffer copies, selectively those and the outputs the
policy keeps (its time what the profile measured the policy to cost over storing it), and each
keeps what it returns (x_{k+1}). What the code between the
calls keeps, and a storage handed to several calls (a mask), count once, outside the chain. A
storage that two calls' graphs keep, or one handed to several that a checkpoint would free
(a DenseNet's concatenated outputs), is counted as always kept: the chain's bytes are at or above
the profile's, so, as `optimal` checks the solver's plans with the exact memory model, each
budget's plan on the solver's grid is counted by profile.kept_bytes and the fastest within the
budget is the answer. Where the chain over-counts, a faster plan may fit that no budget's plan
is. A block called more than once stays stored (its calls would be stages with one
choice between them).
"""

import dataclasses
import math
from typing import Dict, List, Optional

from ckptlab import native
from ckptlab import selective as selective_policy
from ckptlab.blocks import BlockProfile, BlocksError
from ckptlab.plan import printable

__all__ = ["BlockPlan", "BudgetError", "checkpointable", "plan_blocks", "plan_of"]

_GRID = 4096  # units on the solver's grid of budgets


@dataclasses.dataclass
class BlockPlan:
    """The blocks to checkpoint (plan_blocks), and what the profile says of them."""
    checkpointed: List[str]  # in the order the profile names its blocks
    selective: List[str]     # those selectively checkpointed (ckptlab.selective), in that order
    kept_bytes: int          # profile.kept_bytes(checkpointed, selective): kept at the loss
    stored_kept_bytes: int   # the same with every block stored
    recompute_ms: float      # the reruns' forwards, and what the selective blocks cost
    forward_ms: float        # every block call's forward, as the profile timed it


class BudgetError(BlocksError):
    """A budget below what every plan the planner weighed keeps: the message gives the least."""


def budget_bytes(budget) -> int:
    """A budget as bytes: an int, or a size as the sweep reads it ("2GiB"); BlocksError naming
    it."""
    if isinstance(budget, int) and not isinstance(budget, bool) and 0 <= budget < 2**63:
        return budget
    if isinstance(budget, str):
        try:
            return native.parse_bytes(budget)
        except native.NativeError as e:
            raise BlocksError(f"blocks: budget: {e}") from None
    raise BlocksError(f"blocks: budget={printable(repr(budget)[:80])}; accepted: a number of "
                      "bytes (0 to 2^63 - 1) or a size such as 2GiB or 512MiB")


def checkpointable(profile: BlockProfile) -> List[str]:
    """The blocks plan_blocks may checkpoint: called once in the profiled step, and not refused."""
    counts: Dict[str, int] = {}
    for call in profile.calls:
        counts[call.block] = counts.get(call.block, 0) + 1
    return [c.block for c in profile.calls if counts[c.block] == 1 and not c.refused]


def _chain(profile: BlockProfile, reruns: bool, selective: bool):
    """The profile's block calls as the solver's chain: (x_0 .. x_n, the stages' options, the
    bytes kept outside the chain)."""
    calls = profile.calls
    free = set(checkpointable(profile))
    handed: Dict[tuple, int] = {}
    for call in calls:
        for key in call.inputs:
            handed[key] = handed.get(key, 0) + 1
    shared = {k: s for c in calls for k, s in c.inputs.items() if handed[k] > 1}
    fixed = {k: s for k, s in list(profile.outside.items()) + list(shared.items())
             if k not in profile.excluded}
    outside = set(fixed) | set(profile.excluded)
    between = [{k: s for k, s in c.inputs.items() if k not in outside} for c in calls] + [{}]
    x = [sum(b.values()) for b in between]
    stages = []
    for k, call in enumerate(calls):
        rest = sum(s for key, s in call.saved.items()
                   if key not in outside and key not in between[k] and key not in between[k + 1])
        options = [(None, native.Option(call.forward_ms, 0.0, x[k + 1] + rest))]
        if call.block in free:
            extra = (profile.rng_bytes if call.draws else 0) + sum(call.state.values())
            transient = rest if reruns else 0
            options.append(("checkpointed", native.Option(
                2 * call.forward_ms, 0.0, x[k + 1] + extra, backward_transient=transient)))
            if selective and not call.selective_refused:
                cached = sum(s for key, s in call.cached.items()
                             if key not in outside and key not in between[k + 1])
                options.append(("selective", native.Option(
                    call.forward_ms + call.selective_ms, 0.0, x[k + 1] + extra + cached,
                    backward_transient=transient)))
        stages.append(options)
    return x, stages, sum(fixed.values())


def plan_of(profile: BlockProfile, names, selective=()) -> BlockPlan:
    """The plan that checkpoints the blocks `names` (a list) and `selective` selectively, as the
    profile counts it."""
    chosen, kept_outputs = set(names), set(selective)
    return BlockPlan([b for b in profile.blocks if b in chosen],
                     [b for b in profile.blocks if b in kept_outputs],
                     profile.kept_bytes(list(names), list(selective)), profile.kept_bytes([]),
                     sum(c.forward_ms for c in profile.calls if c.block in chosen)
                     + sum(c.selective_ms for c in profile.calls if c.block in kept_outputs),
                     sum(c.forward_ms for c in profile.calls))


def plan_blocks(profile: BlockProfile, budget, planner: Optional[str] = None,
                reruns: bool = False, selective: bool = False) -> BlockPlan:
    """The blocks to checkpoint within `budget` (bytes kept for backward at the loss: a number
    of bytes or a size such as "2GiB"), fastest first (the module docstring says how). With
    `reruns`, the budget bounds each checkpointed block's rerun in backward too, as the chain
    counts it: what the calls before it keep and what it recomputes. With `selective`, blocks
    may be checkpointed selectively too (ckptlab.selective; its time is an estimate, which on
    a CPU can be well under what the policy's dispatch modes cost: docs/results/blocks-cpu).
    BlocksError naming the value where the budget is no size, `selective` is set on a torch
    without the policy, or the planner library is missing (planner=, $CKPTLAB_PLANNER);
    BudgetError where it is below what every plan weighed keeps (the least given)."""
    if not isinstance(profile, BlockProfile):
        raise BlocksError(f"blocks: plan_blocks takes profile_blocks' answer; got "
                          f"{printable(type(profile).__name__)}")
    if not isinstance(selective, bool):
        raise BlocksError(f"blocks: selective={printable(repr(selective)[:40])}; accepted: "
                          "True or False")
    if selective and selective_policy.available() is not None:
        raise BlocksError(f"blocks: selective=True: {selective_policy.available()}")
    budget = budget_bytes(budget)
    calls = profile.calls

    def plan(names, kept_outputs=()):
        return plan_of(profile, names, kept_outputs)

    candidates = [] if reruns and calls else [plan([])]
    if len(calls) > 64:
        raise BlocksError(f"blocks: the step made {len(calls)} block calls; accepted: at most 64 "
                          "(name fewer blocks with profile_blocks' blocks=)")
    if calls:
        x, stages, fixed = _chain(profile, reruns, selective)
        most = sum(max(o.kept for _, o in options) for options in stages) + max(
            o.backward_transient for options in stages for _, o in options)
        unit = max(1, math.ceil(most / _GRID))
        grid = math.ceil(most / unit) + len(calls)
        # With reruns, only the plans the chain fits in the budget: it alone counts reruns.
        top = min(grid, (budget - fixed - x[0]) // unit) if reruns else grid
        try:
            answers = native.plan_options(x, [[o for _, o in options] for options in stages],
                                          unit, top, planner) if top >= 0 else []
        except native.NativeError as e:
            raise BlocksError(f"blocks: {e}") from None
        seen = set()
        for _, chosen in answers:
            if chosen is None:
                continue
            policies = [stages[k][o][0] for k, o in enumerate(chosen)]
            names = tuple(calls[k].block for k, p in enumerate(policies) if p == "checkpointed")
            kept_outputs = tuple(calls[k].block for k, p in enumerate(policies) if p == "selective")
            if (names, kept_outputs) not in seen:
                seen.add((names, kept_outputs))
                candidates.append(plan(list(names), list(kept_outputs)))
        if not reruns:
            candidates.append(plan(checkpointable(profile)))
    if not candidates:
        raise BudgetError(f"blocks: budget={budget} bytes is below what every plan keeps at the "
                          "loss and in its reruns, as the chain counts them")
    fitting = [p for p in candidates if p.kept_bytes <= budget]
    if not fitting:
        least = min(candidates, key=lambda p: (p.kept_bytes, p.recompute_ms))
        raise BudgetError(f"blocks: budget={budget} bytes is below what every plan the planner "
                          f"weighed keeps: the least, {least.kept_bytes} bytes, checkpoints "
                          f"{len(least.checkpointed)} of the {len(profile.blocks)} blocks"
                          + (f" and {len(least.selective)} more selectively"
                             if least.selective else ""))
    return min(fitting, key=lambda p: (p.recompute_ms, p.kept_bytes))
