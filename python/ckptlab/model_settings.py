"""What a blocks profile depends on besides the blocks and the batch, and what changed since.

    before = settings_of(model)            # as the profile begins
    settings = settled(before, settings_of(model))   # after the step, kept with the profile
    changed_since(model, settings)         # "layers.1.fc.weight is float64 ..., was float32 ..."
"""

import weakref
from typing import Dict, List, Optional

from torch import nn

__all__ = ["attributes_set", "changed_since", "has_lazy", "plain_attributes", "put_back",
           "settings_of", "settled"]

_PLAIN = (bool, int, float, str, type(None))


def _plain(value) -> bool:
    """A number, string, flag or None, or a tuple of them (a convolution's padding)."""
    return isinstance(value, _PLAIN) or (
        isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value))


def plain_attributes(module: nn.Module) -> Dict[str, object]:
    """The module's plain attributes (numbers, strings, flags, None and tuples of them) but its
    training flag, by name."""
    return {n: v for n, v in vars(module).items()
            if _plain(v) and n != "training" and not n.startswith("__")}


def put_back(module: nn.Module, before: Dict[str, object], names) -> None:
    """The attributes `names` of `module` as `before` holds them (a name it lacks deleted): a
    module's vars then, or plain_attributes then."""
    for n in names:
        if n in before:
            vars(module)[n] = before[n]
        else:
            vars(module).pop(n, None)


def _signature(value) -> tuple:
    """A plain value as compared: its type and repr (True is not 1; nan is nan), an int past
    repr's digit limit by its hash."""
    try:
        return type(value), repr(value)
    except ValueError:  # an int of over 4,300 digits
        return type(value), f"an int of {value.bit_length()} bits, hash {hash(value)}"


def attributes_set(before: Dict[str, object], module: nn.Module) -> List[str]:
    """The plain attributes of `module` added, deleted or given another value since `before`
    (its plain_attributes then)."""
    now = plain_attributes(module)
    return ([n for n, v in now.items() if n not in before or _signature(v) != _signature(before[n])]
            + [n for n in before if n not in now])


def _hooks(module: nn.Module, root: bool) -> tuple:
    """The forward and backward hooks `module` runs: its own, then for the model (`root`) those
    every module runs (register_module_forward_hook's and the like), then a forward set on the
    instance (a wrapper's; not checkpoint_blocks' own)."""
    own = tuple(tuple(getattr(module, name, {})) for name in (
        "_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks"))
    every = nn.modules.module
    shared = tuple(tuple(getattr(every, name, {})) for name in (
        "_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
        "_global_backward_hooks")) if root else ()
    forward = vars(module).get("forward")
    return own, shared, None if getattr(forward, "ckptlab_checkpointed", False) else forward


def settings_of(model: nn.Module) -> List[tuple]:
    """What a profile depends on besides the blocks and the batch: every module the model holds,
    its training flag (BatchNorm and dropout run otherwise in evaluation), the dtype, device,
    shape and requires_grad of each of its parameters and buffers (after model.double() or with
    a layer frozen, the step saves other bytes), its hooks (_hooks: code the profile did not
    see), and its plain attributes (plain_attributes: BatchNorm's track_running_stats, a
    dropout's p, a convolution's padding). A lazy module's parameter has no shape yet: refuse
    such a model first (has_lazy)."""
    return [(weakref.ref(m), m.training,
             {n: (t.dtype, t.device, tuple(t.shape), t.requires_grad)
              for n, t in list(m._parameters.items()) + list(m._buffers.items()) if t is not None},
             _hooks(m, k == 0),
             {n: _signature(v) for n, v in plain_attributes(m).items()})
            for k, m in enumerate(model.modules())]


def has_lazy(model: nn.Module) -> Optional[str]:
    """The name of the first parameter or buffer of `model` not yet initialized (a LazyLinear's
    before its first forward), or None."""
    return next((n for n, t in list(model.named_parameters()) + list(model.named_buffers())
                 if isinstance(t, nn.parameter.UninitializedTensorMixin)), None)


def settled(before: List[tuple], after: List[tuple]) -> List[tuple]:
    """`before` (the model as a profile found it, and as it puts it back), its plain attributes
    parted into settings and state: those the profiled step itself changes (a counter held as
    an int, one it adds or deletes, one it gives a tensor: an auxiliary loss) are its state,
    kept as the types it held, and changed_since compares the others and refuses any attribute
    added since, or a state of another type (a flag given a string)."""
    if len(before) != len(after):
        return after
    return [(ref, flag, tensors, hooks,
             {n: v for n, v in attributes.items() if later[4].get(n) == v},
             {n: {s[0] for s in (attributes.get(n), later[4].get(n)) if s is not None}
              for n in set(attributes) | set(later[4]) if later[4].get(n) != attributes.get(n)})
            for (ref, flag, tensors, hooks, attributes), later in zip(before, after)]


def changed_since(model: nn.Module, settings: List[tuple]) -> Optional[str]:
    """What changed in `model` since settings_of took `settings`, in a few words; None if
    nothing."""
    now = settings_of(model)
    if len(now) != len(settings) or any(r() is not m() for (r, *_), (m, *_) in zip(now, settings)):
        return "a module replaced, added or removed"
    names = [n for n, _ in model.named_modules()]
    for name, (_, flag, tensors, hooks, attributes), (_, was, had, hooked, plain, *state) in zip(
            names, now, settings):
        if flag != was:
            return f"{name or 'the model'} switched to {'train' if flag else 'eval'}()"
        if hooks[1] != hooked[1]:
            return "a global hook (register_module_forward_hook and the like) added or removed"
        if hooks[0] != hooked[0]:
            return f"{name or 'the model'}'s hooks added or removed"
        if hooks[2] is not hooked[2]:
            return f"{name or 'the model'}'s forward replaced on the instance"
        for n in list(tensors) + [n for n in had if n not in tensors]:
            if tensors.get(n) != had.get(n):
                return (f"{name + '.' if name else ''}{n} is {_described(tensors.get(n))}, was "
                        f"{_described(had.get(n))}")
        for n, value in plain.items():
            if attributes.get(n) != value:
                now_value = attributes[n][1] if n in attributes else "absent"
                return f"{name + '.' if name else ''}{n} is {now_value[:40]}, was {value[1][:40]}"
        changes = state[0] if state else {}
        added = [n for n in attributes if n not in plain and n not in changes]
        if added:
            return (f"{name + '.' if name else ''}{added[0]} is {attributes[added[0]][1][:40]}, "
                    "was absent")
        retyped = [n for n in attributes if n in changes and attributes[n][0] not in changes[n]]
        if retyped:
            n = retyped[0]
            return (f"{name + '.' if name else ''}{n} is {attributes[n][1][:40]}, a "
                    f"{attributes[n][0].__name__}, where the profiled step held a "
                    f"{' or '.join(sorted(t.__name__ for t in changes[n]))}")
    return None


def _described(signature) -> str:
    """A tensor's (dtype, device, shape, requires_grad) in words."""
    if signature is None:
        return "absent"
    dtype, device, shape, grad = signature
    return (f"{str(dtype).replace('torch.', '')} on {device}, shape {list(shape)}"
            f"{'' if grad else ', without gradient'}")
