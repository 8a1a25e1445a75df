"""Stages that user models hold, for the tests that compose chains of them: aliased and view
outputs, tuples, in-place writes, state, random numbers, empty tensors, integer outputs.

Imported by testing/python_apply_test.py and testing/torchscript_crosscheck_test.py, and by the
TorchScript files testing/sweep_exact_test.sh writes. Every one scripts (torch.jit.script).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor, nn


class Linear(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) * 0.5)
        self.bias = nn.Parameter(torch.randn(width) * 0.5)

    def forward(self, x):
        return torch.tanh(x @ self.weight + self.bias)


class Counter(nn.Module):
    """State updated in place on every training step."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.ones(()))

    def forward(self, x):
        if self.training:
            self.count.add_(1.0)
        return x * self.count


class RunningMean(nn.Module):
    """State a kernel writes without a new version of it: BatchNorm's statistics, functional."""

    def __init__(self, width: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(width))
        self.register_buffer("var", torch.ones(width))

    def forward(self, x):
        return torch.nn.functional.batch_norm(x, self.mean, self.var, training=self.training)


class Twice(nn.Module):
    """One tensor returned twice: a tuple of aliases."""

    def forward(self, x):
        y = torch.tanh(x)
        return (y, y)


class PassThrough(nn.Module):
    """The stage's input returned as its output."""

    def forward(self, x):
        return (x, torch.tanh(x))


class TupleJoin(nn.Module):
    def forward(self, t: Tuple[Tensor, Tensor]):
        return t[0] * t[1] + t[0]


class TupleScale(nn.Module):
    """A tuple taken whole beside an argument with a default: nn.Sequential hands it the tuple."""

    def forward(self, t: Tuple[Tensor, Tensor], scale: Optional[Tensor] = None):
        if scale is None:
            return t[0] * 0.5 + t[1]
        return (t[0] + t[1]) * scale


class Concat(nn.Module):
    """Its input joined to a learned row and mixed back: the gradient it hands back is a slice
    of the concatenation's, not contiguous, which a BatchNorm before it reduces over."""

    def __init__(self, width: int):
        super().__init__()
        self.row = nn.Parameter(torch.randn(1, width))
        self.weight = nn.Parameter(torch.randn(2 * width, width) * 0.5)

    def forward(self, x):
        return torch.cat([x, self.row.expand(x.size(0), -1)], 1) @ self.weight


class View(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


class Transposed(nn.Module):
    def forward(self, x):
        return x.t()


class EmptySlice(nn.Module):
    def forward(self, x):
        return (torch.relu(x), x[:, :0])


class EmptyJoin(nn.Module):
    def forward(self, t: Tuple[Tensor, Tensor]):
        return t[0] + t[1].sum()


class Scale(nn.Module):
    """Saves nothing of its output, which InPlace may then write."""

    def forward(self, x):
        return x * 0.5


class InPlace(nn.Module):
    def forward(self, x):
        return torch.tanh(x.mul_(2.0))


class EmptyParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.nothing = nn.Parameter(torch.zeros(0))

    def forward(self, x):
        return x + self.nothing.sum()


class Random(nn.Module):
    """Draws from the default generator: a recomputation must replay it."""

    def forward(self, x):
        return x[:, torch.randperm(x.size(1))] + 0.1 * torch.randn_like(x)


class Depth(nn.Module):
    """torchvision's stochastic depth: draws nothing where p is 0."""

    def __init__(self, width: int, p: float):
        super().__init__()
        self.p = p
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        y = torch.tanh(self.linear(x))
        if not self.training or self.p == 0.0:
            return x + y
        keep = torch.empty(x.size(0), 1).bernoulli_(1.0 - self.p) / (1.0 - self.p)
        return x + y * keep


class Integer(nn.Module):
    def forward(self, x):
        return x.argmax(1)


class TrainingOnly(nn.Module):
    """A shape that holds in training only."""

    def forward(self, x):
        if self.training:
            return x.view(-1, 7)
        return x
