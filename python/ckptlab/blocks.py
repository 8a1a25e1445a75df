"""Models that tracing cannot cut, checkpointed by their own repeated blocks, in place.

    names = ckptlab.find_blocks(model)                     # ["encoder.layers.0", ...]
    profile = ckptlab.profile_blocks(model, inputs, loss=None, targets=())
    profile.kept_bytes(names[:4], selective=names[4:6])    # predicted, to the byte
    applied = ckptlab.checkpoint_blocks(model, names[:4], profile, selective=names[4:6])
    loss(model(*inputs), *targets).backward()              # the plain model's gradients
    applied.undo()                                         # the model as it was

For models whose forward reads its data in Python, which ckptlab.chain refuses (a layer drop
drawn with `.item()`, a mask sized by the batch's lengths, a router's rows per expert): the
model's own forward runs unchanged, and only the chosen blocks' forwards are wrapped.

Blocks (find_blocks): the children of an nn.ModuleList or nn.Sequential, two or more, all of one
class and each holding parameters (a transformer's layers, a ResNet stage's blocks), outermost
first; ModuleLists of ModuleLists (which no forward calls) are no blocks: the search goes on
inside them. A block that is, or has as a child, a stage's body (such blocks, each a module of
modules and no container, holding at least half of its parameters) gives way to those blocks,
refined in turn: a ConvNeXt, EfficientNet or Swin stage to its blocks, as timm checkpoints them,
so that a rerun holds one block's activations, not a stage's. A mixture's experts (inside a
child of a layer) and a block's own layers (torchvision's Conv2dNormActivation, a container) are
not blocks.

A profile is the model's own step (its forward and the loss, no backward) run once with every
block stored, on the batch given, leaving the model's buffers and the random streams as they
were. It records each call of a block (a block called twice is two calls): the storages of the
tensors it takes (what a checkpoint keeps), those autograd saved while it ran and still keeps
when the loss is computed, whether it drew random numbers, the buffers it updates, and its
forward's time. `kept_bytes(names)` is then what PyTorch keeps for backward with those blocks
checkpointed, each storage counted once, less the parameters, buffers and batch, with the
model's output held as a training loop holds it (`out = model(x)`: a graph only the output
reaches, a pooler the loss does not read, counts; planned.py's kept_bytes measures the same
figure where its forward returns the output beside the loss). The profile is of that step: the
next step from the same random state draws what it drew (a layer drop's), another draw may keep
more or less.

How a checkpointed block runs, selectively or not, and what it keeps: ckptlab.block_checkpoints.
Refused by name, from what the profile saw, where a rerun would not run as the first run did: a
block that writes its input in place or whose input is written after it returns (x += block(x)),
that writes a parameter, gives a buffer a new tensor (self.x = ...), reads a buffer written after
it returns (one it shares with a later block), updates a buffer it does not hold (a norm handed
to it) or draws from a torch.Generator of its own or one it is handed; a block handed an object
holding tensors (a cache, such as Hugging Face's DynamicCache, which a rerun would update again:
use_cache=False); a block called within another's call; one whose calls keep nothing for
backward; and one the profiled step did not run (a layer drop's), of which it knows nothing.
The model's plain attributes (a step counter held as an int, a flag its forward flips) are put
back after the profile's runs, as its buffers are: the profile is of the next step. A
checkpointed block's rerun reads its plain attributes as its call found them (the model may set
them around the call: layer.active = True, then False). A block that sets, adds or deletes one
of its own as it runs, or one of a module it does not hold, is refused (its rerun would do it
again, and may run otherwise); hold such state in a buffer. State held in a list or a dict is
neither followed nor put back.
A profile's bytes are those of the batch it ran: another batch's shapes keep other bytes.
"""

import contextlib
import dataclasses
import time
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ckptlab import selective
from ckptlab.block_values import (BlocksError, _drew, _holder, _leaves, _no_storage, _storages,
                                  _tensors)
from ckptlab.chains import _untouched, mean_square
from ckptlab.model_settings import (attributes_set, has_lazy, plain_attributes, settings_of,
                                    settled)
from ckptlab.plan import printable
from ckptlab.planned import _changed, _devices_rng, _storage, _values

__all__ = ["Applied", "BlockCall", "BlockProfile", "BlocksError", "find_blocks",
           "profile_blocks"]  # (checkpoint_blocks: ckptlab.block_checkpoints)


