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
ckptlab.apply replays them on a rerun.
"""

import contextlib
import dataclasses
import os
import tempfile
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import fx, nn
import torch.fx.experimental.proxy_tensor
import torch.utils.checkpoint
from torch.fx.experimental.proxy_tensor import make_fx

from ckptlab.plan import printable
from ckptlab.planned import _storage

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
    would leave a traced tensor; a tensor a forward updates in place), `parameters`' values (a
    copy on the host while inside) and the random streams as they were before, whatever ran
    inside."""
    devices = sorted({t.device.index or 0 for t in batch if t.is_cuda})
    with torch.no_grad():
        saved = [(b, b.clone()) for b in model.buffers()]
        held = [(m, dict(m._buffers), {k: (v, v.clone()) for k, v in vars(m).items()
                                       if isinstance(v, torch.Tensor)})
                for m in model.modules()]
        values = [(p, p.detach().to("cpu", copy=True)) for p in parameters]
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
                    v.copy_(before)
        for t, before in notes:
            for k in set(vars(t)) - before:
                del vars(t)[k]


def _copies(batch: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The batch copied, each copy requiring grad as its tensor does: what a model runs on while
    it is cut, so that a forward writing its input (x.mul_(2)) leaves the caller's as it was."""
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in batch]


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


# The grad mode each traced op ran under, in node.meta: make_fx traces below autograd and
# records none (on 1.13 and on 2.x alike), so a trace would differentiate what the model computes
# under torch.no_grad() or inference_mode (a teacher, a scale, a parametrization's power method).
_GRAD = "ckptlab_grad_enabled"
# On a detach _detach_what_needs_no_grad inserts: the op reading it (no cut falls between them).
_READ_BY = "ckptlab_read_by"


@contextlib.contextmanager
def _grad_mode_recorded():
    """Every node make_fx creates inside notes torch.is_grad_enabled() as its op is dispatched
    (the user's grad mode: dispatch below autograd leaves it as it was)."""
    tracer = torch.fx.experimental.proxy_tensor.PythonKeyTracer
    original = tracer.create_node

    def create_node(self, *args, **kwargs):
        node = original(self, *args, **kwargs)
        node.meta[_GRAD] = torch.is_grad_enabled()
        return node

    tracer.create_node = create_node
    try:
        yield
    finally:
        tracer.create_node = original


@contextlib.contextmanager
def _reentrant_checkpoints_inlined():
    """torch.utils.checkpoint's reentrant form (1.13's default; Hugging Face's and DenseNet's
    memory_efficient use it) called as the function it wraps: its forward runs under no_grad,
    which the trace would take for code without gradients, where its gradients are its
    function's. The chain's plan decides what is recomputed instead."""
    function = torch.utils.checkpoint.CheckpointFunction
    original = function.apply
    function.apply = lambda run, preserve_rng_state, *args: run(*args)
    try:
        yield
    finally:
        function.apply = original


def _detach_what_needs_no_grad(graph_module: fx.GraphModule, batch: Sequence[torch.Tensor]):
    """Every op reads detached each floating-point tensor that needs no gradient in the model's
    step, and an op the model ran without gradients reads all its inputs so. A value needs none
    where the model computed it without gradients (torch.no_grad(), inference_mode: a teacher, a
    scale, a parametrization's power method), or from tensors that need none (a shifted-window
    attention's mask built from its shapes; a batch tensor that does not require grad): it
    requires no grad in the model, and the chain keeps it so whatever it runs under. A
    checkpoint's outputs all require grad, and so do the floating-point tensors a profile hands
    a stage: an op reading one of those would save what the model's does not (a masked_fill its
    mask, 441,784 bytes over swin_t's shifted windows). Inside a no-grad region nothing builds a
    graph or is saved, as in the model, traced or loaded from the chain's file."""
    graph = graph_module.graph
    nodes = list(graph.nodes)
    base = _bases(nodes)
    off = {n for n in nodes if n.op == "call_function" and not n.meta.get(_GRAD, True)}
    # What a write in place without gradients returns is the tensor it wrote, and that keeps its
    # graph (a clamp_ under no_grad on an activation: gradients pass through as if it were not
    # there): whatever reads the result reads that tensor.
    for n in off:
        if _written(n) and _aliases(n):
            n.replace_all_uses_with(_aliased(n))
    written_with_grad = {base.get(w, w) for n in nodes
                         if n.op == "call_function" and n not in off for w in _written(n)}
    # An op run with gradients whose result only such regions read (a scale computed from an
    # activation, nothing else reading it) runs without them too: its graph, which no gradient
    # crosses, would live only until its result died.
    for n in reversed(nodes):
        if (n.op == "call_function" and n not in off and n.users and not _written(n)
                and (_schema(n) is not None or n.target.__name__ == "getitem")
                and base.get(n, n) not in written_with_grad and all(u in off for u in n.users)):
            off.add(n)
            n.meta[_GRAD] = False
    # What each op reads that requires no grad, as autograd itself says: a replay of the step
    # under the model's grad modes, the batch and the parameters requiring grad as the model's
    # do (a frozen backbone's activations need no gradient: the chain keeps none of them; it is
    # cut for that freezing, Chain.check_frozen).
    replay = _Replay(graph_module)
    replay.run(*_copies(batch))
    for n in nodes:
        if n.op != "call_function":
            continue
        detached = {}  # one detach per input read, just before the op (no cut between them)

        def read(m: fx.Node) -> fx.Node:
            if m.op == "get_attr":
                if not isinstance(getattr(graph_module, m.target), torch.Tensor):
                    return m
            elif not _is_tensor_meta(m.meta.get("tensor_meta")):
                return m  # a tuple or a number
            # Not the base of a write in place with gradients, which gives it a graph (a buffer
            # made of zeros that an activation is copied into, buf[:, :8] = h).
            if n not in off and (m not in replay.reads_no_grad[n]
                                 or base.get(m, m) in written_with_grad):
                return m
            if m not in detached:
                with graph.inserting_before(n):
                    detached[m] = graph.call_function(torch.ops.aten.detach.default, (m,))
                detached[m].meta = {_GRAD: False, _READ_BY: n,
                                    "tensor_meta": m.meta.get("tensor_meta")}
            return detached[m]

        n.args = fx.node.map_arg(n.args, read)
        n.kwargs = fx.node.map_arg(n.kwargs, read)
    graph_module.recompile()


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


