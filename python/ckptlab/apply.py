"""What a ckptlab plan does to the stages of a TorchScript nn.Sequential, from the shell:

    python3 -m ckptlab.apply PLAN_FILE MODEL.pt

One line per segment, with its stages' names. Bad input (a file that is missing, not a regular
file, too large, not a plan or not a TorchScript archive, a plan that does not fit the model) is
one line on stderr naming it, and exit status 2. The library is ckptlab.planned (ckptlab.apply,
the function, is its `apply`); this module is the command only, so that `-m` runs it alone.
"""

import argparse
import os
import stat
import sys
import warnings

MAX_PLAN_BYTES = 1 << 20  # ckptlab's own bound on a plan file (strategies/plan_file.cc)
MAX_MODEL_BYTES = 4 << 30  # and on a model file (models/torchscript.cc)


class _Refused(Exception):
    """Input the command does not take: its message names the input and what is accepted."""


def _read_regular(path: str, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (ckptlab's file policy: a
    link to one is read through; anything else, or anything larger, is refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _Refused(f"{path}: {e.strerror}")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Refused(f"{path}: not a regular file; accepted: a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as e:
        raise _Refused(f"{path}: {e.strerror}")
    finally:
        os.close(fd)
    if len(data) > limit:
        raise _Refused(f"{path}: larger than {limit} bytes; accepted: at most {limit}")
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m ckptlab.apply",
        description="What a ckptlab plan does to the stages of a TorchScript nn.Sequential.")
    parser.add_argument("plan", help="a plan file (docs/plans.md), e.g. saved from results.csv")
    parser.add_argument("model", help="the file torch.jit.save wrote (runs its code)")
    args = parser.parse_args(argv)

    import io

    import torch
    from torch import nn

    from ckptlab.plan import PlanError, printable
    from ckptlab.planned import apply, describe

    try:
        # Bytes that are no UTF-8 stand for themselves (as ckptlab's reader takes them: a
        # comment may hold any; anywhere else they are an error of the plan's).
        text = _read_regular(args.plan, MAX_PLAN_BYTES).decode("utf-8", errors="surrogateescape")
        data = _read_regular(args.model, MAX_MODEL_BYTES)
        try:
            with warnings.catch_warnings():  # newer torches: "`torch.jit.load` is deprecated"
                warnings.simplefilter("ignore", FutureWarning)
                model = torch.jit.load(io.BytesIO(data), map_location="cpu")
        except Exception as e:  # torch.jit.load's own, whatever their type
            first = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
            raise _Refused(f"{args.model}: not a TorchScript archive this torch "
                           f"({torch.__version__}) reads: {first}")
        if not list(model.children()):  # as the sweep says it (models/torchscript.cc)
            raise _Refused(f"{args.model}: the module is not a sequence of stages: it has no "
                           "child modules; accepted: a file torch.jit.save wrote of a scripted "
                           "or traced nn.Sequential")
        try:
            planned = apply(nn.Sequential(*model.children()), text)
        except PlanError as e:
            raise _Refused(f"{args.plan}: {e}")
    except _Refused as e:
        print(f"ckptlab.apply: {printable(str(e))}", file=sys.stderr)
        return 2
    names = [f"{name}.{getattr(m, 'original_name', type(m).__name__)}"
             for name, m in model.named_children()]
    print(describe(planned.plan, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
