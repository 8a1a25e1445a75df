#!/usr/bin/env python3
"""A GPT-style decoder with dropout, written for ckptlab as a TorchScript chain of stages.

The stages: the token and position embedding (with dropout), `layers` pre-LayerNorm blocks
(causal self-attention and a GELU MLP, dropout after the attention probabilities and after each
residual branch), and the head (final LayerNorm and the vocabulary projection). Alike blocks
share code and shapes, so ckptlab profiles one of them; dropout makes every block stochastic
(RNG replay on).

  python3 examples/export_decoder.py decoder.pt          # 4 layers, width 128, vocab 512
  bazel run //experiments:sweep -- --out=$PWD/decoder \\
      --models=torchscript:file=$PWD/decoder.pt:tokens=128:vocab=512:batch=8

Runs on Debian's python3-torch (1.13) and on 2.x. The file is written whole or not at all.
"""

import argparse
import math
import sys

import torch
from torch import nn

from export_cnn import export, positive


class Embedding(nn.Module):
    def __init__(self, vocab: int, context: int, width: int, dropout: float):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device)
        return self.dropout(self.tokens(ids) + self.positions(positions))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.project = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.attention_dropout = nn.Dropout(dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        scores = q.matmul(k.transpose(2, 3)) / math.sqrt(c // self.heads)
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = self.attention_dropout(scores.masked_fill(future, float("-inf")).softmax(-1))
        y = weights.matmul(v).transpose(1, 2).reshape(b, t, c)
        x = x + self.dropout(self.project(y))
        return x + self.dropout(self.down(nn.functional.gelu(self.up(self.norm2(x)))))


class Head(nn.Module):
    def __init__(self, width: int, vocab: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab, bias=False)

    def forward(self, x):
        return self.out(self.norm(x))


def make_decoder(vocab, context, width, heads, layers, dropout):
    blocks = [Block(width, heads, dropout) for _ in range(layers)]
    return nn.Sequential(Embedding(vocab, context, width, dropout), *blocks, Head(width, vocab))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the TorchScript file to write")
    parser.add_argument("--vocab", type=positive, default=512)
    parser.add_argument("--context", type=positive, default=256, help="longest sequence")
    parser.add_argument("--width", type=positive, default=128)
    parser.add_argument("--heads", type=positive, default=4)
    parser.add_argument("--layers", type=positive, default=4)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0, help="parameters are drawn from it")
    args = parser.parse_args()
    if args.width % args.heads != 0:
        parser.error(f"--width={args.width} is not a multiple of --heads={args.heads}")
    if not 0 <= args.dropout < 1:
        parser.error(f"--dropout={args.dropout} is not in [0, 1)")
    torch.manual_seed(args.seed)
    return export(
        make_decoder(args.vocab, args.context, args.width, args.heads, args.layers, args.dropout),
        args.out, "export_decoder",
        f"torchscript:file={args.out}:tokens=T:vocab={args.vocab}:batch=N (T <= {args.context})")


if __name__ == "__main__":
    sys.exit(main())
