"""Any PyTorch model as a chain of stages, cut automatically, for ckptlab's planners.

    chain = ckptlab.chain(model, inputs, loss=None, targets=())
    value = chain(*inputs, *targets)          # loss(model(*inputs), *targets): the same value
    value.backward()                          # the same gradients, in model's own parameters
    planned = ckptlab.apply(chain, plan_text) # and run as a ckptlab plan says

How: the step (the model's forward, then the loss) is traced by running it once on the example
batch (make_fx: ATen ops, with the shapes, and the branches of Python control flow, that this
batch took; as torch.jit.trace, the chain is specialised to them: another shape, or data that
would take another branch, needs a chain of its own). The trace is then cut between ops, as
finely as the computation allows, where the tensors alive across the cut carry few bytes:
  - a cut carries only tensors (never a tuple an op returned whole), and any number of them
    (a U-Net's skips, an attention mask every block reads, the targets for the loss);
  - no stage writes in place a tensor that an earlier stage made or a view of one (so that a
    rerun of a stage reads what its first run read); the model's buffers are state, and are
    updated by the stage that updates them (BatchNorm's running statistics); a cut carries no
    view of a parameter or buffer (a stage reads them itself, so a buffer is written only by
    the stage holding it);
  - among the cuts allowed, those where the bytes alive are a local minimum (a transformer's
    residual stream between its attention and its MLP; a ResNet between and inside its blocks);
    `max_stages` keeps the cheapest of them.
What the model computes without gradients (torch.no_grad(), inference_mode) runs without them
in the chain, and every op reads detached what needs no gradient in the model's step (a mask
made from shapes, such a region's results), whatever a checkpoint or a profile makes require
grad; what the step neither needs nor runs for its effects is dropped (docs/torchscript.md).
Stage i takes the tensors alive across the cut before it, one argument each (stage 0 the batch:
inputs, then targets), and returns those alive across the cut after it: a tensor where there is
one, else a tuple; the last stage returns the loss. Stages hold the model's own parameters and
buffers (the same tensors: an optimizer over model.parameters() trains through the chain, tied
weights stay one tensor, BatchNorm's statistics update in the model), registered under their
names in the model. Random ops (dropout) draw from PyTorch's generators as the model does;
ckptlab.apply replays them on a rerun. What each traced op writes, aliases and needs, and the
bytes alive between ops, are ckptlab.trace's.
"""

import contextlib
import dataclasses
import os
import tempfile
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx

from ckptlab.model_settings import plain_attributes, put_back
from ckptlab.plan import printable
from ckptlab.planned import _storage
from ckptlab.trace import (_bases, _copies, _cuts, _detach_what_needs_no_grad,
                           _grad_mode_recorded, _prune, _reentrant_checkpoints_inlined, _Trace,
                           _written)

__all__ = ["Chain", "ChainError", "chain"]


_MAX_RANKS = 1 << 16  # as the chain files' reader accepts (models/torchscript.cc)


class ChainError(ValueError):
    """A model, batch or loss that cannot be made a chain: the message names which and why."""


def _first_floating(value) -> Optional[torch.Tensor]:
    """The first floating-point tensor in `value`: a tensor, or tuples, lists, dicts and
    dataclass-like objects (a `to_tuple` method, or dataclass fields) holding some, in order."""
    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() else None
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (tuple, list)):
        items = list(value)
    elif hasattr(value, "to_tuple"):
        items = list(value.to_tuple())
    elif dataclasses.is_dataclass(value):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    else:
        return None
    for item in items:
        found = _first_floating(item)
        if found is not None:
            return found
    return None


def mean_square(output) -> torch.Tensor:
    """The default loss: the mean of the squares of the output's first floating-point tensor."""
    found = _first_floating(output)
    if found is None:
        raise ChainError("ckptlab.chain: the model's output holds no floating-point tensor for "
                         "the default loss (the mean of its squares); pass loss=")
    return found.square().mean()