class _Replay(fx.Interpreter):
    """Runs a traced step, each op under the grad mode it was traced in, noting the
    floating-point inputs of each op that require no grad as it reads them (after any in-place
    write that made them require it)."""

    def __init__(self, graph_module: fx.GraphModule):
        super().__init__(graph_module)
        self.reads_no_grad = {}

    def run_node(self, n: fx.Node):
        if n.op != "call_function":
            return super().run_node(n)
        self.reads_no_grad[n] = {m for m in n.all_input_nodes
                                 if isinstance(self.env[m], torch.Tensor)
                                 and self.env[m].is_floating_point()
                                 and not self.env[m].requires_grad}
        with torch.set_grad_enabled(n.meta.get(_GRAD, True)):
            return super().run_node(n)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"


def _is_tensor_meta(meta) -> bool:
    return meta is not None and hasattr(meta, "shape") and hasattr(meta, "dtype")


def _bytes(meta) -> int:
    numel = 1
    for d in meta.shape:
        numel *= int(d)
    return numel * torch.empty((), dtype=meta.dtype).element_size()


def _schema(node: fx.Node):
    return getattr(node.target, "_schema", None) if node.op == "call_function" else None


def _written(node: fx.Node) -> List[fx.Node]:
    """The nodes whose tensors `node` writes in place (its arguments annotated `a!`)."""
    schema = _schema(node)
    if schema is None or not schema.is_mutable:
        return []
    written = []
    for i, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
        if isinstance(value, fx.Node):
            written.append(value)
    return written


