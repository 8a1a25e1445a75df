"""A plan from ckptlab, run by PyTorch.

ckptlab plans a chain of stages (docs/plans.md); `apply` wraps an nn.Sequential, each child a
stage, so that its forward follows the plan:

    import ckptlab
    planned = ckptlab.apply(model, "[0,4) checkpointed {[0,2) checkpointed, [2,4) stored}, [4,6) stored")
    loss = loss_fn(planned(x))
    loss.backward()                   # the same gradients as model's, with less kept for backward

Stages pass what they return on as the model's container does: an nn.Sequential whole (a tensor, a
tuple), spread only into a stage whose forward needs several arguments (which nn.Sequential could
not call), a ckptlab.Chain spread wherever it is a tuple. The planned module runs as the plain
model does, or refuses by name:
  - the same gradients, bitwise on a CPU, and the same module state after a step: a stage that
    updates state (BatchNorm's statistics, a counter) updates it in the step's first run only,
    and a rerun reads the state that run read;
  - a stage that writes its input in place (x.mul_(2), an in-place ReLU) is handed a copy of it,
    so that what a checkpoint keeps for its rerun keeps its value;
  - random numbers replay: a rerun draws what the first run drew;
  - the children are read at every call: a stage replaced after `apply` runs as replaced;
  - scripted stages run unoptimized (torch.jit.optimized_execution(False)), as ckptlab runs them:
    the JIT's optimizing executor changes what a graph saves, and after how many runs, so that
    a stage rerun by a plan would run differently from its first run. Compare with the plain
    model run the same way.
Which stages write their inputs or update state is learned on the first call (and again when a
module in them is replaced, or its training flag changes: an evaluation before training), by
running the stages once without a graph on a copy of the inputs, the state, the parameters and
the random streams put back after. A stage that writes its own parameter as it runs (a max-norm
constraint) is refused where the plan reruns it, unless a second run changes nothing
(Embedding's max_norm).

How each segment runs (ckptlab's executor does the same, core/run/checkpoint.h):
  stored         the stages plainly: autograd keeps what they save.
  checkpointed   an autograd Function that runs the segment without a graph, keeping only its
                 inputs, and in backward reruns it as its inner plan says (inner checkpointed
                 segments as nested Functions, which keep only their own inputs in turn).
  recompute-all  nested checkpoints, one per stage from the last: backward reruns the segment
                 from its input up to each stage in turn (ckptlab's recompute-all).
  offloaded      checkpointed, its kept inputs in host memory from the forward to the rerun
                 (ckptlab's offload; DeepSpeed's cpu_checkpointing).
A plan that gives a stage's named parts a policy (a built-in model's attention core, say) is
refused: PyTorch runs a module whole, and cannot run a part of it apart from the rest. Backward
must be `.backward()` (a rerun backpropagates inside it), not torch.autograd.grad.

`kept_bytes` measures what PyTorch keeps for backward, the figure ckptlab predicts.
"""

import contextlib
import inspect
import threading
import weakref
from typing import Callable, List, Sequence, Tuple

import torch
from torch import nn

from ckptlab.plan import Plan, PlanError, Segment, parse_plan, printable

__all__ = ["apply", "kept_bytes", "describe", "PlanError", "PlannedSequential", "MAX_NESTING"]

# Checkpoints inside checkpoints that a step runs (Python's stack bounds it): plans nesting
# deeper, and recompute-all segments of more stages (each stage one level), are refused.
MAX_NESTING = 100

# Per thread: weak references to the tensors autograd saves and checkpoints keep outside its saved
# tensors while a kept_bytes measurement runs (`kept`), and how many reruns enclose the code
# running now (`reruns`).
_local = threading.local()


def _in_rerun() -> bool:
    return getattr(_local, "reruns", 0) > 0


@contextlib.contextmanager
def _rerunning():
    _local.reruns = getattr(_local, "reruns", 0) + 1
    try:
        yield
    finally:
        _local.reruns -= 1


def _note_kept(tensors):
    kept = getattr(_local, "kept", None)
    if kept is not None:
        kept.extend(weakref.ref(t) for t in tensors)


class _Slot(int):
    """Where a tensor sat in a value that _flatten took apart."""