def find_blocks(model: nn.Module) -> List[str]:
    """The names of `model`'s repeated blocks (the module docstring says which), in the order
    named_modules lists them."""
    model, found = _model(model), []
    for name, module in model.named_modules():
        if _repeated(module) and not any(name == f or name.startswith(f + ".") for f in found):
            found.extend(f"{name}.{n}" if name else n for n, _ in module.named_children())
    return [name + (f".{n}" if n else "") for name in found
            for n in _body(model.get_submodule(name)) or [""]]


def _repeated(module: nn.Module) -> bool:
    """Whether `module`'s children are blocks: two or more, of one class, each holding parameters,
    in an nn.ModuleList or an nn.Sequential (not lists of lists, which no forward calls)."""
    children = list(module.children())
    return (isinstance(module, (nn.ModuleList, nn.Sequential)) and len(children) >= 2
            and len({type(c) for c in children}) == 1
            and not isinstance(children[0], (nn.ModuleList, nn.ModuleDict))
            and all(next(c.parameters(), None) is not None for c in children))


def _body(block: nn.Module) -> List[str]:
    """The names of the blocks `block` gives way to, refined in turn: those of its stage body, if
    it has one (the block itself or a child of it, repeated blocks that are modules of modules,
    not containers, holding at least half of its parameters); else none (also where a parameter
    is not initialized yet, which profile_blocks refuses by name)."""
    if has_lazy(block):
        return []
    total = sum(p.numel() for p in block.parameters())
    for name, body in [("", block), *block.named_children()]:
        children = list(body.children())
        if not _repeated(body) or not all(
                next(c.children(), None) is not None
                and not isinstance(c, (nn.Sequential, nn.ModuleList)) for c in children):
            continue
        held = {id(p): p.numel() for c in children for p in c.parameters()}
        if 2 * sum(held.values()) >= total:
            prefix = f"{name}." if name else ""
            return [prefix + n + (f".{m}" if m else "")
                    for n, child in body.named_children() for m in _body(child) or [""]]
    return []


@dataclasses.dataclass
class BlockCall:
    """One call of a block in the profiled step."""
    block: str                 # the block's name in the model
    inputs: Dict[tuple, int]   # the storages of the tensors it took, positional and keyword
    saved: Dict[tuple, int]    # those autograd saved while it ran, still kept at the loss
    draws: bool                # whether it drew random numbers
    state: Dict[str, int]      # the buffers it updated (names in the block) and their bytes
    forward_ms: float          # its forward's time, with autograd recording
    refused: Optional[str]     # why it cannot be checkpointed, if it cannot
    # Selectively checkpointed (ckptlab.selective): the storages it keeps besides its inputs,
    # the time it costs over being stored (its forward and its rerun under the policy's dispatch
    # mode, as the profile's second run timed its operators under one, the rerun without the
    # kept ones), and why it cannot be, if it cannot (then `cached` is empty).
    cached: Dict[tuple, int] = dataclasses.field(default_factory=dict)
    selective_ms: float = 0.0
    selective_refused: Optional[str] = None