@contextlib.contextmanager
def _untouched(model: nn.Module, batch: Sequence[torch.Tensor],
               parameters: Sequence[torch.Tensor] = ()):
    """The model's buffers (the tensors its modules hold and their values), its modules' other
    tensor attributes (what a forward pre-hook sets: the old spectral_norm's weight, which a trace
    would leave a traced tensor; a tensor a forward updates in place), their plain attributes (a
    step counter held as an int, a flag the forward flips: those it adds removed, and whatever
    an attribute held before it held a plain value), `parameters`' values (a copy on the host
    while inside) and the random streams as they were before, whatever ran inside. (A tensor
    is written back only where it changed: an expanded one cannot be written, nor was.)"""
    devices = sorted({t.device.index or 0 for t in batch if t.is_cuda})
    with torch.no_grad():
        saved = [(b, b.clone()) for b in model.buffers()]
        held = [(m, dict(m._buffers), {k: (v, v.clone()) for k, v in vars(m).items()
                                       if isinstance(v, torch.Tensor)})
                for m in model.modules()]
        values = [(p, p.detach().to("cpu", copy=True)) for p in parameters]
    plain = [(m, dict(vars(m)), set(plain_attributes(m))) for m in model.modules()]
    # What a tensor object carries besides its data: 1.13's make_fx notes its proxies there,
    # which would stay (copy.deepcopy of the model then fails on them).
    tensors = list(model.parameters()) + list(model.buffers())
    notes = [(t, set(vars(t))) for t in tensors]
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        with torch.no_grad():
            for b, before in saved:
                if not torch.equal(b, before):
                    b.copy_(before)
            for p, before in values:
                p.copy_(before)
            for m, buffers, attributes in held:
                m._buffers.clear()
                m._buffers.update(buffers)
                for k in [k for k, v in vars(m).items() if isinstance(v, torch.Tensor)]:
                    if k not in attributes:
                        delattr(m, k)
                for k, (v, before) in attributes.items():
                    vars(m)[k] = v
                    if not torch.equal(v, before):
                        v.copy_(before)
        for t, before in notes:
            for k in set(vars(t)) - before:
                del vars(t)[k]
        for m, before, was_plain in plain:
            put_back(m, before, set(plain_attributes(m)) | was_plain)


def _same_step(model: nn.Module, chain: "Chain", batch: Sequence[torch.Tensor], inputs: int,
               loss: Callable[..., torch.Tensor], names: Dict[int, str],
               written: Sequence[torch.Tensor]):
    """ChainError where a step of `chain` on `batch` does not give the model's: its loss, and
    every parameter's and input's gradient (bitwise on a CPU; to 1e-5 of the largest on a GPU,
    whose kernels need not repeat their sums), None where the model's is None. The model's step
    then does what a trace of its operators cannot see: a custom autograd.Function's own
    backward, a hook on a tensor, autograd.grad inside the forward. Leaves the gradients, the
    buffers and the random streams as they were."""
    params = list(model.parameters())
    before = [p.grad for p in params]

    def run(forward):
        for p in params:
            p.grad = None
        xs = _copies(batch)
        with _untouched(model, batch, written):
            value = forward(xs)
            value.backward()
        return ([value.detach()] + [p.grad for p in params]
                + [x.grad for x in xs if x.requires_grad])

    labels = ["loss"] + [f"gradient of {names.get(id(p), 'a parameter')}" for p in params] + [
        f"gradient of input {k}" for k, x in enumerate(batch) if x.requires_grad]
    try:
        try:
            plain = run(lambda xs: loss(model(*xs[:inputs]), *xs[inputs:]))
        except RuntimeError as e:  # no gradient to take: nothing to plan for
            raise ChainError("ckptlab.chain: the model's loss does not backpropagate on the "
                             f"example batch: {printable(str(e).splitlines()[0])}") from e
        try:
            chained = run(lambda xs: chain(*xs))
        except RuntimeError as e:
            raise ChainError("ckptlab.chain: a step of the chain does not run as the model's: "
                             f"{printable(str(e).splitlines()[0])}; the model does what a trace "
                             "of its operators cannot see") from e
    finally:
        for p, grad in zip(params, before):
            p.grad = grad
    exact = not any(t.is_cuda for t in list(batch) + params)
    for label, a, b in zip(labels, plain, chained):
        if a is not None and b is not None and (a.is_sparse or b.is_sparse):  # sparse=True
            a, b = a.to_dense(), b.to_dense()
        if a is None or b is None:
            same = a is None and b is None
        elif exact:
            same = a.shape == b.shape and torch.equal(a, b)
        else:
            same = a.shape == b.shape and bool(
                ((a - b).abs().max() <= 1e-5 * max(a.abs().max().item(), 1.0)).item())
        if not same:
            apart = ("None in the model" if a is None else "None in the chain" if b is None
                     else "shapes differ" if a.shape != b.shape
                     else f"{(a.double() - b.double()).abs().max().item():.3g} apart")
            raise ChainError(
                f"ckptlab.chain: a step of the chain does not give the model's {printable(label)}"
                f" ({apart}): the model does what a trace of its operators cannot see, such as "
                "a custom autograd.Function, a hook on a tensor or autograd.grad inside its "
                "forward; accepted: a model whose gradients are its operators'")


