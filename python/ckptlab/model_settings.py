"""What a blocks profile depends on besides the blocks and the batch, and what changed since.

    settings = settings_of(model)          # kept with the profile
    changed_since(model, settings)         # "layers.1.fc.weight is float64 ..., was float32 ..."
"""

import weakref
from typing import List, Optional

from torch import nn

__all__ = ["changed_since", "settings_of"]


def settings_of(model: nn.Module) -> List[tuple]:
    """What a profile depends on besides the blocks and the batch: every module the model holds,
    its training flag (BatchNorm and dropout run otherwise in evaluation), and the dtype,
    device, shape and requires_grad of each of its parameters and buffers (after model.double()
    or with a layer frozen, the step saves other bytes), and its forward hooks (a hook added
    after the profile runs code it did not see). Plain attributes are not compared."""
    return [(weakref.ref(m), m.training,
             {n: (t.dtype, t.device, tuple(t.shape), t.requires_grad)
              for n, t in list(m._parameters.items()) + list(m._buffers.items()) if t is not None},
             (tuple(m._forward_pre_hooks), tuple(m._forward_hooks)))
            for m in model.modules()]


def changed_since(model: nn.Module, settings: List[tuple]) -> Optional[str]:
    """What changed in `model` since settings_of took `settings`, in a few words; None if
    nothing."""
    now = settings_of(model)
    if len(now) != len(settings) or any(r() is not m() for (r, *_), (m, *_) in zip(now, settings)):
        return "a module replaced, added or removed"
    names = [n for n, _ in model.named_modules()]
    for name, (_, flag, tensors, hooks), (_, was, had, hooked) in zip(names, now, settings):
        if flag != was:
            return f"{name or 'the model'} switched to {'train' if flag else 'eval'}()"
        if hooks != hooked:
            return f"{name or 'the model'}'s forward hooks added or removed"
        for n in list(tensors) + [n for n in had if n not in tensors]:
            if tensors.get(n) != had.get(n):
                return (f"{name + '.' if name else ''}{n} is {_described(tensors.get(n))}, was "
                        f"{_described(had.get(n))}")
    return None


def _described(signature) -> str:
    """A tensor's (dtype, device, shape, requires_grad) in words."""
    if signature is None:
        return "absent"
    dtype, device, shape, grad = signature
    return (f"{str(dtype).replace('torch.', '')} on {device}, shape {list(shape)}"
            f"{'' if grad else ', without gradient'}")
