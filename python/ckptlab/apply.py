"""A plan from ckptlab, run by PyTorch.

ckptlab plans a chain of stages (docs/plans.md); `apply` wraps an nn.Sequential, each child a
stage, so that its forward follows the plan:

    import ckptlab
    planned = ckptlab.apply(model, "[0,4) checkpointed {[0,2) checkpointed, [2,4) stored}, [4,6) stored")
    loss = loss_fn(planned(x))
    loss.backward()                   # the same gradients as model's, with less kept for backward

How each segment runs:
  stored         the stages plainly: autograd keeps what they save.
  checkpointed   torch.utils.checkpoint (non-reentrant, RNG state preserved): only the
                 segment's input is kept; backward reruns it as its inner plan says, inner
                 checkpointed segments as nested checkpoints.
  recompute-all  nested checkpoints, one per stage from the last: backward reruns the segment
                 from its input up to each stage in turn (ckptlab's recompute-all).
  offloaded      checkpointed, its kept input moved to host memory after the forward and back
                 before the rerun (ckptlab's offload; DeepSpeed's cpu_checkpointing).
A plan that gives a stage's named parts a policy (a built-in model's attention core, say) is
refused: PyTorch runs a module whole, and cannot run a part of it apart from the rest.

    python3 -m ckptlab.apply PLAN_FILE MODEL.pt     # what the plan does to the file's stages

`kept_bytes` measures what PyTorch keeps for backward, the figure ckptlab predicts.
"""

import argparse
import contextlib
import sys
import threading
from typing import Callable, List, Sequence, Tuple

import torch
from torch import nn
import torch.utils.checkpoint

from ckptlab.plan import Plan, PlanError, Segment, parse_plan, printable

__all__ = ["apply", "kept_bytes", "describe", "PlanError"]


# Since 2.1 the non-reentrant checkpoint stops a recomputation early, once it has what backward
# needs, by raising an exception from inside the rerun; raised inside a TorchScript module it
# comes out as a RuntimeError instead. Reruns here run whole, as ckptlab's do.
_early_stop = getattr(torch.utils.checkpoint, "set_checkpoint_early_stop", None)


def _checkpoint(fn, *xs):
    with _early_stop(False) if _early_stop is not None else contextlib.nullcontext():
        return torch.utils.checkpoint.checkpoint(fn, *xs, use_reentrant=False,
                                                 preserve_rng_state=True)


def _as_tuple(y):
    return y if isinstance(y, tuple) else tuple(y) if isinstance(y, list) else (y,)


# What checkpoints keep outside autograd's saved tensors (their inputs), noted while a
# kept_bytes measurement runs on this thread.
_ledger = threading.local()


def _note_kept(tensors):
    kept = getattr(_ledger, "kept", None)
    if kept is not None:
        kept.extend(t for t in tensors if isinstance(t, torch.Tensor))


def _devices_rng(tensors):
    devices = sorted({t.device.index or 0 for t in tensors
                      if isinstance(t, torch.Tensor) and t.is_cuda})
    cuda = [torch.cuda.get_rng_state(d) for d in devices]
    return devices, torch.get_rng_state(), cuda