def _failing_module(error: BaseException, names: Dict[int, str], model: nn.Module) -> str:
    """The innermost of model's modules whose code was running when `error` was raised."""
    found = model
    tb = error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and id(owner) in names:
            found = owner
        tb = tb.tb_next
    name = names[id(found)]
    return f"{printable(name or 'the model')} ({printable(type(found).__name__)})"


def _trace(model, batch, inputs, loss) -> Tuple[fx.GraphModule, List[torch.Tensor]]:
    """The traced step, and the parameters its forward writes in place (Embedding's max_norm),
    which every later run here puts back."""
    names = {id(m): name for name, m in model.named_modules()}

    def step(*values):
        return loss(model(*values[:inputs]), *values[inputs:])

    # The first run restores every parameter a forward writes (a refused model is left as it
    # was); the later ones those it wrote.
    params = list(model.parameters())
    versions = [p._version for p in params]
    buffers = {name: b for name, b in model.named_buffers()}
    with _untouched(model, batch, params):
        try:
            value = step(*_copies(batch))
        except ChainError:  # the default loss's
            raise
        except Exception as e:  # the model's own error, before any tracing
            raise ChainError(f"ckptlab.chain: {_failing_module(e, names, model)} fails on the "
                             f"example batch: {printable(type(e).__name__)}: "
                             f"{printable(str(e).splitlines()[0] if str(e) else '')}") from e
        if not (isinstance(value, torch.Tensor) and value.dim() == 0
                and value.is_floating_point()):
            raise ChainError("ckptlab.chain: the loss must return a floating-point scalar tensor; "
                             f"it returned {printable(_describe(value))}")
        rebound = next((name for name, b in model.named_buffers() if buffers.get(name) is not b),
                       None)
        if rebound is not None:
            raise ChainError(f"ckptlab.chain: the model gives its buffer {printable(rebound)} a "
                             "new tensor while it runs (self.x = ...), which a trace of its "
                             "operators cannot follow; accepted: buffers updated in place "
                             "(x.mul_(m).add_(...), x.copy_(...))")
    written = [p for p, v in zip(params, versions) if p._version != v]
    with _untouched(model, batch, written):
        try:
            with _grad_mode_recorded(), _reentrant_checkpoints_inlined():
                graph_module = make_fx(step)(*_copies(batch))
        except Exception as e:
            raise ChainError(f"ckptlab.chain: {_failing_module(e, names, model)} cannot be traced "
                             f"by running it: {printable(type(e).__name__)}: "
                             f"{printable(str(e).splitlines()[0] if str(e) else '')}") from e
    _prune(graph_module.graph)
    with _untouched(model, batch, written):
        _detach_what_needs_no_grad(graph_module, batch)
    return graph_module, written


def _refuse_parameter_writes(graph_module: fx.GraphModule, names: Dict[int, str]):
    """ChainError naming a parameter the step writes in place (a forward that scales or clamps
    its own weight; Embedding's max_norm, whose second renormalisation of a row rounds it
    again): a rerun would write it again, where state in buffers has stand-ins."""
    nodes = list(graph_module.graph.nodes)
    base = _bases([n for n in nodes if n.op in ("placeholder", "call_function")])
    for n in nodes:
        if n.op != "call_function":
            continue
        for w in _written(n):
            b = base.get(w, w)
            tensor = getattr(graph_module, b.target, None) if b.op == "get_attr" else None
            if isinstance(tensor, nn.Parameter):
                name = printable(names.get(id(tensor), b.target))
                raise ChainError(f"ckptlab.chain: the model writes its parameter {name} in place "
                                 f"({printable(n.target.__name__)}) while it runs, which a "
                                 "rerun would write again; accepted: parameters that only the "
                                 "optimizer changes (state in buffers, as BatchNorm keeps its "
                                 "statistics)")


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"