def _flatten(value):
    """The tensors in `value` (a tensor, or tuples and lists holding tensors and other values)
    and its skeleton, which _unflatten fills again."""
    tensors = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return _Slot(len(tensors) - 1)
        if type(v) in (tuple, list):
            return type(v)(walk(e) for e in v)
        return v

    return tensors, walk(value)


def _unflatten(skeleton, tensors):
    if isinstance(skeleton, _Slot):
        return tensors[int(skeleton)]
    if type(skeleton) in (tuple, list):
        return type(skeleton)(_unflatten(e, tensors) for e in skeleton)
    return skeleton


def _copied(value):
    tensors, skeleton = _flatten(value)
    return _unflatten(skeleton, [t.clone() for t in tensors])


def _required_arguments(stage: nn.Module) -> int:
    """How many positional arguments without a default `stage`'s forward takes (a scripted one's
    schema, an eager one's signature; 1 where it cannot be read)."""
    if isinstance(stage, torch.jit.ScriptModule):
        arguments = stage._c._get_method("forward").schema.arguments[1:]  # self first
        return sum(1 for a in arguments if not a.has_default_value() and not a.kwarg_only)
    try:
        parameters = inspect.signature(stage.forward).parameters.values()
    except (TypeError, ValueError):
        return 1
    return sum(1 for p in parameters if p.default is p.empty
               and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _spreads(stage: nn.Module, chain: bool) -> bool:
    """Whether a tuple is spread into `stage`'s arguments. A ckptlab.Chain spreads every tuple
    (Chain.forward); an nn.Sequential hands each stage one value, what the one before returned,
    whole, unless the stage's forward cannot take one: several arguments without a default,
    which get the tuple spread, as ckptlab's reader of TorchScript files hands them theirs."""
    return chain or _required_arguments(stage) > 1


class _State:
    """A stage's buffers that the stages update (`updated`: their ids). A step's first run of
    the stage takes a snapshot of their values as it begins, into each checkpoint running it
    (_capturing); a rerun stands in copies of the snapshot its checkpoint took (_replaying), so
    that it reads what that run read, also where several forwards come before one backward (a
    GAN's real and fake batches, micro-batches summed into one loss)."""

    def __init__(self, stage: nn.Module, updated: set):
        self.slots = [(owner, name) for _, owner in stage.named_modules()
                      for name, b in owner.named_buffers(recurse=False) if id(b) in updated]

    def snapshot(self) -> List[torch.Tensor]:
        """A copy of each slot's buffer, one per buffer: a buffer under two names (two modules
        holding one tensor) is one copy in both slots."""
        return self.taken({id(b): b for b in (getattr(o, n) for o, n in self.slots)})

    def taken(self, values: dict) -> List[torch.Tensor]:
        """Each slot's value among `values` (a buffer's id -> its value), copied once per
        buffer."""
        copies = {}
        with torch.no_grad():
            return [copies.setdefault(id(getattr(o, n)), values[id(getattr(o, n))].clone())
                    for o, n in self.slots]

    @contextlib.contextmanager
    def standing_in(self, snapshot: List[torch.Tensor]):
        """The buffers replaced by copies of `snapshot` (which the rerun updates and its graph
        may save), put back after; slots holding one buffer get one copy, as they held one."""
        buffers = [getattr(o, n) for o, n in self.slots]
        copies = {}
        try:
            with torch.no_grad():
                for b, (o, n) in zip(snapshot, self.slots):
                    setattr(o, n, copies.setdefault(id(b), b.clone()))
            yield
        finally:
            for b, (o, n) in zip(buffers, self.slots):
                setattr(o, n, b)


@contextlib.contextmanager
def _capturing(snapshots: dict):
    """Within it, the snapshots stages with state take on their first run go into `snapshots`
    too (and into those of the checkpoints around it)."""
    _local.captures = getattr(_local, "captures", []) + [snapshots]
    try:
        yield
    finally:
        _local.captures = _local.captures[:-1]


@contextlib.contextmanager
def _replaying(snapshots: dict):
    """Within it, a rerun stands in the state `snapshots` hold (its checkpoint's)."""
    outer = getattr(_local, "replay", None)
    _local.replay = snapshots
    try:
        yield
    finally:
        _local.replay = outer


class _Facts:
    """What a first run of the stages showed: how each takes its input, which write their
    inputs in place, and the state of those that hold a buffer some stage updates."""

    def __init__(self, stages: List[nn.Module], value, chain: bool):
        self.ids = [id(s) for s in stages]
        self.modules = _modules(stages)
        self.spreads = [_spreads(s, chain) for s in stages]
        self.writes = [False] * len(stages)
        self.state = [None] * len(stages)
        devices = sorted({t.device.index or 0 for t in _flatten(value)[0] if t.is_cuda})
        self.rewrites = [None] * len(stages)  # a parameter each stage writes again each run
        saved = [(b, b.detach().clone()) for s in stages for b in s.buffers()]
        written = set()  # the buffers (by id) the stages update
        try:
            # Without autocast: a cast made under no_grad would stay in autocast's cache of cast
            # weights, without a graph, for the real forward in the same autocast region.
            with torch.no_grad(), torch.random.fork_rng(devices=devices), \
                    _autocast_as((False, None, False, torch.bfloat16)):
                x = _copied(value)
                for i, stage in enumerate(stages):
                    inputs = _flatten(x)[0]
                    versions = [t._version for t in inputs]
                    buffers = list(stage.buffers())
                    buffer_values = _values(buffers)
                    # Its parameters, put back once it has run (one stage's copies at a time).
                    named = list(stage.named_parameters())
                    before = [p.clone() for _, p in named]
                    given = _copied(x) if named else None  # for a second run, if it writes one
                    x = _call(stage, x, self.spreads[i])
                    self.writes[i] = [t._version for t in inputs] != versions
                    if not all(torch.equal(p, v) for (_, p), v in zip(named, before)):
                        # Written in its forward (a max-norm constraint): a rerun writes it again,
                        # harmless only where that changes nothing (Embedding's max_norm).
                        once = [p.clone() for _, p in named]
                        _call(stage, given, self.spreads[i])
                        self.rewrites[i] = next((name for (name, p), v in zip(named, once)
                                                 if not torch.equal(p, v)), None)
                        for (_, p), v in zip(named, before):
                            p.copy_(v)
                    written |= {id(b) for b, c in zip(buffers, _changed(buffers, buffer_values))
                                if c}
            # A module's buffers are state together: a kernel may write one without a new
            # version or a new value (BatchNorm's running_mean, where the batch's mean is the
            # running mean), as ckptlab's executor takes every buffer of a stage updating state.
            for m in {id(m): m for s in stages for m in s.modules()}.values():
                own = list(m.buffers(recurse=False))
                if any(id(b) in written for b in own):
                    written |= {id(b) for b in own}
            # A stage holding a buffer any stage updates reads state: it reruns from what its
            # first run read (a later stage reading what an earlier one updated too).
            for i, stage in enumerate(stages):
                if any(id(b) in written for b in stage.buffers()):
                    self.state[i] = _State(stage, written)
        finally:
            with torch.no_grad():
                for b, value_before in saved:
                    b.copy_(value_before)


def _modules(stages) -> List[Tuple[int, bool]]:
    """Every module the stages hold, and its training flag: what the facts depend on (a module
    replaced inside a stage; BatchNorm updates its statistics in training only)."""
    return [(id(m), m.training) for s in stages for m in s.modules()]


def _call(stage, x, spreads):
    return stage(*x) if spreads and type(x) in (tuple, list) else stage(x)


def _values(tensors) -> List[Tuple[int, torch.Tensor]]:
    """Each tensor's version and a copy of its value, for _changed."""
    with torch.no_grad():
        return [(t._version, t.clone()) for t in tensors]


def _changed(tensors, values) -> List[bool]:
    """Whether each tensor was written since _values took `values`: a new version, or a new value
    (a kernel may write a buffer without a new version: BatchNorm's running statistics in
    native_batch_norm)."""
    return [t._version != v or not torch.equal(t, c) for t, (v, c) in zip(tensors, values)]


def _devices_rng(tensors):
    devices = sorted({t.device.index or 0 for t in tensors if t.is_cuda})
    return devices, torch.get_rng_state(), [torch.cuda.get_rng_state(d) for d in devices]


def _autocast_state():
    """(cuda on, its dtype, cpu on, its dtype): what a rerun must run under."""
    cuda = torch.cuda.is_available()
    if hasattr(torch, "get_autocast_dtype"):  # 2.4 on: the per-device calls (the others warn)
        cuda = cuda and torch.is_autocast_enabled("cuda")
        return (cuda, torch.get_autocast_dtype("cuda") if cuda else None,
                torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
    cuda = cuda and torch.is_autocast_enabled()
    return (cuda, torch.get_autocast_gpu_dtype() if cuda else None,
            torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype())


@contextlib.contextmanager
def _autocast_as(state):
    """Autocast as `state` says, without its cache of cast weights, as ckptlab's executor runs
    (core/run/torch_compat.h): a cast made in a checkpoint's first pass, without a graph, must not
    be what its rerun, or a later stage, reads."""
    cuda, cuda_dtype, cpu, cpu_dtype = state
    with contextlib.ExitStack() as stack:
        if torch.cuda.is_available():
            stack.enter_context(torch.autocast("cuda", dtype=cuda_dtype, enabled=cuda,
                                               cache_enabled=False)
                                if cuda else torch.autocast("cuda", enabled=False))
        stack.enter_context(torch.autocast("cpu", dtype=cpu_dtype, enabled=cpu,
                                           cache_enabled=False))
        yield


class _Inputs(torch.autograd.Function):
    """A rerun's inputs: views of `xs` whose gradients backward leaves in `into` as the graph
    hands them on. A leaf's .grad would be autograd's accumulated copy, laid out anew (a slice of
    a concatenation's gradient made contiguous), and a kernel reading that rounds differently
    from the plain step (BatchNorm's backward does)."""

    @staticmethod
    def forward(ctx, into, *xs):
        ctx.into = into
        ctx.set_materialize_grads(False)
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.into[:] = grads
        return (None,) * (len(grads) + 1)


def _rerun_inputs(kept, firsts, into):
    """`kept` detached for a rerun; those with a place in `firsts` (position -> the first
    position of the same tensor, for those that need a gradient) are _Inputs views, a tensor
    named twice one view, so that its gradients sum before they leave, as in the plain graph."""
    xs = [x.detach() for x in kept]
    distinct = sorted(set(firsts.values()))
    into[:] = [None] * len(distinct)  # where backward does not reach them
    if distinct:
        views = _Inputs.apply(into, *[xs[i].requires_grad_(True) for i in distinct])
        where = {first: k for k, first in enumerate(distinct)}
        for i, first in firsts.items():
            xs[i] = views[where[first]]
    return xs, distinct


class _Checkpoint(torch.autograd.Function):
    """A segment run without a graph, keeping its inputs (on the host where offloaded), rerun in
    backward from them with the random streams and autocast of its first run. `anchor`, an empty
    tensor that requires grad, makes the outputs differentiable whatever the inputs, so that the
    parameters inside get their gradients. `out` receives the outputs' skeleton."""

    @staticmethod
    def forward(ctx, run, skeleton, offload, out, anchor, *xs):
        ctx.run, ctx.skeleton, ctx.offload = run, skeleton, offload
        ctx.devices, ctx.cpu_rng, ctx.cuda_rng = _devices_rng(xs)
        ctx.autocast = _autocast_state()
        ctx.placed = [x.device for x in xs]
        ctx.firsts = {i: next(j for j in range(i + 1) if xs[j] is x)
                      for i, x in enumerate(xs) if x.requires_grad}
        versions = [x._version for x in xs]
        if offload:
            ctx.host = [x.detach().to("cpu", copy=True) for x in xs]
        else:
            ctx.save_for_backward(*xs)
        # The state its stages read: taken here on the step's first run; in a rerun (a checkpoint
        # inside one), the enclosing rerun's.
        ctx.snapshots = _local.replay if _in_rerun() else {}
        with _autocast_as(ctx.autocast), _capturing(ctx.snapshots):
            ys, out[0] = _flatten(run(_unflatten(skeleton, list(xs))))
        if [x._version for x in xs] != versions:  # a stage not known to write its input
            raise RuntimeError("ckptlab.apply: a checkpointed segment wrote its input in place, "
                               "which its rerun would read changed")
        ctx.mark_non_differentiable(*[y for y in ys if not y.is_floating_point()])
        ctx.set_materialize_grads(False)
        return tuple(ys)

    @staticmethod
    def backward(ctx, *grads):
        kept = ([h.to(d) for h, d in zip(ctx.host, ctx.placed)] if ctx.offload
                else ctx.saved_tensors)
        caught = []
        with torch.enable_grad():
            xs, distinct = _rerun_inputs(kept, ctx.firsts, caught)
        with torch.random.fork_rng(devices=ctx.devices):
            torch.set_rng_state(ctx.cpu_rng)
            for d, state in zip(ctx.devices, ctx.cuda_rng):
                torch.cuda.set_rng_state(state, d)
            with torch.enable_grad(), _autocast_as(ctx.autocast), _rerunning(), \
                    _replaying(ctx.snapshots), torch.jit.optimized_execution(False):
                ys = _flatten(ctx.run(_unflatten(ctx.skeleton, xs)))[0]
        pairs = [(y, g) for y, g in zip(ys, grads) if y.requires_grad and g is not None]
        if pairs:
            torch.autograd.backward([y for y, _ in pairs], [g for _, g in pairs])
        grads = [None] * len(xs)
        for k, first in enumerate(distinct):
            grads[first] = caught[k]
        return (None, None, None, None, None) + tuple(grads)


class PlannedSequential(nn.Module):
    """`stages` run as `plan` says. Its parameters and buffers are the stages' own."""

    def __init__(self, stages: nn.Sequential, plan: Plan):
        super().__init__()
        self.stages = stages
        self.plan = plan
        self._facts = None

    def _stage(self, i, x):
        stage, facts = self._list[i], self._facts
        if facts.writes[i]:
            x = _copied(x)
        state = facts.state[i]
        if state is None:
            return _call(stage, x, facts.spreads[i])
        if _in_rerun():
            with state.standing_in(_local.replay[(id(self), i)]):
                return _call(stage, x, facts.spreads[i])
        captures = getattr(_local, "captures", [])
        if captures:
            snapshot = state.snapshot()
            for snapshots in captures:
                snapshots[(id(self), i)] = snapshot
        return _call(stage, x, facts.spreads[i])

    def _run(self, segments: List[Segment], x):
        for s in segments:
            x = self._segment(s, x)
        return x

    def _checkpoint(self, run, x, offload):
        xs, skeleton = _flatten(x)
        if torch.is_grad_enabled() and not offload:  # kept: the Function's graph node saves them
            _note_kept(xs)
        out = [None]
        anchor = torch.empty(0, requires_grad=True)
        ys = _Checkpoint.apply(run, skeleton, offload, out, anchor, *xs)
        return _unflatten(out[0], list(ys))

    def _segment(self, s: Segment, x):
        if s.mode == "stored":
            for i in range(s.begin, s.end):
                x = self._stage(i, x)
            return x
        if s.mode in ("checkpointed", "offloaded"):
            inner = s.inner or [Segment(s.begin, s.end, "stored")]
            return self._checkpoint(lambda v: self._run(inner, v), x, s.mode == "offloaded")
        # recompute-all: stages [begin, end - 1) under a checkpoint of their own, nested, and
        # the last stored, all under one checkpoint.
        return self._checkpoint(lambda v: self._recompute_all(s.begin, s.end, v), x, False)

    def _recompute_all(self, begin, end, x):
        if end - begin > 1:
            x = self._checkpoint(lambda v: self._recompute_all(begin, end - 1, v), x, False)
        return self._stage(end - 1, x)

    def forward(self, *inputs):
        check_frozen = getattr(self.stages, "check_frozen", None)  # a ckptlab.Chain's
        if check_frozen is not None:
            check_frozen()
        self._list = list(self.stages)
        if len(self._list) != self.plan.stage_count():
            raise PlanError(f"the plan covers {self.plan.stage_count()} stages; the model has "
                            f"{len(self._list)} now")
        x = inputs[0] if len(inputs) == 1 else inputs
        with torch.jit.optimized_execution(False):
            if (self._facts is None or self._facts.ids != [id(s) for s in self._list]
                    or self._facts.modules != _modules(self._list)):
                self._facts = _Facts(self._list, x, getattr(self.stages, "spreads_tuples", False))
                rerun = _rerun_stages(self.plan.segments)
                for i, name in enumerate(self._facts.rewrites):
                    if name is not None and i in rerun:
                        raise PlanError(
                            f"stage {i} writes its parameter {printable(name)} in place as it "
                            "runs, and the plan reruns it, which would write it again; "
                            "accepted: a plan that stores that stage")
            return self._run(self.plan.segments, x)


def _rerun_stages(segments) -> set:
    """The stages that a plan's segments run again in backward: every one not stored at the top."""
    return {i for s in segments if s.mode != "stored" for i in range(s.begin, s.end)}


def _nesting(segments):
    """The most checkpoints inside one another that `segments` run (a plan may nest
    MAX_DEPTH deep: counted without recursion)."""
    most, pending = 0, [(segments, 0)]
    while pending:
        listed, depth = pending.pop()
        most = max(most, depth)
        for s in listed:
            if s.mode == "recompute-all":
                most = max(most, depth + s.end - s.begin)
            elif s.mode != "stored":
                pending.append((s.inner, depth + 1))
    return most


def apply(model: nn.Sequential, plan_text: str) -> PlannedSequential:
    """`model`, its children the stages in order, wrapped to run as `plan_text` says.

    PlanError (a ValueError) naming what is wrong: text that is not a plan, a plan for another
    number of stages, or one that PyTorch cannot run as written (part policies, nesting past
    MAX_NESTING)."""
    if not isinstance(model, nn.Sequential):
        raise PlanError(f"apply takes an nn.Sequential, each child a stage; got "
                        f"{printable(type(model).__name__)}")
    if (type(model).forward is not nn.Sequential.forward
            and not getattr(model, "spreads_tuples", False)):
        raise PlanError(f"apply takes an nn.Sequential whose children run as nn.Sequential runs "
                        f"them, or a ckptlab.Chain; {printable(type(model).__name__)} has a "
                        "forward of its own, which a plan would not run")
    plan = parse_plan(plan_text)
    if plan.stage_count() != len(model):
        raise PlanError(f"the plan covers {plan.stage_count()} stages; the model has "
                        f"{len(model)}")
    if plan.policies:
        p = plan.policies[0]
        raise PlanError(f"the plan gives part '{printable(p.part)}' of stage {p.stages[0][0]} the "
                        f"action '{printable(p.action)}': PyTorch runs a module whole, so part "
                        "policies (built-in models' attention cores, MLPs, norms) cannot run here")
    nesting = _nesting(plan.segments)
    if nesting > MAX_NESTING:
        raise PlanError(f"the plan nests {nesting} checkpoints inside one another (a recompute-all "
                        f"segment one per stage); at most {MAX_NESTING} run here")
    return PlannedSequential(model, plan)


def _storage(t: torch.Tensor):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return (t.device, s.data_ptr()), s.nbytes()


def kept_bytes(forward: Callable[[], torch.Tensor],
               exclude: Sequence[torch.Tensor] = ()) -> Tuple[torch.Tensor, int]:
    """Runs `forward` (a model's forward and its loss) and returns its result and the bytes
    PyTorch keeps for backward when it returns: the tensors autograd saved (seen through
    saved_tensors_hooks, holding them as autograd does) and the inputs checkpoints keep, those
    still alive then (a graph that nothing reads any more is freed with what it saved, and its
    memory may hold another tensor by then), each storage counted once, less the storages of
    `exclude` (the parameters and the batch, which ckptlab counts in its baseline). Host copies
    of offloaded inputs are not counted: ckptlab's figure is device bytes."""
    saved = []

    def pack(t):
        # Detached: an output autograd saves would otherwise hold its own graph node, a cycle
        # that keeps what a graph nothing reads saved alive until Python collects it.
        t = t.detach()
        saved.append(weakref.ref(t))
        return t

    _local.kept = saved
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            result = forward()
    finally:
        _local.kept = None
    sizes = dict(_storage(t) for t in _alive(saved))
    for t in exclude:
        sizes.pop(_storage(t)[0], None)
    return result, sum(sizes.values())


def _alive(references) -> List[torch.Tensor]:
    return [t for t in (r() for r in references) if t is not None]


def describe(plan: Plan, names: Sequence[str]) -> str:
    """The plan as lines, a segment a line with its stages' names (depth first, without
    recursion: a plan may nest MAX_DEPTH deep)."""
    lines, pending = [], [(s, 0) for s in reversed(plan.segments)]
    while pending:
        s, depth = pending.pop()
        stages = ", ".join(printable(n) for n in names[s.begin:s.end])
        lines.append(f"{'  ' * depth}[{s.begin},{s.end}) {s.mode}: {stages}")
        pending.extend((inner, depth + 1) for inner in reversed(s.inner))
    return "\n".join(lines)