class _Offloaded(torch.autograd.Function):
    """A checkpointed segment whose kept inputs wait in host memory. `anchor`, an empty tensor
    that requires grad, makes the outputs differentiable whatever the inputs, so that the
    parameters inside get their gradients (the reentrant checkpoint's caveat)."""

    @staticmethod
    def forward(ctx, run, anchor, *xs):
        ctx.run = run
        ctx.devices, ctx.cpu_rng, ctx.cuda_rng = _devices_rng(xs)
        ctx.placed = [(x.device, x.requires_grad) if isinstance(x, torch.Tensor) else None
                      for x in xs]
        ctx.host = [x.detach().to("cpu", copy=True) if isinstance(x, torch.Tensor) else x
                    for x in xs]
        with torch.no_grad():
            ys = _as_tuple(run(*xs))
        ctx.mark_non_differentiable(*[y for y in ys if not y.is_floating_point()])
        return ys

    @staticmethod
    def backward(ctx, *grads):
        xs = [h.to(p[0]).requires_grad_(p[1]) if p is not None else h
              for h, p in zip(ctx.host, ctx.placed)]
        with torch.random.fork_rng(devices=ctx.devices):
            torch.set_rng_state(ctx.cpu_rng)
            for d, state in zip(ctx.devices, ctx.cuda_rng):
                torch.cuda.set_rng_state(state, d)
            with torch.enable_grad():
                ys = _as_tuple(ctx.run(*xs))
        pairs = [(y, g) for y, g in zip(ys, grads) if y.requires_grad and g is not None]
        if pairs:
            torch.autograd.backward([y for y, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(x.grad if isinstance(x, torch.Tensor) and x.requires_grad
                                    else None for x in xs)


class PlannedSequential(nn.Module):
    """`stages` run as `plan` says. Its parameters are the stages' own."""

    def __init__(self, stages: nn.Sequential, plan: Plan):
        super().__init__()
        self.stages = stages
        self.plan = plan
        self._list = list(stages)

    def _stored(self, begin, end, xs):
        for stage in self._list[begin:end]:
            xs = _as_tuple(stage(*xs))
        return xs

    def _run(self, segments: List[Segment], xs):
        for s in segments:
            xs = self._segment(s, xs)
        return xs

    def _rerun_plan(self, s: Segment):
        inner = s.inner or [Segment(s.begin, s.end, "stored")]
        return lambda *xs: self._run(inner, xs)

    def _segment(self, s: Segment, xs):
        if s.mode == "stored":
            return self._stored(s.begin, s.end, xs)
        if s.mode == "offloaded":  # its input waits in host memory, not among the kept
            anchor = torch.empty(0, requires_grad=True)
            return _Offloaded.apply(self._rerun_plan(s), anchor, *xs)
        _note_kept(xs)
        if s.mode == "checkpointed":
            return _as_tuple(_checkpoint(self._rerun_plan(s), *xs))
        # recompute-all: stages [begin, end - 1) under a checkpoint of their own, nested, and
        # the last stored, all under one checkpoint.
        return _as_tuple(_checkpoint(lambda *x: self._recompute_all(s.begin, s.end, x), *xs))

    def _recompute_all(self, begin, end, xs):
        if end - begin > 1:
            xs = _as_tuple(_checkpoint(lambda *x: self._recompute_all(begin, end - 1, x), *xs))
        return self._stored(end - 1, end, xs)

    def forward(self, *inputs):
        ys = self._run(self.plan.segments, inputs)
        return ys[0] if len(ys) == 1 else ys


def apply(model: nn.Sequential, plan_text: str) -> PlannedSequential:
    """`model`, its children the stages in order, wrapped to run as `plan_text` says.

    PlanError (a ValueError) naming what is wrong: text that is not a plan, a plan for another
    number of stages, or one that PyTorch cannot run as written (part policies)."""
    if not isinstance(model, nn.Sequential):
        raise PlanError(f"apply takes an nn.Sequential, each child a stage; got "
                        f"{type(model).__name__}")
    plan = parse_plan(plan_text)
    if plan.stage_count() != len(model):
        raise PlanError(f"the plan covers {plan.stage_count()} stages; the model has "
                        f"{len(model)}")
    if plan.policies:
        p = plan.policies[0]
        raise PlanError(f"the plan gives part '{printable(p.part)}' of stage {p.stages[0][0]} the "
                        f"action '{printable(p.action)}': PyTorch runs a module whole, so part "
                        "policies (built-in models' attention cores, MLPs, norms) cannot run here")
    for s in _walk(plan.segments):
        if s.mode == "recompute-all" and s.end - s.begin > 100:
            raise PlanError(f"recompute-all over [{s.begin},{s.end}) nests {s.end - s.begin} "
                            "checkpoints; at most 100 are run here")
    return PlannedSequential(model, plan)


def _walk(segments):
    for s in segments:
        yield s
        yield from _walk(s.inner)


def _storage(t: torch.Tensor):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return (t.device, s.data_ptr()), s.nbytes()


def kept_bytes(forward: Callable[[], torch.Tensor],
               exclude: Sequence[torch.Tensor] = ()) -> Tuple[torch.Tensor, int]:
    """Runs `forward` (a model's forward and its loss) and returns its result and the bytes
    PyTorch keeps for backward when it returns: the tensors autograd saved (seen through
    saved_tensors_hooks) and the inputs checkpoints keep, each storage counted once, less the
    storages of `exclude` (the parameters and the batch, which ckptlab counts in its baseline).
    Host copies of offloaded inputs are not counted: ckptlab's figure is device bytes."""
    saved = {}

    def pack(t):
        key, size = _storage(t)
        saved[key] = size
        return t

    _ledger.kept = []
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            result = forward()
        for t in _ledger.kept:
            key, size = _storage(t)
            saved[key] = size
    finally:
        _ledger.kept = None
    for t in exclude:
        saved.pop(_storage(t)[0], None)
    return result, sum(saved.values())


def describe(plan: Plan, names: Sequence[str]) -> str:
    """The plan as lines, a segment a line with its stages' names."""
    lines = []

    def walk(segments, depth):
        for s in segments:
            stages = ", ".join(names[s.begin:s.end])
            lines.append(f"{'  ' * depth}[{s.begin},{s.end}) {s.mode}: {stages}")
            walk(s.inner, depth + 1)

    walk(plan.segments, 0)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m ckptlab.apply",
        description="What a ckptlab plan does to the stages of a TorchScript nn.Sequential.")
    parser.add_argument("plan", help="a plan file (docs/plans.md), e.g. saved from results.csv")
    parser.add_argument("model", help="the file torch.jit.save wrote (runs its code)")
    args = parser.parse_args(argv)
    try:
        with open(args.plan, encoding="utf-8") as f:
            text = f.read(1 << 20)
        model = torch.jit.load(args.model, map_location="cpu")
        stages = nn.Sequential(*model.children())
        planned = apply(stages, text)
    except (OSError, UnicodeDecodeError) as e:
        print(f"ckptlab.apply: {printable(str(e))}", file=sys.stderr)
        return 2
    except PlanError as e:
        print(f"ckptlab.apply: {args.plan}: {printable(str(e))}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # torch.jit.load's
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"ckptlab.apply: {printable(args.model)}: {printable(first)}", file=sys.stderr)
        return 2
    names = [f"{name}.{type(m).__name__ if not hasattr(m, 'original_name') else m.original_name}"
             for name, m in model.named_children()]
    print(describe(planned.plan, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
