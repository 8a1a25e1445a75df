"""What a blocks profile depends on besides the blocks and the batch, and what changed since.

    before = settings_of(model)            # as the profile begins
    settings = settled(before, settings_of(model))   # after the step, kept with the profile
    changed_since(model, settings)         # "layers.1.fc.weight is float64 ..., was float32 ..."
"""

import weakref
from typing import Dict, List, Optional

from torch import nn

__all__ = ["attributes_set", "changed_since", "plain_attributes", "settings_of", "settled"]

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


def attributes_set(before: Dict[str, object], module: nn.Module) -> List[str]:
    """The plain attributes of `module` added or given another value since `before` (its
    plain_attributes then)."""
    return [n for n, v in plain_attributes(module).items()
            if n not in before or (type(v), repr(v)) != (type(before[n]), repr(before[n]))]


def _global_hooks() -> tuple:
    """The forward hooks every module runs (nn.modules.module.register_module_forward_hook's)."""
    module = nn.modules.module
    return (tuple(getattr(module, "_global_forward_pre_hooks", {})),
            tuple(getattr(module, "_global_forward_hooks", {})))


def settings_of(model: nn.Module) -> List[tuple]:
    """What a profile depends on besides the blocks and the batch: every module the model holds,
    its training flag (BatchNorm and dropout run otherwise in evaluation), the dtype, device,
    shape and requires_grad of each of its parameters and buffers (after model.double() or with
    a layer frozen, the step saves other bytes), its forward hooks and, with the model's, the
    global ones (a hook added after the profile runs code it did not see), and its plain
    attributes (plain_attributes: BatchNorm's track_running_stats, a dropout's p, a
    convolution's padding)."""
    return [(weakref.ref(m), m.training,
             {n: (t.dtype, t.device, tuple(t.shape), t.requires_grad)
              for n, t in list(m._parameters.items()) + list(m._buffers.items()) if t is not None},
             (tuple(m._forward_pre_hooks), tuple(m._forward_hooks))
             + (_global_hooks() if k == 0 else ()),
             {n: (type(v), repr(v)) for n, v in plain_attributes(m).items()})
            for k, m in enumerate(model.modules())]


def settled(before: List[tuple], after: List[tuple]) -> List[tuple]:
    """`after`, its plain attributes parted into settings and state: those the profiled step
    itself updates (a counter held as an int, one it adds) are its state, named only, and
    changed_since compares the others and refuses any attribute added since."""
    if len(before) != len(after):
        return after
    return [(ref, flag, tensors, hooks,
             {n: v for n, v in attributes.items() if had[4].get(n) == v},
             {n for n, v in attributes.items() if had[4].get(n) != v})
            for (ref, flag, tensors, hooks, attributes), had in zip(after, before)]


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
        if hooks[2:] != hooked[2:]:
            return "a global forward hook (register_module_forward_hook) added or removed"
        if hooks != hooked:
            return f"{name or 'the model'}'s forward hooks added or removed"
        for n in list(tensors) + [n for n in had if n not in tensors]:
            if tensors.get(n) != had.get(n):
                return (f"{name + '.' if name else ''}{n} is {_described(tensors.get(n))}, was "
                        f"{_described(had.get(n))}")
        for n, value in plain.items():
            if attributes.get(n) != value:
                now_value = attributes[n][1] if n in attributes else "absent"
                return f"{name + '.' if name else ''}{n} is {now_value[:40]}, was {value[1][:40]}"
        added = [n for n in attributes if n not in plain and n not in (state[0] if state else ())]
        if added:
            return (f"{name + '.' if name else ''}{added[0]} is {attributes[added[0]][1][:40]}, "
                    "was absent")
    return None


def _described(signature) -> str:
    """A tensor's (dtype, device, shape, requires_grad) in words."""
    if signature is None:
        return "absent"
    dtype, device, shape, grad = signature
    return (f"{str(dtype).replace('torch.', '')} on {device}, shape {list(shape)}"
            f"{'' if grad else ', without gradient'}")
