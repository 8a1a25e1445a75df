"""checkpoint_blocks: a profile's blocks (ckptlab.blocks) checkpointed in place.

A checkpointed block runs PyTorch's non-reentrant checkpoint (torch.utils.checkpoint, without
its own random state) around the block's forward, its keyword arguments and outputs as the
model passes them, and keeps besides its inputs:
  - the random streams as the call found them, where the call drew (dropout, a layer drop), so
    that the rerun draws the same; the host's generator's state (5,056 bytes) is host memory;
  - a copy of the buffers it updates (BatchNorm's statistics), which the rerun reads and
    updates in place of the model's, so that the model's state is updated once, as the plain
    step updates it.
A block checkpointed selectively (ckptlab.selective: PyTorch's selective checkpoint, where
this torch runs it) keeps the outputs of its matrix products, convolutions and attention too, and
its rerun runs only the other operators; the profile runs the step once more, first, to see
those outputs (its `cached` storages) and what the policy costs in time (its `selective_ms`:
PyTorch runs every operator of the block through a Python dispatch mode, twice), and refuses the
policy for a block one of whose kept outputs is written in place (a Linear's output under
.mul_()), whose rerun would read what was written, and for one that reads a tensor's value into
Python (.item(), a tensor in an `if`), where another step may run, and write, otherwise. Its graph
runs backward once: a second backward through it (retain_graph=True) or a double backward
(create_graph=True) raises PyTorch's error; checkpoint such a block instead.
checkpoint_blocks refuses a profile of another model, or of this one before a module was
replaced, train()/eval() switched, a hook (a module's or a global one) added or removed, a
forward set on an instance, a parameter's or buffer's dtype, device, shape or requires_grad
changed, or a module's plain attribute (a number, string or flag: BatchNorm's
track_running_stats) changed or added, but for those the profiled step itself changes (a
counter), which only keep their types. A model with a lazy module not yet run is refused.
"""

import contextlib
from typing import Callable, List, Sequence

import torch
from torch import nn
import torch.utils.checkpoint

from ckptlab import selective
from ckptlab.block_values import BlocksError, _drew, _tensors
from ckptlab.blocks import Applied, BlockProfile, _forward, _model
from ckptlab.model_settings import changed_since, plain_attributes, put_back
from ckptlab.plan import printable
from ckptlab.planned import _changed, _devices_rng, _note_kept, _State, _values

__all__ = ["checkpoint_blocks"]


def _checkpointed(name: str, block: nn.Module, forward: Callable, policy: str) -> Callable:
    """`forward` under a non-reentrant checkpoint ("selective": ckptlab.selective's), with the
    random streams and the state its first run read replayed in its rerun (the module docstring
    says what it keeps)."""
    buffers = list(block.buffers())
    modules = list(block.modules())

    def wrapped(*a, **k):
        if not torch.is_grad_enabled():
            return forward(*a, **k)
        # Its plain attributes as its first run reads them, read so by its rerun too (the model
        # may set them around the call: layer.active = True, then False after it).
        seen = [plain_attributes(m) for m in modules]
        guard = selective.Guard() if policy == "selective" else None
        options = dict(selective.CHECKPOINT, context_fn=guard.contexts) if guard else {}
        given = _tensors((a, k))
        states = [_devices_rng(given)]
        # The buffers as the first run found them: those it updates are kept for the rerun (a
        # call a profile never saw, a layer drop's, is handled as any other).
        before = _values(buffers)
        replay = []  # (the buffers' state, their values before the first run), once it has run
        ran = []

        def run(*ra):  # the keyword arguments are the block's, never checkpoint()'s
            if ran:  # a rerun: the first, the step's own, is over
                if guard is not None and not guard.check():
                    raise BlocksError(f"blocks: {printable(name)}: an output its selective "
                                      "checkpoint kept was written in place after (not in the "
                                      "profiled step), and its rerun would read what was "
                                      "written: checkpoint it instead")
                devices, host, cuda = states[0]
                with torch.random.fork_rng(devices=devices), contextlib.ExitStack() as stack:
                    if host is not None:  # the first run drew: the rerun draws the same
                        torch.set_rng_state(host)
                        for d, s in zip(devices, cuda):
                            torch.cuda.set_rng_state(s, d)
                    if replay:  # (its copies are not the block's: unseen by a selective one)
                        with selective.unseen() if options else contextlib.nullcontext():
                            stack.enter_context(replay[0].standing_in(replay[1]))
                    stack.enter_context(_attributes_as(modules, seen))
                    return forward(*ra, **k)
            ran.append(True)
            return forward(*ra, **k)

        out = torch.utils.checkpoint.checkpoint(run, *a, use_reentrant=False,
                                                preserve_rng_state=False, **options)
        updated = [(b, value) for b, (_, value), c
                   in zip(buffers, before, _changed(buffers, before)) if c]
        del before
        if updated:
            state = _State(block, {id(b) for b, _ in updated})
            replay[:] = [state, state.taken({id(b): v for b, v in updated})]
        if not _drew(states[0]):
            states[0] = (states[0][0], None, [])  # nothing to replay: not kept
        _note_kept(list(given) + (replay[1] if replay else [])
                   + ([states[0][1]] if states[0][1] is not None else []))
        return out

    wrapped.ckptlab_checkpointed = True
    return wrapped


@contextlib.contextmanager
def _attributes_as(modules: List[nn.Module], seen: List[dict]):
    """The modules' plain attributes set to `seen` (plain_attributes of each), and put back."""
    now = [plain_attributes(m) for m in modules]
    try:
        for m, attributes, current in zip(modules, seen, now):
            put_back(m, attributes, attributes.keys() | current.keys())
        yield
    finally:
        for m, attributes, current in zip(modules, seen, now):
            put_back(m, current, attributes.keys() | current.keys())


def checkpoint_blocks(model: nn.Module, names: Sequence[str], profile: BlockProfile,
                      selective: Sequence[str] = ()) -> Applied:
    """The blocks `names` checkpointed in place, and those in `selective` selectively
    (ckptlab.selective), as `profile` (of this model, profile_blocks) saw them run: the model's
    own forward runs unchanged, the plain model's gradients and state after a step, bitwise on a
    CPU. BlocksError naming a block not profiled, one that cannot be checkpointed so, one
    already checkpointed, or a profile of another model."""
    if not isinstance(profile, BlockProfile):
        raise BlocksError(f"blocks: profile= takes profile_blocks' answer; got "
                          f"{printable(type(profile).__name__)}")
    chosen, kept_outputs = profile._policies(names, selective)
    modules = dict(_model(model).named_modules())

    resolved = []
    for name in sorted(chosen | kept_outputs, key=profile.blocks.index):
        block = modules.get(name)
        if block is None or profile.modules[name]() is not block:
            raise BlocksError(f"blocks: the profile is of another model: "
                              f"{printable(name)} is not the module it profiled")
        if getattr(vars(block).get("forward"), "ckptlab_checkpointed", False):
            raise BlocksError(f"blocks: {printable(name)} is checkpointed already (by a "
                              "checkpoint_blocks not undone)")
        resolved.append((name, block))
    changed = changed_since(model, profile.settings)
    if changed is not None:
        raise BlocksError(f"blocks: the model changed since it was profiled "
                          f"({printable(changed)}); profile it again")
    applied = Applied(model, resolved)
    for name, block in resolved:
        block.forward = _checkpointed(name, block, _forward(block),
                                      "selective" if name in kept_outputs else "checkpointed")
    return applied
