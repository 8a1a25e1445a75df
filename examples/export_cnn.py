#!/usr/bin/env python3
"""A small CNN with BatchNorm, written for ckptlab as a TorchScript chain of stages.

Each child of the nn.Sequential is a stage ckptlab can store, recompute or offload: a stem, then
`depth` blocks of Conv-BatchNorm-ReLU (alike blocks share code and shapes, so ckptlab profiles
one of them), a downsampling block, and a classifier head.

  python3 examples/export_cnn.py cnn.pt                  # 3x32x32 images, 10 classes
  bazel run //experiments:sweep -- --out=$PWD/cnn \\
      --models=torchscript:file=$PWD/cnn.pt:input=3x32x32:classes=10:batch=32

Runs on Debian's python3-torch (1.13) and on 2.x. The file is written whole or not at all.
"""

import argparse
import os
import sys
import tempfile

import torch
from torch import nn


def conv_block(cin, cout, stride=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


def make_cnn(width, depth, classes, channels=3):
    stages = [conv_block(channels, width)]
    stages += [conv_block(width, width) for _ in range(depth)]
    stages.append(conv_block(width, 2 * width, stride=2))
    stages.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes)))
    return nn.Sequential(*stages)


def save_whole(module, path):
    """torch.jit.save to a temporary beside `path`, then renamed over it (a link is replaced)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".export.", suffix=".pt", dir=folder)
    os.close(fd)
    try:
        torch.jit.save(module, temporary)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def export(module, path, program, spec):
    """Scripts `module` and saves it whole to `path`, then prints its stages and the ckptlab spec
    that reads it; or one line naming the file and the system's reason. The exit status."""
    model = torch.jit.script(module)
    try:
        save_whole(model, path)
    except OSError as e:
        print(f"{program}: cannot write {path!r}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"wrote {path}: {len(model._modules)} stages; ckptlab spec {spec}")
    return 0


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the TorchScript file to write")
    parser.add_argument("--width", type=positive, default=32, help="channels of the blocks")
    parser.add_argument("--depth", type=positive, default=6, help="alike blocks")
    parser.add_argument("--classes", type=positive, default=10)
    parser.add_argument("--seed", type=int, default=0, help="parameters are drawn from it")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    return export(make_cnn(args.width, args.depth, args.classes), args.out, "export_cnn",
                  f"torchscript:file={args.out}:input=3xHxW:classes={args.classes}:batch=N")


if __name__ == "__main__":
    sys.exit(main())
