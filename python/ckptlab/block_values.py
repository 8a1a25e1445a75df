"""What a block or a model is handed, as the blocks path (ckptlab.blocks) reads it: the tensors
in its arguments, their storages, an object holding tensors (a cache), and BlocksError."""

from typing import Dict, List, Optional

import torch
from torch import nn

from ckptlab.plan import printable
from ckptlab.planned import _storage

__all__ = ["BlocksError"]


class BlocksError(ValueError):
    """A block, a model or a batch that this path cannot take: the message names which and why."""


_DEPTH = 32  # how deep tuples, lists and dicts may nest in what a block or the model is handed


def _leaves(value, depth: int = 0) -> list:
    """What the tuples, lists and dicts in `value` hold that is none of them, in order (`value`
    itself where it is none). BlocksError where they nest deeper than _DEPTH (a list holding
    itself)."""
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, (tuple, list)):
        return [value]
    if depth >= _DEPTH:
        raise BlocksError(f"blocks: tuples, lists or dicts nested deeper than {_DEPTH} in what a "
                          "block or the model is handed; accepted: shallower ones")
    return [x for v in value for x in _leaves(v, depth + 1)]


def _tensors(value) -> List[torch.Tensor]:
    """The tensors among _leaves(value), in order."""
    return [t for t in _leaves(value) if isinstance(t, torch.Tensor)]


def _holder(value) -> Optional[str]:
    """The type's name of the first object in `value` (its tuples, lists and dicts looked into)
    that is no tensor and no module but holds a tensor in its attributes, however nested (a
    Hugging Face DynamicCache): None if there is none."""
    seen = set()

    def holds(v, depth) -> bool:  # whether v is or holds a tensor
        if isinstance(v, torch.Tensor):
            return True
        if id(v) in seen or depth >= _DEPTH or isinstance(v, nn.Module):
            return False
        seen.add(id(v))
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, (tuple, list)):
            return any(holds(e, depth + 1) for e in v)
        attributes = getattr(v, "__dict__", None)
        return isinstance(attributes, dict) and any(holds(e, depth + 1)
                                                    for e in attributes.values())

    def walk(v, depth) -> Optional[str]:
        if isinstance(v, (torch.Tensor, nn.Module)) or depth >= _DEPTH:
            return None
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, (tuple, list)):
            return next((h for h in (walk(e, depth + 1) for e in v) if h is not None), None)
        return type(v).__name__ if holds(v, depth) else None

    return walk(value, 0)


def _no_storage(layout) -> BlocksError:
    return BlocksError(f"blocks: a {printable(str(layout))} tensor is in the batch, handed to a "
                       "block or saved; accepted: strided (dense) tensors, which have a storage")


def _storages(tensors) -> Dict[tuple, int]:
    """Each tensor's storage and its bytes: BlocksError for a tensor without one (sparse)."""
    for t in tensors:
        if t.layout != torch.strided:
            raise _no_storage(t.layout)
    return dict(_storage(t) for t in tensors)


def _drew(states) -> bool:
    """Whether a random stream moved since planned._devices_rng took `states`."""
    devices, host, cuda = states
    return not torch.equal(host, torch.get_rng_state()) or any(
        not torch.equal(s, torch.cuda.get_rng_state(d)) for d, s in zip(devices, cuda))