@dataclasses.dataclass
class BlockProfile:
    """What the step keeps for backward, by block call (profile_blocks)."""
    blocks: List[str]           # the blocks profiled, as named
    calls: List[BlockCall]      # in the order the step made them
    outside: Dict[tuple, int]   # storages saved outside every block call, kept at the loss
    excluded: Dict[tuple, int]  # the parameters', buffers' and batch's storages
    rng_bytes: int              # the host generator's state, which a call that drew keeps
    modules: Dict[str, weakref.ref] = dataclasses.field(repr=False, default_factory=dict)
    settings: List[tuple] = dataclasses.field(repr=False, default_factory=list)

    def kept_bytes(self, checkpointed: Sequence[str] = (), selective: Sequence[str] = ()) -> int:
        """The bytes PyTorch keeps for backward when the loss is computed, with the blocks named
        in `checkpointed` checkpointed, those in `selective` selectively checkpointed and the
        others stored: BlocksError for a name not profiled, named in both, or a block that
        cannot be checkpointed so."""
        chosen, kept_outputs = self._policies(checkpointed, selective)
        kept = dict(self.outside)
        for k, call in enumerate(self.calls):
            if call.block not in chosen and call.block not in kept_outputs:
                kept.update(call.saved)
                continue
            kept.update(call.inputs)
            if call.block in kept_outputs:
                kept.update(call.cached)
            if call.draws:
                kept[("random state", k)] = self.rng_bytes
            for name, size in call.state.items():
                kept[("state", k, name)] = size
        return sum(size for key, size in kept.items() if key not in self.excluded)

    def _policies(self, checkpointed: Sequence[str], selective: Sequence[str]):
        """(the blocks checkpointed, those selectively), checked."""
        chosen, kept_outputs = self._checked(checkpointed), self._checked(selective)
        both = [n for n in self.blocks if n in chosen and n in kept_outputs]
        if both:
            raise BlocksError(f"blocks: {printable(both[0])} is named both checkpointed and "
                              "selective; accepted: one policy a block")
        for call in self.calls:
            if call.block in kept_outputs and call.selective_refused:
                raise BlocksError(f"blocks: {printable(call.block)} cannot be selectively "
                                  f"checkpointed: {call.selective_refused}")
        return chosen, kept_outputs

    def _checked(self, names: Sequence[str]) -> set:
        chosen = set()
        for name in _names(names):
            if name not in self.modules:
                raise BlocksError(f"blocks: {printable(repr(name))} is no block profiled; "
                                  f"accepted: {printable(', '.join(self.blocks))}")
            chosen.add(name)
        missed = chosen - {call.block for call in self.calls}
        if missed:
            name = next(n for n in self.blocks if n in missed)
            raise BlocksError(f"blocks: {printable(name)} did not run in the profiled step (a "
                              "layer drop's draw), so the profile knows nothing of it; accepted: "
                              "the blocks it ran (profile a step that runs this one)")
        for call in self.calls:
            if call.block in chosen and call.refused:
                raise BlocksError(f"blocks: {printable(call.block)} cannot be checkpointed: "
                                  f"{call.refused}")
        return chosen


