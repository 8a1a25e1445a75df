"""A block's selective policy: checkpointed, the outputs of its matrix products kept.

    selective.available()        # None, or why this torch cannot run it
    checkpoint(run, *a, context_fn=selective.contexts, **selective.CHECKPOINT)
    with Recorder() as r: ...    # r.outputs[call]: what the policy keeps; r.written

The policy is PyTorch's selective activation checkpoint (torch.utils.checkpoint's
create_selective_checkpoint_contexts): in a checkpointed block the outputs of the operators
SAVED names (matrix products, convolutions, attention) are kept from the forward to the rerun,
which reads them instead of running those operators again; every other operator (pointwise,
norms, softmax) runs again. Those outputs are routed through the saved-tensor hooks around the
block (respect_saved_tensors_hooks), so kept_bytes sees them as it sees what autograd saves;
a torch without that option is refused (`available`).

Recorder is the profile's view of the same policy, from the same SAVED: a dispatch mode that
records each output the policy would keep, the time of the operators it would not rerun, and
what is written in place.
"""

import inspect
import time
from typing import Dict, List, Optional, Set, Tuple

import torch

from ckptlab.planned import _storage

__all__ = ["CHECKPOINT", "Recorder", "SAVED", "available", "contexts", "unseen"]

_NAMES = ("mm", "addmm", "bmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
          "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
          "_efficient_attention_forward")
# The operators whose outputs the policy keeps (those this torch has).
SAVED = frozenset(getattr(torch.ops.aten, n) for n in _NAMES if hasattr(torch.ops.aten, n))
# checkpoint()'s options under the policy.
CHECKPOINT = {"respect_saved_tensors_hooks": True}


def available() -> Optional[str]:
    """None where this torch runs the policy, else why not, in a few words."""
    checkpoint = torch.utils.checkpoint
    if not hasattr(checkpoint, "create_selective_checkpoint_contexts"):
        return f"torch {torch.__version__} has no selective activation checkpoint"
    if "respect_saved_tensors_hooks" not in inspect.signature(checkpoint.checkpoint).parameters:
        return (f"torch {torch.__version__}'s selective checkpoint keeps its tensors past the "
                "saved-tensor hooks that count them")
    return None


def unseen():
    """A context in which operators run past the dispatch modes around it (a selective
    checkpoint's, which would count the wrapper's own copies among the block's operators)."""
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


def _effectful(func) -> bool:
    """Whether the policy is overruled for `func`: an effect torch always caches."""
    check = getattr(torch.utils.checkpoint, "_is_cacheable_effect", None)
    return bool(check is not None and check(func))


def saves(func) -> bool:
    """Whether a selectively checkpointed block keeps `func`'s outputs."""
    packet = getattr(func, "overloadpacket", None)
    return packet in SAVED or _effectful(func)


def _policy(ctx, func, *args, **kwargs):
    policy = torch.utils.checkpoint.CheckpointPolicy
    return policy.MUST_SAVE if saves(func) else policy.PREFER_RECOMPUTE


def contexts():
    """checkpoint()'s context_fn for the policy."""
    return torch.utils.checkpoint.create_selective_checkpoint_contexts(_policy)


def _base():
    from torch.utils._python_dispatch import TorchDispatchMode
    return TorchDispatchMode


class Recorder(_base()):
    """A dispatch mode recording, for the operators run under it while `call` names a block
    call, the outputs the policy keeps (`outputs[call]`: the tensors, held) and the milliseconds
    spent in those operators (`saved_ms[call]`); and, whenever it
    runs, the storages an operator writes in place (`written`: what a selective checkpoint
    would replay with the values written, not those it kept; torch's own check misses a
    product's output written through a reshape, as a 3-d Linear's is)."""

    def __init__(self):
        super().__init__()
        self.call: Optional[int] = None
        self.outputs: Dict[int, List[torch.Tensor]] = {}
        self.saved_ms: Dict[int, float] = {}
        self.written: Set[tuple] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for value in _written_arguments(func, args, kwargs):
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                    self.written.add(_storage(t)[0])
        k = self.call
        if k is None or not saves(func):
            return func(*args, **kwargs)
        start = time.perf_counter()
        out = func(*args, **kwargs)
        self.saved_ms[k] = self.saved_ms.get(k, 0.0) + (time.perf_counter() - start) * 1e3
        self.outputs.setdefault(k, []).extend(
            t for t in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(t, torch.Tensor))
        return out


_WRITES: Dict[object, List[Tuple[int, str]]] = {}  # by operator: its written arguments


def _written_arguments(func, args, kwargs) -> list:
    """The arguments `func` writes in place (its schema's alias annotations with a write)."""
    if func not in _WRITES:
        schema = getattr(func, "_schema", None)
        _WRITES[func] = [(i, a.name) for i, a in enumerate(schema.arguments if schema else [])
                         if a.alias_info is not None and a.alias_info.is_write]
    return [args[i] if i < len(args) else kwargs.get(name) for i, name in _WRITES[func]]

