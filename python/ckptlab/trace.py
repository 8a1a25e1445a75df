"""The model's step as an fx graph, and what each of its ops does: the vocabulary ckptlab.chain
cuts it with (chains.py says how a model becomes a chain).

- what an op writes in place (its schema, and the ops that update buffers without saying so),
  what it aliases and which tensor a view's storage is (`_bases`);
- the grad mode each op was traced under (`_GRAD`), which ops read detached what needs no
  gradient in the model's step (`_detach_what_needs_no_grad`), and what a step neither needs nor
  runs for its effects (`_prune`);
- the bytes alive between consecutive ops, and the cuts among them (`_Trace`, `_cuts`).
"""

import contextlib
from typing import Dict, List, Optional, Sequence

import torch
from torch import fx
import torch.fx.experimental.proxy_tensor
import torch.utils.checkpoint


def _copies(batch: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The batch copied, each copy requiring grad as its tensor does: what a model runs on while
    it is cut, so that a forward writing its input (x.mul_(2)) leaves the caller's as it was."""
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in batch]


# The grad mode each traced op ran under, in node.meta: make_fx traces below autograd and
# records none (on 1.13 and on 2.x alike), so a trace would differentiate what the model computes
# under torch.no_grad() or inference_mode (a teacher, a scale, a parametrization's power method).
_GRAD = "ckptlab_grad_enabled"
# On a detach _detach_what_needs_no_grad inserts: the op reading it (no cut falls between them).
_READ_BY = "ckptlab_read_by"


@contextlib.contextmanager
def _grad_mode_recorded():
    """Every node make_fx creates inside notes torch.is_grad_enabled() as its op is dispatched
    (the user's grad mode: dispatch below autograd leaves it as it was), and the model's detaches
    are kept: newer torches trace `x.detach()` as aten.alias, which a replay would differentiate,
    so an alias made inside a detach is recorded as aten.detach; an in-place `x.detach_()`, of
    which such a trace keeps nothing, is refused (RuntimeError, which chain names)."""
    tracer = torch.fx.experimental.proxy_tensor.PythonKeyTracer
    original = tracer.create_node
    detaching = []  # per detach call in progress: whether it has made its detach node

    def create_node(self, kind, target, *args, **kwargs):
        if detaching and target is torch.ops.aten.alias.default:
            target = torch.ops.aten.detach.default
        node = original(self, kind, target, *args, **kwargs)
        node.meta[_GRAD] = torch.is_grad_enabled()
        if detaching and target is torch.ops.aten.detach.default:
            detaching[-1] = True
        return node

    class Detaches(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func not in (torch.Tensor.detach, torch.detach, torch.Tensor.detach_):
                return func(*args, **(kwargs or {}))
            detaching.append(False)
            try:
                result = func(*args, **(kwargs or {}))
            finally:
                made = detaching.pop()
            if not made and func is torch.Tensor.detach_:
                raise RuntimeError("x.detach_() in the forward, which this torch's trace does "
                                   "not record; accepted: x = x.detach()")
            return result

    tracer.create_node = create_node
    try:
        with Detaches():
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
    # What each op reads that requires no grad, as autograd itself says: a replay of the step
    # under the model's grad modes, the batch and the parameters requiring grad as the model's
    # do (a frozen backbone's activations need no gradient: the chain keeps none of them; it is
    # cut for that freezing, Chain.check_frozen).
    replay = _Replay(graph_module)
    reached = _reached(replay.run(*_copies(batch)))
    # An op whose result requires grad but no gradient from the loss reaches (read only where
    # no gradient flows: a shape, ones_like, a region without gradients) runs without them, and
    # whatever reads its result reads it detached: its graph would live only until its result
    # died, which a stage's profile does not see (a linear and tanh whose output only a mask's
    # shape reads kept 192 bytes in the memory model that the chain's step freed).
    # Not what anything writes in place, with gradients or without: a view of a tensor written
    # after it gets a new autograd node when next read (the one noted is then never reached).
    written = {base.get(w, w) for n in nodes if n.op == "call_function" for w in _written(n)}
    dead = {n for n in nodes
            if n in replay.grad_fns and reached.isdisjoint(replay.grad_fns[n]) and n not in off
            and (_schema(n) is not None or n.target.__name__ == "getitem")
            and base.get(n, n) not in written and not any(_written(u) for u in n.users)}
    for n in dead:
        off.add(n)
        n.meta[_GRAD] = False
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
            if n not in off and m not in dead and (m not in replay.reads_no_grad[n]
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


def _grad_fns(value) -> list:
    """The autograd nodes of a tensor, or of the tensors of a tuple or list, that have one."""
    tensors = value if isinstance(value, (tuple, list)) else [value]
    return [t.grad_fn for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def _reached(loss) -> set:
    """The autograd nodes a backward from `loss` (the step's result) runs through."""
    reached, todo = set(), _grad_fns(loss)
    while todo:
        node = todo.pop()
        if node in reached:
            continue
        reached.add(node)
        todo.extend(next_node for next_node, _ in node.next_functions if next_node is not None)
    return reached


class _Replay(fx.Interpreter):
    """Runs a traced step, each op under the grad mode it was traced in, noting the
    floating-point inputs of each op that require no grad as it reads them (after any in-place
    write that made them require it), and the autograd nodes of the tensors each op returns,
    as they were made."""

    def __init__(self, graph_module: fx.GraphModule):
        super().__init__(graph_module)
        self.reads_no_grad = {}
        self.grad_fns = {}

    def run_node(self, n: fx.Node):
        if n.op != "call_function":
            return super().run_node(n)
        self.reads_no_grad[n] = {m for m in n.all_input_nodes
                                 if isinstance(self.env[m], torch.Tensor)
                                 and self.env[m].is_floating_point()
                                 and not self.env[m].requires_grad}
        with torch.set_grad_enabled(n.meta.get(_GRAD, True)):
            result = super().run_node(n)
        try:
            made = _grad_fns(result)
        except RuntimeError:  # a view made without gradients of a base written with them
            made = []
        if made:
            self.grad_fns[n] = made
        return result


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