def _stage(model_names: Dict[int, str], graph_module: fx.GraphModule, ops: List[fx.Node],
           inputs: List[fx.Node], outputs: List[fx.Node]) -> fx.GraphModule:
    """A module running `ops`, taking `inputs` and returning `outputs` (one tensor, or a tuple),
    holding the tensors the ops read by their names in the model (or `constantK` for a tensor
    that is not the model's)."""
    graph = fx.Graph()
    env = {}
    attributes = {}
    for n in inputs:
        env[n] = graph.placeholder(n.name)

    def value(n: fx.Node) -> fx.Node:
        if n not in env:  # a parameter, buffer or constant, read here: one name per tensor
            tensor = getattr(graph_module, n.target)
            name = model_names.get(id(tensor))
            if name is None:
                name = next((k for k, t in attributes.items() if t is tensor),
                            f"constant{len(attributes)}")
            attributes[name] = tensor
            env[n] = graph.get_attr(name)
        return env[n]

    for n in ops:
        env[n] = graph.node_copy(n, value)
    graph.output(env[outputs[0]] if len(outputs) == 1 else tuple(env[n] for n in outputs))
    return fx.GraphModule(attributes, graph, class_name="Stage")


class Chain(nn.Sequential):
    """The stages of a model, in order (ckptlab.chain makes one). Called with the batch (inputs,
    then targets), it returns the loss; each stage is handed what the one before returned,
    spread where it is a tuple. Its parameters and buffers are the model's own. A chain for
    `ranks` > 1 is one rank's step: it takes that rank's share of the rows (share)."""

    spreads_tuples = True  # how it hands a stage what the one before returned (ckptlab.apply)
    example = None  # the batch ckptlab.chain was given, which save writes beside the stages
    ranks = 1  # the data-parallel ranks that share the example's rows (ckptlab.chain's ranks=)
    # The model's parameters and buffers that no stage reads: memory it holds all the same,
    # which save writes beside the stages for the sweep to count.
    unread = ()
    frozen = ()  # (name, parameter, its requires_grad when the chain was cut): check_frozen

    def forward(self, *batch):
        self.check_frozen()
        return _run(self, batch)

    def check_frozen(self):
        """ChainError where a parameter is frozen (or not) otherwise than when the chain was cut:
        the chain keeps nothing for backward of what a frozen parameter's activations need no
        gradient for, as the model then does (ckptlab.apply calls it too)."""
        for name, p, requires_grad in self.frozen:
            if p.requires_grad != requires_grad:
                raise ChainError(f"ckptlab.chain: the chain was cut with {printable(name)}"
                                 f"{' not' if requires_grad else ''} frozen, and it is"
                                 f"{'' if requires_grad else ' not'} now; accepted: the "
                                 "parameters frozen as when it was cut (cut it again after "
                                 "freezing or unfreezing)")

    def share(self, rank: int, batch=None) -> tuple:
        """Rank `rank`'s rows of `batch` (default: the example): rows [rank b, (rank + 1) b) of
        each tensor, b its rows / ranks, as data parallel with `ranks` ranks hands them out."""
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.ranks:
            raise ChainError(f"Chain.share: rank={printable(repr(rank))}; accepted: a whole "
                             f"number in 0..{self.ranks - 1}")
        return _share(self.example if batch is None else tuple(batch), rank, self.ranks)

    def save(self, path: str):
        """Writes the chain, with the batch it was cut on, for ckptlab: `--models=chain:file=PATH`
        plans and measures it as it does the models of its zoo (docs/torchscript.md). Each
        stage is traced (torch.jit.trace) on the tensors it takes from rank 0's share of that
        batch; the batch is the top module's buffers ckptlab_batch_0, 1, ... (ckptlab's steps
        take copies, the floating-point ones requiring grad, as every batch of ckptlab's does),
        and the ranks sharing it its buffer ckptlab_ranks (`--nproc` must be that). The file
        is written whole or not at all: a temporary file beside it, renamed over it (a link at
        `path` is replaced, not followed), and records this torch's release, which a sweep
        built against an older LibTorch refuses to read. Leaves the buffers and the random
        streams as they were. OSError naming the path where it cannot be written."""
        batch = self.example
        if batch is None:
            raise ChainError("Chain.save: this chain holds no batch; accepted: a chain "
                             "ckptlab.chain made, which keeps the batch it was cut on")
        first = self.share(0)
        with _untouched(self, first), torch.jit.optimized_execution(False):
            # Each stage alone, so that its signature is its own (traced whole, a stage would
            # lose the tensors it passes on unchanged), then the archive over them.
            stages, x = [], first
            for stage in self:
                args = x if type(x) is tuple else (x,)
                stages.append(torch.jit.trace(stage, args, check_trace=False))
                x = stage(*args)
            archive = _Archive(stages, batch, self.ranks, self.unread)
            traced = torch.jit.trace(archive, first, check_trace=False)
        folder = os.path.dirname(os.path.abspath(path))
        fd, temporary = tempfile.mkstemp(prefix=".chain-", suffix=".pt", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                # The writer's torch, which a sweep built against an older LibTorch refuses.
                torch.jit.save(traced, f, _extra_files={"ckptlab_torch": torch.__version__})
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise

    def kept_per_stage(self, *batch) -> List[int]:
        """The bytes each stage keeps for backward in a plain step on `batch`: the tensors
        autograd saves while it runs and still holds when the loss is made, each storage counted
        once (for the stage saving it first), less the parameters', buffers' and the batch's
        (ckptlab's activation bytes). Runs the forward once, leaving the buffers and the random
        streams as they were."""
        saved = []  # (stage, a weak reference to what it saved)
        at = [0]

        def pack(t):
            t = t.detach()  # as kept_bytes holds it: no cycle through its graph node
            saved.append((at[0], weakref.ref(t)))
            return t

        def stages():
            for i, stage in enumerate(self):
                at[0] = i
                yield stage

        with _untouched(self, batch), torch.autograd.graph.saved_tensors_hooks(pack,
                                                                               lambda t: t):
            loss = _run(stages(), batch)
        seen = {_storage(t)[0] for t in list(self.parameters()) + list(self.buffers())
                + list(batch)}
        kept = [0] * len(self)
        for i, reference in saved:
            t = reference()
            if t is not None and _storage(t)[0] not in seen:
                key, size = _storage(t)
                seen.add(key)
                kept[i] += size
        del loss
        return kept


class _Archive(nn.Module):
    """What Chain.save traces: the stages as children "0", "1", ..., the batch and the ranks
    sharing it as buffers, and the model's parameters and buffers no stage reads as its own
    (ckptlab_unread_0, 1, ...)."""

    def __init__(self, stages: Sequence[nn.Module], batch: Sequence[torch.Tensor], ranks: int,
                 unread: Sequence[torch.Tensor]):
        super().__init__()
        for i, stage in enumerate(stages):
            self.add_module(str(i), stage)
        for i, t in enumerate(batch):
            self.register_buffer(f"ckptlab_batch_{i}", t.detach().clone())
        self.register_buffer("ckptlab_ranks", torch.tensor(ranks, dtype=torch.int64))
        for i, t in enumerate(unread):
            if isinstance(t, nn.Parameter):
                self.register_parameter(f"ckptlab_unread_{i}", t)
            else:
                self.register_buffer(f"ckptlab_unread_{i}", t)

    def forward(self, *batch):
        return _run(self.children(), batch)


def _share(batch, rank: int, ranks: int) -> tuple:
    rows = [t.shape[0] // ranks for t in batch]
    return tuple(t[b * rank:b * (rank + 1)] for t, b in zip(batch, rows))


def _run(stages, batch):
    """The stages in turn on `batch`, each handed what the one before returned, spread where it
    is a tuple."""
    x = batch
    for stage in stages:
        x = stage(*x) if type(x) is tuple else stage(x)
    return x


def chain(model: nn.Module, inputs, loss: Optional[Callable[..., torch.Tensor]] = None,
          targets=(), max_stages: Optional[int] = None, ranks: int = 1) -> Chain:
    """`model` as a Chain of stages, cut automatically (this module's docstring says how).

    inputs: a tensor or a tuple of tensors, the model called as model(*inputs); targets: a tensor
    or a tuple of tensors handed to the loss after the output, loss(output, *targets), which
    returns the scalar trained on (default: the mean of the squares of the output's first
    floating-point tensor). max_stages: at most that many stages (None: every cut found).
    ranks: the data-parallel ranks that share the batch's rows, each stepping rows
    [rank b, (rank + 1) b) (b: the rows / ranks); the chain is cut on rank 0's rows and steps
    any rank's (Chain.share), and its file runs under `--nproc=ranks`. Each rank's loss is its
    rows' alone: data parallel averages the ranks' gradients, which are the whole batch's where
    the loss is a mean over rows and no op mixes rows (BatchNorm normalises each rank's rows
    by their own statistics, as DDP without SyncBatchNorm does).
    Cutting runs the model's forward three times (plainly, traced, and the trace replayed to
    see what needs no gradient) and a step of the model and of the chain, which must agree: the
    same loss and gradients, bitwise on a CPU. It runs on copies of the batch, and leaves the
    model's buffers, gradients and the random streams as they were.
    ChainError naming the module and the reason where the model cannot be traced by running it,
    where the chain's step is not the model's (a custom autograd.Function, a tensor hook,
    autograd.grad in the forward), where the model writes a parameter while it runs, or names
    what is wrong with the batch, the loss, max_stages or ranks."""
    batch_inputs = _tensors("inputs", inputs)
    batch_targets = _tensors("targets", targets)
    if max_stages is not None and (isinstance(max_stages, bool) or not isinstance(max_stages, int)
                                   or max_stages < 1):
        raise ChainError(f"ckptlab.chain: max_stages={printable(repr(max_stages))}; accepted: "
                         "None or a whole number of at least 1")
    batch = batch_inputs + batch_targets
    for t in batch:
        if t.layout != torch.strided:
            raise ChainError(f"ckptlab.chain: the batch holds a {printable(str(t.layout))} "
                             "tensor; accepted: strided (dense) tensors")
        if t.dim() == 0 or t.shape[0] == 0:
            raise ChainError(f"ckptlab.chain: the batch holds {printable(_describe(t))}, which "
                             "has no rows; accepted: tensors of one row or more (their first "
                             "dimension)")
    if (isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= _MAX_RANKS
            or not all(t.dim() > 0 and t.shape[0] % ranks == 0 and t.shape[0] >= ranks
                       for t in batch)):
        raise ChainError(f"ckptlab.chain: ranks={printable(repr(ranks))} for a batch of "
                         f"{printable(', '.join(_describe(t) for t in batch))}; accepted: a "
                         f"whole number in 1..{_MAX_RANKS} dividing every tensor's first "
                         "dimension")
    graph_module, written = _trace(model, _share(batch, 0, ranks), len(batch_inputs),
                                   loss or (lambda out: mean_square(out)))
    names = {}
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        names.setdefault(id(tensor), name)
    for module_name, module in model.named_modules():  # tensors held as plain attributes
        for key, tensor in vars(module).items():
            if isinstance(tensor, torch.Tensor):
                names.setdefault(id(tensor), f"{module_name}.{key}" if module_name else key)
    _refuse_parameter_writes(graph_module, names)
    trace = _Trace(graph_module)
    cuts = [0] + _cuts(trace, max_stages) + [len(trace.ops)]
    stages = []
    for begin, end in zip(cuts, cuts[1:]):
        stage_inputs = trace.placeholders if begin == 0 else trace.alive_at(begin)
        stage_outputs = (list(trace.output.args[:1]) if end == len(trace.ops)
                         else trace.alive_at(end))
        stages.append(_stage(names, graph_module, trace.ops[begin:end], stage_inputs,
                             stage_outputs))
    result = Chain(*stages)
    result.example = tuple(batch)
    result.ranks = ranks
    held = {id(t) for t in list(result.parameters()) + list(result.buffers())}
    result.unread = [t for _, t in list(model.named_parameters()) + list(model.named_buffers())
                     if id(t) not in held]
    result.frozen = tuple((names.get(id(p), "a parameter"), p, p.requires_grad)
                          for p in result.parameters())
    _same_step(model, result, _share(batch, 0, ranks), len(batch_inputs),
               loss or (lambda out: mean_square(out)), names, written)
    return result


def _tensors(what: str, value) -> List[torch.Tensor]:
    values = [value] if isinstance(value, torch.Tensor) else value
    if not isinstance(values, (tuple, list)) or not all(isinstance(v, torch.Tensor)
                                                        for v in values):
        raise ChainError(f"ckptlab.chain: {what} must be a tensor or a tuple of tensors; got "
                         f"{printable(_describe(value))}")
    return list(values)
