"""The highest bytes a step allocates, from the allocator's own records.

    peak = ckptlab.step_peak(lambda: loss(model(x)).backward())   # host bytes above the start

On the host: PyTorch's profiler (profile_memory) records each allocation and free of the CPU
allocator with its time; the peak is their running sum at its highest, in time order (1.13 has
microseconds only; the sort is stable, so records alike in time stay in the order they were
made). Not each op's net bytes in the order the ops began, as the profiler's op table gives them:
an op's own frees would count at its start, before its children allocate, and one op freeing
what its kernels allocated (a compiled backward) would seem to peak low. On a CUDA device:
torch.cuda's peak statistic, above what was allocated when the step began.

Python's cyclic garbage collector runs before the step and not during it: garbage from before the
step (tensors in reference cycles) would otherwise be freed inside it when the collector happens
to run, lowering the figure by a varying amount; tensors the step leaves in cycles stay until it
ends, as they may in a training loop.
"""

import gc
from typing import Callable, Optional

import torch

__all__ = ["step_peak"]


def step_peak(step: Callable[[], object], device: Optional[torch.device] = None) -> int:
    """The highest bytes allocated on `device` (default: the host) while step() runs, above what
    was allocated before it."""
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
            start = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            step()
            torch.cuda.synchronize(device)
            return torch.cuda.max_memory_allocated(device) - start
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=True) as prof:
            step()
    finally:
        if collecting:
            gc.enable()
    records = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
               and (e.device_type() == torch.autograd.DeviceType.CPU)]
    records.sort(key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us() * 1000)
    live = peak = 0
    for e in records:
        live += e.nbytes()
        peak = max(peak, live)
    return peak