class _Trace:
    """The traced step as ops in order, with what each cut between two of them would carry."""

    def __init__(self, graph_module: fx.GraphModule):
        graph = graph_module.graph
        self.placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.output = next(n for n in graph.nodes if n.op == "output")
        self.ops = [n for n in graph.nodes if n.op == "call_function"]
        index = {n: i for i, n in enumerate(self.ops)}
        for p in self.placeholders:
            index[p] = -1
        index[self.output] = len(self.ops)
        self.base = _bases(self.placeholders + self.ops)
        # Over positions p (a cut before ops[p], 1 <= p < len(ops)): the bytes alive, and
        # whether a cut is allowed. A value is alive at p when made before ops[p] and read at
        # or after it; its bytes are its base's, counted once.
        count = len(self.ops)
        self.alive_bytes = [0] * (count + 1)
        self.alive_count = [0] * (count + 1)
        allowed = [True] * (count + 1)
        allowed[0] = False
        span = {}  # base -> (made, last read) over every value viewing it
        # reach[p]: the last position that a tensor made by an op before ops[p] is alive at.
        self.reach = [0] * (count + 1)
        for n in self.placeholders + self.ops:
            if not n.users:
                continue
            made, last = index[n], max(index[u] for u in n.users)
            for p in range(made + 1, last + 1):
                self.alive_count[p] += 1
            meta = n.meta.get("tensor_meta")
            if not _is_tensor_meta(meta):  # a tuple alive across a cut: not allowed there
                for p in range(made + 1, last + 1):
                    allowed[p] = False
                continue
            if n.op != "placeholder":
                self.reach[made + 1] = max(self.reach[made + 1], last)
            b = self.base[n]
            if b.op == "get_attr":  # a view of a parameter or buffer: read where it is used
                for p in range(made + 1, last + 1):
                    allowed[p] = False
            lo, hi = span.get(b, (made, last))
            span[b] = (min(lo, made), max(hi, last))
        for b, (made, last) in span.items():
            meta = b.meta.get("tensor_meta")
            size = _bytes(meta) if _is_tensor_meta(meta) else 0
            for p in range(made + 1, last + 1):
                self.alive_bytes[p] += size
        for p in range(1, count + 1):
            self.reach[p] = max(self.reach[p], self.reach[p - 1])
        for n in self.ops:  # a detach of what grad mode left off, and the op reading it
            if _READ_BY in n.meta:
                for p in range(index[n] + 1, index[n.meta[_READ_BY]] + 1):
                    allowed[p] = False
        for n in self.ops:  # a write to a tensor an earlier stage made: no cut in between
            for w in _written(n):
                b = self.base.get(w)
                if b is None or b.op == "get_attr":
                    continue  # a parameter or buffer: state, updated where the op is
                for p in range(index[b] + 1, index[n] + 1):
                    allowed[p] = False
        # A buffer the step writes in place (state): every op reading it up to its last write is
        # in one stage, which a rerun runs from the stand-ins of the state it updates, reading
        # what the step's first run read (spectral_norm's power method reads v early and writes
        # u and v later; an average read, then updated).
        first_read, last_write = {}, {}  # by the tensor's identity (read under several names)
        for n in self.ops:
            for w in _writes(n):
                b = self.base.get(w, w)
                if b.op == "get_attr":
                    last_write[id(_attribute(b))] = index[n]
        for n in self.ops:
            for a in n.all_input_nodes:
                b = self.base.get(a, a)
                if b.op == "get_attr" and id(_attribute(b)) in last_write:
                    first_read.setdefault(id(_attribute(b)), index[n])
        for target, last in last_write.items():
            for p in range(first_read.get(target, last) + 1, last + 1):
                allowed[p] = False
        self.allowed = allowed
        self.index = index

    def alive_at(self, p: int) -> List[fx.Node]:
        """The values made before ops[p] and read at or after it, in the order made."""
        return [n for n in self.placeholders + self.ops[:p]
                if any(self.index[u] >= p for u in n.users)]


def _attribute(node: fx.Node):
    """What a get_attr node reads: the owning graph module's attribute at its target."""
    value = node.graph.owning_module
    for part in node.target.split("."):
        value = getattr(value, part)
    return value


def _bases(nodes: List[fx.Node]) -> Dict[fx.Node, fx.Node]:
    """The tensor each of `nodes` (in order) views, itself where it is no view: a getitem of a
    tuple of views, or an op returning an alias of an argument (a view of its input, what an
    out= op wrote), views what that argument views."""
    base = {}
    for n in nodes:
        source = None
        if n.op == "call_function" and n.target.__name__ == "getitem":
            parent = n.args[0]
            if _aliases(parent):
                source = _aliased(parent)
        elif _aliases(n):
            source = _aliased(n)
        base[n] = base.get(source, source) if source is not None else n
    return base


def _aliased(node: fx.Node) -> Optional[fx.Node]:
    """The argument that what `node` returns is an alias of (by the schema's alias sets: `self`
    for a view, `out` for an out= op), else its first tensor argument."""
    schema = _schema(node)
    sets = set().union(*(r.alias_info.before_set for r in schema.returns if r.alias_info))
    for i, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.before_set & sets:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
            if isinstance(value, fx.Node):
                return value
    return next((a for a in node.args if isinstance(a, fx.Node)), None)


