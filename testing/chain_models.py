"""Models written as users write them, not as a sequence of stages, for the tests of
ckptlab.chain (python_chain_test.py, python_optimize_test.py, torchscript_crosscheck_test.py):
a program over a pool of values (skips, residuals, tuples, views, in-place writes, state,
dropout, a mask, values computed without gradients or from shapes alone, written in place
without gradients or copied into zeros, parametrized weights, frozen layers, buffers, state read
before it is updated, a norm in float32), a GPT as Hugging Face writes one, a small U-Net; and
torchvision, or None.
"""

import copy
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

try:
    import torchvision  # real models no one here wrote: python3-torchvision (both CI roots)
except ImportError:  # the tests that need it are skipped, saying so
    torchvision = None

WIDTH = 4


class Program(nn.Module):
    """Ops over a pool of values, each op reading values made earlier (drawn indices): the
    dataflow of models that are not a sequence of modules."""

    def __init__(self, ops, buffers=()):
        """`buffers`: the elements of each "buffer" op's buffer, in order (default 1)."""
        super().__init__()
        self.ops = ops
        self.layers = nn.ModuleList()
        sizes = iter(buffers)
        for kind, _ in ops:
            self.layers.append(
                Held(next(sizes, 1)) if kind == "buffer" else
                nn.LayerNorm(WIDTH) if kind == "float32_norm" else
                nn.Linear(2 * WIDTH, WIDTH) if kind == "concat" else
                nn.BatchNorm1d(WIDTH) if kind == "batch_norm" else
                Pair() if kind == "pair" else
                nn.Linear(WIDTH, WIDTH) if kind in ("linear", "teacher") else
                nn.Linear(WIDTH, WIDTH).requires_grad_(False) if kind == "frozen" else
                nn.utils.parametrizations.spectral_norm(nn.Linear(WIDTH, WIDTH))
                if kind == "parametrized" else
                nn.utils.spectral_norm(nn.Linear(WIDTH, WIDTH)) if kind == "spectral_hook" else
                nn.Identity())
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("average", torch.zeros(WIDTH))  # read by some ops, updated by others

    def forward(self, x, mask):
        pool = [x * mask.unsqueeze(1)]
        for (kind, reads), layer in zip(self.ops, self.layers):
            a, b = (pool[r % len(pool)] for r in reads)
            if kind == "linear":
                y = torch.tanh(layer(a))
            elif kind == "residual":
                y = a + b
            elif kind == "concat":  # a skip: any earlier value joined to a later one
                y = layer(torch.cat([a, b], dim=1))
            elif kind == "in_place":
                y = a * 1.5
                y.mul_(2)
                y.relu_()
            elif kind == "batch_norm":
                y = layer(a)
            elif kind == "dropout":
                y = F.dropout(a, 0.3, training=self.training)
            elif kind == "view":  # shape arithmetic read from the tensor, views and a transpose
                n, w = a.shape
                y = a.reshape(n, 2, w // 2).transpose(1, 2).reshape(n, w).contiguous()
            elif kind == "no_grad":  # a scale computed without gradients
                with torch.no_grad():
                    scale = a.abs().mean() + 1
                y = b * scale
            elif kind == "teacher":  # a module run without gradients: its parameters get none
                with torch.no_grad():
                    taught = layer(a)
                y = b + taught
            elif kind == "frozen":  # a layer the optimizer does not train (a frozen backbone)
                y = torch.tanh(layer(a))
            elif kind in ("parametrized", "spectral_hook"):  # a power method run without them
                y = torch.tanh(layer(a))
            elif kind == "average_read":  # state read before a later op updates it
                y = torch.tanh(a + self.average)
            elif kind == "average_update":  # an average of an activation, kept without gradients
                with torch.no_grad():
                    self.average.mul_(0.5).add_(a.mean(0), alpha=0.5)
                y = b * 0.5
            elif kind == "clamp_no_grad":  # written in place without gradients, read with them
                y = a + 0.5  # which saves nothing the write would change
                with torch.no_grad():
                    y.clamp_(max=0.5)
            elif kind == "into_zeros":  # an activation copied into a tensor made from a shape
                buf = torch.zeros(a.shape[0], 2 * WIDTH, dtype=a.dtype)
                buf[:, :WIDTH] = a
                y = buf[:, WIDTH // 2:WIDTH + WIDTH // 2] + b
            elif kind == "shape_mask":  # made from a shape alone (swin's window mask): no grad
                y = torch.ones_like(a).tril()
            elif kind == "product":  # saves each factor for the other's gradient, if it needs one
                y = a * b
            elif kind == "buffer":  # a buffer read whole (a mask, a table), saved by no op
                y = a + layer.table.sum().to(a.dtype)
            elif kind == "float32_norm":  # a norm computed in float32, as mixed models run it
                y = F.layer_norm(a.float(), (WIDTH,), layer.weight.float(),
                                 layer.bias.float()).to(a.dtype)
            elif kind == "pair":
                p, q = layer(a)
                pool.append(p)
                y = q
            else:  # "counter": state read after its update
                self.count.add_(1)
                y = a * self.count.clone()  # read after its update (mul would save it)
            pool.append(y)
        return {"main": pool[-1], "aux": (pool[len(pool) // 2],)}


    def to_dtype(self, dtype, norms_in_float32=False):
        """The model in `dtype`; with `norms_in_float32`, its float32_norm layers stay float32
        (bfloat16 weights beside float32 norms)."""
        self.to(dtype)
        for (kind, _), layer in zip(self.ops, self.layers):
            if kind == "float32_norm" and norms_in_float32:
                layer.float()
        return self


class Held(nn.Module):
    """A buffer of `elements` values: memory the model holds besides its parameters."""

    def __init__(self, elements):
        super().__init__()
        self.register_buffer("table", torch.randn(elements) / elements)


class Pair(nn.Module):
    """A module returning a tuple, both read later."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(WIDTH))

    def forward(self, x):
        return x * self.scale, torch.sin(x)


KINDS = ["linear", "residual", "concat", "in_place", "batch_norm", "dropout", "view", "pair",
         "counter", "no_grad", "teacher", "parametrized", "spectral_hook", "buffer",
         "float32_norm", "shape_mask", "product", "average_read", "average_update",
         "clamp_no_grad", "into_zeros", "frozen"]


def trains(model, inputs, target):
    """Whether a step of `model` (a Program) has a loss to backpropagate: a program may compute it
    from values that need no gradient alone (masks made from shapes). Runs a copy."""
    return program_loss(copy.deepcopy(model)(*inputs), target).requires_grad


def program_loss(output, target):  # (mse_loss has no bfloat16 kernel on 1.13's CPU)
    return (output["main"] - target).square().mean() + output["aux"][0].square().mean()


@dataclasses.dataclass
class Output:
    loss: torch.Tensor
    logits: torch.Tensor


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask):
        b, t, w = x.shape
        q, k, v = self.qkv(x).split(w, dim=2)
        q, k, v = (z.view(b, t, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (w // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        keep = causal[None, None] & mask[:, None, None, :].bool()
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        y = self.dropout(scores.softmax(-1)) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, w))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width), nn.Dropout(0.1))

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp(self.ln_2(x))


class Decoder(nn.Module):
    """A GPT as Hugging Face writes one: ids and an attention mask in, a ModuleList of blocks,
    the head tied to the token embedding, a dataclass out holding the loss when given labels."""

    def __init__(self, vocab=50, width=16, heads=2, layers=3, positions=32):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(positions, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, attention_mask, labels=None):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)[None]
        for block in self.h:
            x = block(x, attention_mask)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if labels is not None:
            labels = labels.masked_fill(attention_mask == 0, -100)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return Output(loss, logits)


class UNet(nn.Module):
    """Each encoder level's output concatenated into the decoder's (no single tensor to cut at
    between the levels), BatchNorm, a transposed convolution up."""

    def __init__(self, channels=4, levels=2):
        super().__init__()
        self.down = nn.ModuleList()
        self.up = nn.ModuleList()
        width = channels
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        for _ in range(levels):
            self.down.append(nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
                                           nn.BatchNorm2d(2 * width), nn.ReLU(inplace=True)))
            width *= 2
        for _ in range(levels):
            self.up.append(nn.ConvTranspose2d(width, width // 2, 2, stride=2))
            width //= 2
        self.fuse = nn.ModuleList(nn.Conv2d(2 * channels * 2**k, channels * 2**k, 3, padding=1)
                                  for k in reversed(range(levels)))
        self.head = nn.Conv2d(channels, 2, 1)

    def forward(self, x):
        skips = [torch.relu(self.stem(x))]
        for down in self.down:
            skips.append(down(skips[-1]))
        y = skips.pop()
        for up, fuse in zip(self.up, self.fuse):
            y = torch.relu(fuse(torch.cat([up(y), skips.pop()], dim=1)))
        return self.head(y)
