#!/usr/bin/env python3
"""ckptlab.step_peak (the peak reader of experiments/compare_compile.py and ckptlab.optimize's
blocks path) against the allocations it is shown.

Property (Hypothesis): for generated programs of allocations and frees, some inside profiled
ops nested in one another (as a compiled backward is one op freeing what its kernels
allocated), step_peak returns the highest bytes the program holds, counted from its own
allocations (and what entering an op allocates, measured alone): to the byte. (Each op's own
bytes summed in the order the ops began, the profiler's op table, fail it: an op that frees what
it allocated reads as if it freed first.)
"""

import os
import sys
import unittest

import torch
from hypothesis import given, settings, strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from ckptlab.peaks import step_peak  # noqa: E402

# An action: ("alloc", floats), ("free", which of the tensors alive), or ("op", actions) run
# inside a profiled op of its own.
actions = st.recursive(
    st.one_of(st.tuples(st.just("alloc"), st.integers(1, 1 << 18)),
              st.tuples(st.just("free"), st.integers(0, 1 << 10))),
    lambda inner: st.tuples(st.just("op"), st.lists(inner, max_size=6)),
    max_leaves=24)


def enter_op():
    return torch.profiler.record_function("compare_compile_test.op")


def entering_bytes():
    """What entering a profiled op allocates and frees itself (LibTorch 1.13's record_function
    makes a handle and its arguments: 292 bytes), measured alone."""

    def step():
        with enter_op():
            pass

    return step_peak(step)


def run(program, alive, entering):
    """Runs `program`, holding its tensors in `alive`; returns the highest bytes held, with
    `entering` bytes more held while an op is entered."""
    peak = 0
    for action in program:
        if action[0] == "alloc":
            alive.append(torch.empty(action[1], dtype=torch.float32))
        elif action[0] == "free":
            if alive:
                alive.pop(action[1] % len(alive))
        else:
            peak = max(peak, sum(t.numel() * 4 for t in alive) + entering)
            with enter_op():
                peak = max(peak, run(action[1], alive, entering))
        peak = max(peak, sum(t.numel() * 4 for t in alive))
    return peak


class MemoryOfTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.entering = entering_bytes()

    @settings(max_examples=60, deadline=None)
    @given(st.lists(actions, max_size=8))
    def test_the_peak_is_the_programs_to_the_byte(self, program):
        expected = []

        def step():
            alive = []
            expected.append(run(program, alive, self.entering))
            alive.clear()

        self.assertEqual(step_peak(step), expected[0])

    def test_an_op_freeing_what_it_allocated_peaks_at_both(self):
        def step():
            with enter_op():
                x = torch.empty(1000)
                y = torch.empty(1000)
                del x, y

        self.assertEqual(step_peak(step), max(8000, self.entering))


if __name__ == "__main__":
    unittest.main()
