"""A block's selective policy: checkpointed, the outputs of its matrix products kept.

    selective.available()        # None, or why this torch cannot run it
    guard = selective.Guard()
    checkpoint(run, *a, context_fn=guard.contexts, **selective.CHECKPOINT)
    guard.check()                # in the rerun: False where a kept output was written since
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

__all__ = ["CHECKPOINT", "Guard", "Recorder", "SAVED", "available", "unseen", "warm"]

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
    if "op_output" not in inspect.signature(checkpoint.SelectiveCheckpointContext).parameters:
        return (f"torch {torch.__version__}'s selective checkpoint shows its policy no output "
                "to fingerprint")
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


class Guard:
    """checkpoint()'s context_fn for the policy (`contexts`), which fingerprints each output it
    keeps (the sum of its elements' bits, and of every third's) so that `check`, before the
    rerun reads them, can say whether one was written in place since: torch's own version check
    misses a write through a reshape (a 3-d Linear's output), and the rerun would then read the
    values written. A guard serves one forward of one block."""

    def __init__(self):
        self.kept: List[Tuple[torch.Tensor, torch.Tensor]] = []  # (an output, its fingerprint)

    def _policy(self, ctx, func, *args, **kwargs):
        policy = torch.utils.checkpoint.CheckpointPolicy
        if not saves(func):
            return policy.PREFER_RECOMPUTE
        out = ctx.op_output
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                self.kept.append((t, _fingerprint(t)))
        return policy.MUST_SAVE

    def contexts(self):
        return torch.utils.checkpoint.create_selective_checkpoint_contexts(self._policy)

    def check(self) -> bool:
        """Whether every kept output holds what it held when kept; the guard forgets them."""
        kept, self.kept = self.kept, []
        with unseen():  # (in the rerun: not the block's operators)
            return all(torch.equal(_fingerprint(t), f) for t, f in kept)


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _fingerprint(t: torch.Tensor) -> torch.Tensor:
    """Two sums of t's elements' bits (all, and every third), on t's device."""
    with torch.no_grad(), unseen():
        bits = t.detach().reshape(-1)
        if t.is_complex() or t.element_size() not in _BITS:
            bits = bits.view(torch.uint8)
        else:
            bits = bits.view(_BITS[t.element_size()])
        return torch.stack([bits.sum(dtype=torch.int64), bits[::3].sum(dtype=torch.int64)])


def _base():
    from torch.utils._python_dispatch import TorchDispatchMode
    return TorchDispatchMode


class Recorder(_base()):
    """A dispatch mode recording, for the operators run under it while `call` names a block
    call, the outputs the policy keeps (`outputs[call]`: the tensors, held, so that their
    storages' addresses are theirs alone), the milliseconds spent in those operators
    (`saved_ms[call]`) and whether the call read a tensor's value into Python (`reads[call]`:
    .item(), a tensor in an `if`, where what it runs may depend on the data or a draw); and,
    whenever it runs, the kept outputs an operator writes in place (`written`: what a selective
    checkpoint would replay with the values written, not those it kept; torch's own check
    misses a product's output written through a reshape, as a 3-d Linear's is)."""

    def __init__(self):
        super().__init__()
        self.call: Optional[int] = None
        self.outputs: Dict[int, List[torch.Tensor]] = {}
        self.saved_ms: Dict[int, float] = {}
        self.reads: Set[int] = set()
        self.written: Set[tuple] = set()
        self._kept: Set[tuple] = set()  # the kept outputs' storages

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for value in _written_arguments(func, args, kwargs):
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                    key = _storage(t)[0]
                    if key in self._kept:
                        self.written.add(key)
        k = self.call
        if k is not None and getattr(func, "overloadpacket", None) in _READS:
            self.reads.add(k)
        if k is None or not saves(func):
            return func(*args, **kwargs)
        start = time.perf_counter()
        out = func(*args, **kwargs)
        self.saved_ms[k] = self.saved_ms.get(k, 0.0) + (time.perf_counter() - start) * 1e3
        kept = [t for t in (out if isinstance(out, (tuple, list)) else [out])
                if isinstance(t, torch.Tensor)]
        self.outputs.setdefault(k, []).extend(kept)
        self._kept.update(_storage(t)[0] for t in kept if t.layout == torch.strided)
        return out


# The operators that hand a tensor's value to Python (.item(), bool(t), int(t), t.tolist()).
_READS = frozenset(getattr(torch.ops.aten, n) for n in ("_local_scalar_dense", "item")
                   if hasattr(torch.ops.aten, n))


def warm():
    """Runs an operator under a Recorder once, so that what the first dispatch mode of a process
    loads is not timed as a block's."""
    with Recorder():
        torch.ones(2, 2).mm(torch.ones(2, 2)).add_(1).sum().item()


_WRITES: Dict[object, List[Tuple[int, str]]] = {}  # by operator: its written arguments


def _written_arguments(func, args, kwargs) -> list:
    """The arguments `func` writes in place (its schema's alias annotations with a write)."""
    if func not in _WRITES:
        schema = getattr(func, "_schema", None)
        _WRITES[func] = [(i, a.name) for i, a in enumerate(schema.arguments if schema else [])
                         if a.alias_info is not None and a.alias_info.is_write]
    return [args[i] if i < len(args) else kwargs.get(name) for i, name in _WRITES[func]]