def _aliases(node: fx.Node) -> bool:
    schema = _schema(node)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _prune(graph: fx.Graph):
    """Drops the ops the step neither needs nor runs for their effects, found last first (the
    detach nodes autograd leaves in a trace, a computation whose result nothing reads), and runs
    those it keeps for their effects alone without gradients: their graph would live only until
    their result died, which a stage's profile does not see. An op is needed where something
    needed reads what it returns, or where it writes in place a tensor that something needed
    reads after it. It is kept for its effects where it writes in place a parameter, a buffer, an
    input or a tensor something kept reads after it (a BatchNorm whose output nothing reads still
    updates its statistics); where it draws random numbers (so that later draws are the
    model's); or where it is no ATen op, which is not judged."""
    nodes = list(graph.nodes)
    base = _bases([n for n in nodes if n.op in ("placeholder", "call_function")])

    def key(n):  # the tensor a value views; a module's tensor by identity (read repeatedly)
        b = base.get(n, n)
        return ("attribute", id(_attribute(b))) if b.op == "get_attr" else b

    needed, kept = set(), set()
    read_by_needed, read_by_kept = set(), set()  # keys of what the ops after the one looked at read
    for n in reversed(nodes):
        if n.op in ("call_function", "get_attr"):
            writes = [base.get(w, w) for w in _writes(n)] if n.op == "call_function" else []
            is_needed = (any(u in needed for u in n.users)
                         or any(key(w) in read_by_needed for w in writes))
            is_kept = (is_needed or any(u in kept for u in n.users)
                       or any(w.op != "call_function" or key(w) in read_by_kept for w in writes)
                       or (n.op == "call_function" and n.target.__name__ != "getitem"
                           and (_schema(n) is None or _draws_random_numbers(n))))
            if not is_kept:
                graph.erase_node(n)
                continue
            if not is_needed and n.op == "call_function":
                n.meta[_GRAD] = False
        else:
            is_needed = True  # the output (and the batch)
        kept.add(n)
        read_by_kept.update(key(a) for a in n.all_input_nodes)
        if is_needed:
            needed.add(n)
            read_by_needed.update(key(a) for a in n.all_input_nodes)


# Ops that update their buffer arguments in training without their schema saying so (1.13's
# native_batch_norm: BatchNorm's running statistics).
_UNDECLARED_WRITES = {"native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm"}
# Ops drawing random numbers that no overload of takes a Generator (as models/torchscript.cc).
_RANDOM_WITHOUT_GENERATOR = {"dropout", "dropout_", "feature_dropout", "feature_dropout_",
                             "alpha_dropout", "alpha_dropout_", "feature_alpha_dropout",
                             "feature_alpha_dropout_", "native_dropout", "rand_like",
                             "randn_like", "randint_like", "rrelu", "rrelu_"}


def _writes(node: fx.Node) -> List[fx.Node]:
    """What `node` writes in place: what its schema says it writes, and for the ops that update
    buffers without saying so (_UNDECLARED_WRITES), the buffers it reads."""
    written = _written(node)
    if node.target.__name__.split(".")[0] in _UNDECLARED_WRITES:
        for a in node.all_input_nodes:  # a buffer, or the detach of one it reads
            if a.op == "call_function" and a.target is torch.ops.aten.detach.default:
                a = a.args[0]
            if a.op == "get_attr":
                written.append(a)
    return written


def _draws_random_numbers(node: fx.Node) -> bool:
    packet = node.target.overloadpacket
    if packet.__name__ in _RANDOM_WITHOUT_GENERATOR:
        return True
    return any("Generator" in str(a.type) for name in packet.overloads()
               for a in getattr(packet, name)._schema.arguments)


def _cuts(trace: _Trace, max_stages: Optional[int]) -> List[int]:
    """The positions cut at. A plateau is a run of allowed positions alike in bytes alive, each
    sharing a tensor it keeps alive with the next (a ResNet block's input, alive while the block
    computes); plateaus with no more bytes than the allowed positions either side get a cut at
    their last position, where the stage before it holds an op that is not a view. Past
    `max_stages`, the cuts carrying the most bytes are dropped first."""
    allowed = [p for p in range(1, len(trace.ops)) if trace.allowed[p] and trace.alive_count[p]]
    value = [trace.alive_bytes[p] for p in allowed]
    chosen, last, k = [], 0, 0
    while k < len(allowed):
        j = k
        while (j + 1 < len(allowed) and value[j + 1] == value[k]
               and trace.reach[allowed[j]] >= allowed[j + 1]):
            j += 1
        p = allowed[j]
        if ((k == 0 or value[k - 1] >= value[k]) and (j + 1 == len(allowed)
                                                      or value[j + 1] >= value[k])
                and any(_computes(n) for n in trace.ops[last:p])):
            chosen.append(p)
            last = p
        k = j + 1
    if chosen and not any(_computes(n) for n in trace.ops[last:]):
        chosen.pop()
    if max_stages is not None and len(chosen) + 1 > max_stages:
        chosen = sorted(sorted(chosen, key=lambda p: (trace.alive_bytes[p], p))[:max_stages - 1])
    return chosen


def _computes(node: fx.Node) -> bool:
    """Whether `node` makes a tensor of its own (not a view, not an element of a tuple)."""
    return not _aliases(node) and node.target.__name__ != "getitem"


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
        `path` is replaced, not followed). Leaves the buffers and the random streams as they
        were. OSError naming the path where it cannot be written."""
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
                torch.jit.save(traced, f)
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