def _names(names) -> List[str]:
    """`names` as a list: BlocksError unless it is a list or tuple of distinct strings."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise BlocksError(f"blocks: {printable(repr(names)[:200])}; accepted: a list of block "
                          "names (strings, as named_modules() names them)")
    if len(set(names)) != len(names):
        raise BlocksError(f"blocks: a name given twice in {printable(repr(names)[:200])}")
    return list(names)


def _model(model) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise BlocksError(f"blocks: the model is a {printable(type(model).__name__)}; accepted: "
                          "an nn.Module")
    return model


def _resolve(model: nn.Module, names: Optional[Sequence[str]]) -> List[Tuple[str, nn.Module]]:
    """(name, module) of each block: `names`, else find_blocks'. BlocksError for a name that is
    no module of the model, a container (never called), one module under two names, one block
    inside another, or no block."""
    found = find_blocks(model)
    if names is None:
        names = found
        if not names:
            raise BlocksError(f"blocks: {printable(type(model).__name__)} holds no repeated "
                              "blocks (two or more children of one class in an nn.ModuleList "
                              "or nn.Sequential); name them with blocks=")
    names = _names(names)
    if not names:
        raise BlocksError("blocks: blocks=[] names no block; accepted: the names of one or more "
                          "of the model's modules (default: find_blocks')")
    modules = dict(model.named_modules())
    resolved = []
    for name in names:
        if name not in modules or name == "":
            such = ", such as " + ", ".join(found[:8]) + (", ..." if len(found) > 8 else "")
            raise BlocksError(f"blocks: {printable(repr(name))} is no submodule of "
                              f"{printable(type(model).__name__)} (a module held twice is named "
                              "once, where named_modules() first meets it); accepted: the names "
                              f"named_modules() lists{printable(such) if found else ''}")
        if isinstance(modules[name], (nn.ModuleList, nn.ModuleDict)):
            raise BlocksError(f"blocks: {printable(name)} is a "
                              f"{printable(type(modules[name]).__name__)}, "
                              "which the model never calls; accepted: the modules it holds")
        resolved.append((name, modules[name]))
    if len({id(m) for _, m in resolved}) != len(resolved):
        raise BlocksError("blocks: one module is named twice, under two names")
    for name, _ in resolved:
        outer = next((o for o in names if name.startswith(o + ".")), None)
        if outer is not None:
            raise BlocksError(f"blocks: {printable(name)} is inside {printable(outer)}; "
                              "accepted: blocks none of which holds another")
    return resolved


def _forward(block: nn.Module) -> Callable:
    """What block(...) runs: a forward set on the instance (another wrapper's), else its class's."""
    return vars(block).get("forward") or type(block).forward.__get__(block)


@contextlib.contextmanager
def _forward_replaced(model: nn.Module, blocks: List[Tuple[str, nn.Module]], make: Callable):
    """Each block's forward replaced by make(name, block, its forward), put back after."""
    applied = Applied(model, blocks)
    try:
        for name, block in blocks:
            block.forward = make(name, block, _forward(block))
        yield
    finally:
        applied.undo()


def _batch(inputs, targets) -> Tuple[tuple, dict, tuple]:
    """(positional inputs, keyword inputs, targets) from what the user gave."""
    if isinstance(inputs, dict):
        args, kwargs = (), dict(inputs)
    elif isinstance(inputs, (torch.Tensor, tuple, list)):
        args, kwargs = ((inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)), {}
    else:
        args, kwargs = (), {}
    if not isinstance(targets, (torch.Tensor, tuple, list)):
        raise BlocksError(f"blocks: targets={printable(type(targets).__name__)}; accepted: a "
                          "tensor or a tuple of the loss's arguments after the output")
    targets = (targets,) if isinstance(targets, torch.Tensor) else tuple(targets)
    if not _tensors((args, kwargs)):
        raise BlocksError("blocks: inputs hold no tensor; accepted: a tensor, a tuple of the "
                          "model's positional arguments, or a dict of its keyword arguments")
    _storages(_tensors((args, kwargs, targets)))  # each with a storage: BlocksError for sparse
    if torch.is_inference_mode_enabled():
        raise BlocksError("blocks: torch.inference_mode() is on; a profile is of a training "
                          "step: profile outside it")
    if any(t.is_inference() for t in _tensors((args, kwargs, targets))):
        raise BlocksError("blocks: the batch holds an inference tensor (made under "
                          "torch.inference_mode()), which autograd cannot save; accepted: "
                          "tensors made outside it (t.clone() outside makes one)")
    return args, kwargs, targets


def _loss_of(loss: Optional[Callable[..., torch.Tensor]], output, targets: tuple):
    """The step's loss: loss(output, *targets), or the mean square of the output by default."""
    return loss(output, *targets) if loss is not None else mean_square(output)


def profile_blocks(model: nn.Module, inputs, loss: Optional[Callable[..., torch.Tensor]] = None,
                   targets=(), blocks: Optional[Sequence[str]] = None) -> BlockProfile:
    """The model's step profiled by block (the module docstring says what it records).

    inputs: a tensor, a tuple (model(*inputs)) or a dict (model(**inputs)); targets: a tensor or
    a tuple handed to the loss after the output, loss(output, *targets) (default: the mean of
    the squares of the output's first floating-point tensor). blocks: the blocks' names
    (default: find_blocks'). BlocksError naming what is wrong."""
    args, kwargs, targets = _batch(inputs, targets)
    if loss is not None and not callable(loss):
        raise BlocksError(f"blocks: loss={printable(type(loss).__name__)}; accepted: None or a "
                          "function of the output and the targets")
    resolved = _resolve(_model(model), blocks)
    lazy = has_lazy(model)
    if lazy is not None:
        raise BlocksError(f"blocks: {printable(lazy)} is not initialized yet (a lazy module's, "
                          "its shape unknown): run the model once first, then profile it")
    checkpointed = [n for n, m in _model(model).named_modules()
                    if getattr(vars(m).get("forward"), "ckptlab_checkpointed", False)]
    if checkpointed:
        raise BlocksError(f"blocks: {printable(checkpointed[0])} is checkpointed (by a "
                          "checkpoint_blocks not undone): a profile is of the plain model")
    calls: List[BlockCall] = []
    active: List[int] = []  # the call running now, if any
    inside: Dict[str, str] = {}  # a block called within another's call -> that other
    saved: List[Tuple[weakref.ref, tuple, int, Optional[int]]] = []
    unstrided: List[torch.layout] = []  # the layouts of saved tensors without a storage
    # Every call's inputs, held to the end as a checkpoint would hold them, so that no storage
    # freed in the stored step lends its address to another: keys are addresses of storages
    # alive together.
    held: List[torch.Tensor] = []  # and their outputs, which a selective policy may keep
    # The storages the calls took and returned, and autograd saved, in the order met (as
    # _record_selective's run lists its own).
    order: List[Optional[tuple]] = []
    ended: List[List[Tuple[torch.Tensor, int]]] = []  # per call: its inputs' versions at its end
    # Per call: the buffers it read but did not update, as they were at its end.
    read: List[Tuple[List[str], List[torch.Tensor], list]] = []
    model_buffers = list(model.named_buffers())
    model_modules = list(model.named_modules())
    generators = _generators(model)

    def pack(t):
        t = t.detach()  # as kept_bytes holds it: no cycle through an output's own graph node
        if t.layout != torch.strided:  # refused once the forward is over (a hook's error
            unstrided.append(t.layout)  # would reach the caller as autograd's RuntimeError)
            order.append(None)
            return t
        key, size = _storage(t)
        saved.append((weakref.ref(t), key, size, active[-1] if active else None))
        order.append(key)
        return t

    def make(name, block, forward):
        def profiled(*a, **k):
            if active:  # a block inside another's call (a module reused within it)
                inside.setdefault(name, calls[active[-1]].block)
                return forward(*a, **k)
            given = _tensors((a, k))
            held.extend(given)
            order.extend(_storage(t)[0] for t in given if t.layout == torch.strided)
            versions = [t._version for t in given]
            parameters = list(block.named_parameters())
            parameter_versions = [p._version for _, p in parameters]
            buffers = list(block.named_buffers())
            bound = [(m, dict(m._buffers)) for m in block.modules()]
            plain = [(name, m, plain_attributes(m)) for name, m in block.named_modules()]
            held_modules = {id(m) for m in block.modules()}
            others_plain = [(n, m, plain_attributes(m)) for n, m in model_modules
                            if id(m) not in held_modules]
            own = {id(b) for _, b in buffers}
            others = [(n, b) for n, b in model_buffers if id(b) not in own]
            before = _values([b for _, b in buffers])
            others_before = _values([b for _, b in others])
            states = _devices_rng(given)
            handed = [g for g in _leaves((a, k)) if isinstance(g, torch.Generator)]
            own_generators = [g for _, g in generators] + handed
            generator_states = [g.get_state() for g in own_generators]
            call = BlockCall(name, _storages(given), {}, False, {}, 0.0, None)
            calls.append(call)
            active.append(len(calls) - 1)
            start = time.perf_counter()
            try:
                out = forward(*a, **k)
            finally:
                call.forward_ms = (time.perf_counter() - start) * 1e3
                active.pop()
            returned = _tensors(out)
            held.extend(returned)
            order.extend(_storage(t)[0] for t in returned if t.layout == torch.strided)
            call.draws = _drew(states)
            call.state = {n: b.numel() * b.element_size()
                          for (n, b), c in zip(buffers, _changed([b for _, b in buffers], before))
                          if c}
            written = [n for (n, p), v in zip(parameters, parameter_versions) if p._version != v]
            foreign = [n for (n, _), c in zip(others, _changed([b for _, b in others],
                                                               others_before)) if c]
            ended.append([(t, t._version) for t in given])
            kept = [(n, b) for n, b in buffers if n not in call.state]
            read.append(([n for n, _ in kept], [b for _, b in kept],
                         _values([b for _, b in kept])))
            rebound = next((n for m, held in bound for n, b in m._buffers.items()
                            if held.get(n) is not b), None)
            flipped = next((f"{n + '.' if n else ''}{attr}" for n, m, was in plain
                            for attr in attributes_set(was, m)), None)
            foreign_set = next((f"{n + '.' if n else ''}{attr}" for n, m, was in others_plain
                                for attr in attributes_set(was, m)), None)
            holder = _holder((a, k))
            if holder is not None:
                call.refused = (f"it is handed a {printable(holder)}, an object holding tensors "
                                "(a cache), which its rerun would see as the first run left it "
                                "and update again; hand it tensors (use_cache=False)")
            elif flipped is not None:
                call.refused = (f"it sets its plain attribute {printable(flipped)} as it runs (a "
                                "counter or a flag), which its rerun would set again and run "
                                "otherwise; hold such state in a buffer")
            elif foreign_set is not None:
                call.refused = (f"it sets the plain attribute {printable(foreign_set)} of a "
                                "module it does not hold (one handed to it), which its rerun "
                                "would set again")
            elif rebound is not None:
                call.refused = (f"it gives its buffer {printable(rebound)} a new tensor as it "
                                "runs (self.x = ...), which a rerun would do again")
            elif [t._version for t in given] != versions:
                call.refused = "it writes its input in place, which its rerun would read changed"
            elif written:
                call.refused = (f"it writes its parameter {printable(written[0])} in place as it "
                                "runs, which a rerun would write again")
            elif foreign:
                call.refused = (f"it updates the model's buffer {printable(foreign[0])}, which it "
                                "does not hold (a module handed to it), so a rerun would update "
                                "it again")
            elif any(not torch.equal(g.get_state(), state)
                     for g, state in zip(own_generators, generator_states)):
                call.refused = ("it draws from a torch.Generator of its own or one it is "
                                "handed, which a rerun cannot replay")
            return out
        return profiled

    settings = settings_of(model)  # before the runs: what they change is state, not settings
    why = selective.available()  # else the policy's records, from a run before this one
    recorded = _record_selective(model, resolved, (args, kwargs, targets), loss,
                                 generators) if why is None else None
    model_tensors = list(model.parameters()) + list(model.buffers())
    batch = _tensors((args, kwargs, targets))
    with _untouched(model, batch), _generators_untouched(generators), \
            _forward_replaced(model, resolved, make), \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = model(*args, **kwargs)
        value = _loss_of(loss, output, targets)
        if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.requires_grad:
            raise BlocksError("blocks: the loss must be a one-element tensor that requires grad; "
                              f"got {printable(type(value).__name__)}")
        if unstrided:
            raise _no_storage(unstrided[0])
        outside: Dict[tuple, int] = {}
        for ref, key, size, k in saved:
            if ref() is not None:  # still kept when the loss is computed
                (outside if k is None else calls[k].saved)[key] = size
        # (Before the model's buffers are put back, which writes them: a buffer handed to each
        # block, a mask, is not written by the step.)
        for call, inputs, (names, buffers, values) in zip(calls, ended, read):
            written = [n for n, c in zip(names, _changed(buffers, values)) if c]
            if call.refused is None and any(t._version != v for t, v in inputs):
                call.refused = ("its input is written in place after it returns "
                                "(x += block(x)), which its rerun would read changed")
            elif call.refused is None and written:
                call.refused = (f"its buffer {printable(written[0])} is written after it "
                                "returns (by another block or the model), which its rerun "
                                "would read changed")
        del output, value
        after = settings_of(model)  # the step's own, before _untouched puts the model back
        held.clear()
        ended.clear()
        read.clear()
    for call in calls:
        if call.block in inside:
            call.refused = (f"it runs within {printable(inside[call.block])}'s call too, where a "
                            "checkpoint of its own would nest")
        elif not call.saved and call.refused is None:
            call.refused = "it keeps nothing for backward, so a checkpoint would save nothing"
    _fill_selective(calls, order, recorded, why)
    return BlockProfile(
        blocks=[n for n, _ in resolved], calls=calls, outside=outside,
        excluded=_storages(model_tensors + batch), rng_bytes=_storage(torch.get_rng_state())[1],
        modules={n: weakref.ref(m) for n, m in resolved},
        settings=settled(settings, after))


@dataclasses.dataclass
class _Recorded:
    """A run of the step under selective.Recorder (_record_selective)."""
    calls: List[tuple]  # per block call: (its block, its milliseconds, its kept outputs'
    #                     storages and bytes, the milliseconds that made them, whether it read a
    #                     value into Python, whether a kept output is written in place)
    order: List[tuple]  # every storage the calls took or returned, and autograd saved, in order


def _record_selective(model, resolved, batch, loss, generators) -> _Recorded:
    """A run of the step (forward and loss) under selective.Recorder, before the profile's own
    (which it warms, so that both time warm runs). Its storages are its own: `order` lists them
    as the profile's `order` and pack hook meet theirs, so that zipped the two name one
    storage."""
    args, kwargs, targets = batch
    selective.warm()
    recorder = selective.Recorder()
    calls, order, held = [], [], []

    def pack(t):
        held.append(t)  # alive to the end: its address names it alone
        order.append(_storage(t)[0] if t.layout == torch.strided else None)
        return t

    def make(name, block, forward):
        def recorded(*a, **k):
            if recorder.call is not None:
                return forward(*a, **k)
            given = _tensors((a, k))
            held.extend(given)
            order.extend(_storage(t)[0] for t in given if t.layout == torch.strided)
            recorder.call = len(calls)
            start = time.perf_counter()
            try:
                out = forward(*a, **k)
            finally:
                recorder.call = None
            calls.append((name, (time.perf_counter() - start) * 1e3))
            returned = _tensors(out)
            held.extend(returned)
            order.extend(_storage(t)[0] for t in returned if t.layout == torch.strided)
            return out
        return recorded

    with _untouched(model, _tensors(batch)), _generators_untouched(generators), \
            _forward_replaced(model, resolved, make), recorder, \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _loss_of(loss, model(*args, **kwargs), targets)  # which may write a kept output
    for k, (name, ms) in enumerate(calls):
        kept = dict(_storage(t) for t in recorder.outputs.get(k, []))
        calls[k] = (name, ms, kept, recorder.saved_ms.get(k, 0.0), k in recorder.reads,
                    any(key in recorder.written for key in kept))
    held.clear()
    return _Recorded(calls, order)  # (the recorder's tensors freed: their keys and sizes kept)


def _fill_selective(calls, order, recorded: Optional[_Recorded], why: Optional[str]):
    """Each call's selective fields, from _record_selective's run (None: `why` not), its kept
    storages named as the profile's `order` names them where the profile met them too (a call's
    input or output, or saved by autograd: what other calls or the code between them keep)."""
    if why is None and ([r[0] for r in recorded.calls] != [c.block for c in calls]
                        or len(recorded.order) != len(order)):
        why = "the step ran other blocks or saved other tensors when run again"
    first = {} if why else {k: f for k, f in zip(recorded.order, order) if k is not None}
    for k, call in enumerate(calls):
        if call.refused is not None or why is not None:
            call.selective_refused = call.refused or why
            continue
        _, recorded_ms, kept, saved_ms, reads, written = recorded.calls[k]
        call.cached = {first.get(key, ("selective", k, key)): size for key, size in kept.items()}
        # Its forward and its rerun both run every operator through a dispatch mode, as the
        # recorder's did; the rerun skips the kept ones.
        call.selective_ms = max(0.0, 2 * recorded_ms - saved_ms - call.forward_ms)
        if written:
            call.selective_refused = ("an output it would keep is written in place after it is "
                                      "made, which a selective checkpoint would not see")
        elif reads:
            call.selective_refused = ("it reads a tensor's value into Python (.item(), a tensor "
                                      "in an if), so another step may write what it keeps")
        elif not call.cached:
            call.selective_refused = ("it runs none of the operators whose outputs the policy "
                                      "keeps (ckptlab.selective.SAVED): it is checkpointed")
        if call.selective_refused:
            call.cached = {}


def _generators(model: nn.Module) -> List[Tuple[nn.Module, torch.Generator]]:
    """The torch.Generators the model's modules hold as attributes."""
    return [(m, g) for m in model.modules() for g in vars(m).values()
            if isinstance(g, torch.Generator)]


@contextlib.contextmanager
def _generators_untouched(generators):
    states = [(g, g.get_state()) for _, g in generators]
    try:
        yield
    finally:
        for g, state in states:
            g.set_state(state)


class Applied:
    """The checkpointed blocks of a model (checkpoint_blocks): `undo()` puts their forwards back."""

    def __init__(self, model: nn.Module, blocks: List[Tuple[str, nn.Module]]):
        self.model = model
        self.blocks = [n for n, _ in blocks]  # those checkpointed, selectively or not
        self.predicted = None  # what ckptlab.optimize found (a BlocksAnswer), where it applied it
        self._before = [(block, vars(block).get("forward")) for _, block in blocks]

    def undo(self):
        """The blocks' forwards as they were before (another wrapper's included); twice is once."""
        for block, forward in self._before:
            vars(block).pop("forward", None)
            if forward is not None:
                block.forward = forward
        self._before = []
