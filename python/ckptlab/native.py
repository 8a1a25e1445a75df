"""ckptlab's C++ planner and size reader in this process: python/native's library, through ctypes.

    native.parse_bytes("1.5GiB")     # 1610612736: the sweep's own reader (core/base/bytes.h)
    native.plan_options(...)         # the chain solver over stages stored under options

The library is `path`, else $CKPTLAB_PLANNER, else this checkout's
bazel-bin/python/native/libckptlab_planner.so (tools/bazel build
//python/native:libckptlab_planner.so). It holds no LibTorch, so it loads beside any torch.
"""

import ctypes
import dataclasses
import math
import os
from typing import List, Optional, Sequence, Tuple

from ckptlab.plan import printable

__all__ = ["NativeError", "Option", "library_path", "load", "parse_bytes", "plan_options"]

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LOADED = {}  # path -> the loaded library (a process loads a path's library once)
_I64 = ctypes.POINTER(ctypes.c_int64)


class NativeError(ValueError):
    """The library is missing, or refused its arguments: the message says which."""


def library_path(path: Optional[str] = None) -> str:
    """`path`, else $CKPTLAB_PLANNER, else this checkout's built library: NativeError naming it
    where it is no regular file."""
    path = path or os.environ.get("CKPTLAB_PLANNER") or os.path.join(
        _REPOSITORY, "bazel-bin", "python", "native", "libckptlab_planner.so")
    if not isinstance(path, str) or not os.path.isfile(path):
        raise NativeError(f"no planner library at {printable(str(path))}; accepted: the library "
                          "tools/bazel build //python/native:libckptlab_planner.so makes (or "
                          "CMake's ckptlab_planner), named by planner= or $CKPTLAB_PLANNER")
    return path


def load(path: Optional[str] = None):
    """The library (library_path's), loaded once per process: NativeError where it is missing
    or does not load."""
    path = os.path.realpath(library_path(path))
    if path not in _LOADED:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise NativeError(f"the planner library {printable(path)} does not load: "
                              f"{printable(str(e))}") from None
        try:
            parse, plan = lib.ckptlab_parse_bytes, lib.ckptlab_plan_options
        except AttributeError:
            raise NativeError(f"the planner library {printable(path)} does not load: it is no "
                              "ckptlab planner (no ckptlab_parse_bytes, ckptlab_plan_options)"
                              ) from None
        parse.restype = ctypes.c_int
        parse.argtypes = [ctypes.c_char_p, _I64, ctypes.c_char_p, ctypes.c_int]
        plan.restype = ctypes.c_int
        plan.argtypes = (
            [ctypes.c_int, _I64, ctypes.POINTER(ctypes.c_int)]
            + [ctypes.POINTER(ctypes.c_double)] * 2 + [_I64] * 3
            + [ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
               ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_int])
        _LOADED[path] = lib
    return _LOADED[path]


def parse_bytes(text: str, path: Optional[str] = None) -> int:
    """`text` as a number of bytes ("1.5GiB", "512MiB", "1000"), read as the sweep reads sizes:
    NativeError naming the text where it is none."""
    if not isinstance(text, str):
        raise NativeError(f"{printable(repr(text)[:80])}; accepted: a size such as 8GiB")
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise NativeError(f"{printable(repr(text)[:80])}; accepted: a size such as 8GiB") from None
    if b"\0" in encoded:
        raise NativeError(f"{printable(repr(text)[:80])}; accepted: a size such as 8GiB")
    value, message = ctypes.c_int64(0), ctypes.create_string_buffer(512)
    if load(path).ckptlab_parse_bytes(encoded, ctypes.byref(value), message, 512) != 0:
        raise NativeError(printable(message.value.decode("utf-8", "replace")))
    return value.value


@dataclasses.dataclass
class Option:
    """One way to run a stage, as strategies/chain_solver.h's chain::Option counts it."""
    forward_ms: float
    backward_ms: float
    kept: int                   # bytes kept until its backward, its output's included
    forward_transient: int = 0  # its forward's peak above them
    backward_transient: int = 0  # its backward's peak above its start


def plan_options(boundaries: Sequence[int], stages: Sequence[Sequence[Option]], unit: int,
                 max_units: int, path: Optional[str] = None
                 ) -> List[Tuple[float, Optional[List[int]]]]:
    """The chain solver's answer, checkpoints off, for the chain of `stages` (each a list of its
    options) whose boundaries are x_0 .. x_n bytes, at every budget 0..max_units in units of
    `unit` bytes: (the chain model's least time, the option per stage) at each, (inf, None)
    where nothing fits."""
    n = len(stages)
    if len(boundaries) != n + 1:  # the library reads x_0 .. x_n
        raise NativeError(f"{len(boundaries)} boundaries for {n} stages; accepted: {n + 1}")
    flat = [o for options in stages for o in options]
    as_i64 = lambda values: (ctypes.c_int64 * max(1, len(values)))(*values)  # noqa: E731
    as_f64 = lambda values: (ctypes.c_double * max(1, len(values)))(*values)  # noqa: E731
    chosen = (ctypes.c_int * ((max_units + 1) * max(n, 1)))()
    times = (ctypes.c_double * (max_units + 1))()
    message = ctypes.create_string_buffer(512)
    status = load(path).ckptlab_plan_options(
        n, as_i64(boundaries), (ctypes.c_int * max(1, n))(*[len(s) for s in stages]),
        as_f64([o.forward_ms for o in flat]), as_f64([o.backward_ms for o in flat]),
        as_i64([o.kept for o in flat]), as_i64([o.forward_transient for o in flat]),
        as_i64([o.backward_transient for o in flat]), unit, max_units, chosen, times, message,
        512)
    if status != 0:
        raise NativeError(printable(message.value.decode("utf-8", "replace")))
    return [(times[u], None if math.isinf(times[u]) else list(chosen[u * n:(u + 1) * n]))
            for u in range(max_units + 1)]
