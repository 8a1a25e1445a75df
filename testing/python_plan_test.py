#!/usr/bin/env python3
"""python/ckptlab's plan reader (ckptlab.plan) on any text, and against plans it prints.

Properties (Hypothesis, a dependency of Debian's python3-torch):
  - any text gives a Plan or a PlanError, never another exception, and every message is one
    line without control characters;
  - generated plan trees, written in ckptlab's grammar (core/plan/plan_text.h) with comments and
    line breaks between tokens, read back as the same tree;
  - nesting past MAX_DEPTH is a PlanError, not a RecursionError;
  - a valid tree with one rule broken at a drawn place is refused;
  - the corpus both plan readers are held to (plan_corpus.inc): each text is a plan where
    ckptlab's C++ reader reads one (the same tree) and an error where it finds one; run by
    ckptlab.apply on that many stages.
"""

import sys
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from hypothesis import given, settings, strategies as st  # noqa: E402

from ckptlab.plan import MAX_DEPTH, MODES, PlanError, Segment, parse_plan  # noqa: E402

CONTROL = {chr(c) for c in list(range(0x20)) + list(range(0x7F, 0xA0))}


@st.composite
def trees(draw, begin=0, end=None, depth=3):
    end = end if end is not None else begin + draw(st.integers(1, 8))
    out, at = [], begin
    while at < end:
        stop = draw(st.integers(at + 1, end))
        mode = draw(st.sampled_from(MODES))
        inner = []
        if mode in ("checkpointed", "offloaded") and depth > 0 and draw(st.booleans()):
            inner = draw(trees(at, stop, depth - 1))
        out.append(Segment(at, stop, mode, inner))
        at = stop
    return out


def write(segments, blank):
    parts = []
    for s in segments:
        text = f"[{s.begin},{blank}{s.end}){blank}{s.mode}"
        if s.inner:
            text += f" {{{blank}{write(s.inner, blank)}}}"
        parts.append(text)
    return f",{blank}".join(parts)


def corpus():
    """testing/plan_corpus.inc's cases: (stages, the plan as ckptlab writes it or "error", the
    text's bytes)."""
    with open(os.path.join(HERE, "plan_corpus.inc"), encoding="ascii") as f:
        lines = f.read().splitlines()
    body = lines[lines.index('R"corpus(') + 1:lines.index(')corpus"')]
    out = []
    for line in body:
        stages, expected, escaped = line.split("\t")
        text, k = bytearray(), 0
        while k < len(escaped):
            if escaped[k] != "\\":
                text.append(ord(escaped[k]))
                k += 1
            elif escaped[k + 1] == "x":
                text.append(int(escaped[k + 2:k + 4], 16))
                k += 4
            else:
                text.append({"\\": 0x5C, "t": 0x09, "n": 0x0A}[escaped[k + 1]])
                k += 2
        out.append((int(stages), expected, bytes(text)))
    return out


def flat(segments):
    """A plan tree as a list, without recursion (the corpus nests 1000 deep)."""
    out, pending = [], [(segments, 0)]
    while pending:
        listed, depth = pending.pop()
        for s in listed:
            out.append((depth, s.begin, s.end, s.mode))
            pending.append((s.inner, depth + 1))
    return out


class PlanReader(unittest.TestCase):
    def test_the_shared_corpus_reads_as_ckptlabs_reader_reads_it(self):
        import torch
        import ckptlab
        read = 0
        for stages, expected, raw in corpus():
            text = raw.decode("utf-8", errors="surrogateescape")  # as python -m ckptlab.apply
            read += 1
            model = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(stages)])
            with self.subTest(text=text[:60]):
                if expected == "error":
                    with self.assertRaises(PlanError):
                        ckptlab.apply(model, text)
                else:
                    planned = ckptlab.apply(model, text) if len(text) < 1000 else None
                    self.assertEqual(flat(parse_plan(text).segments),
                                     flat(parse_plan(expected).segments))
                    if planned is not None:
                        self.assertEqual(flat(planned.plan.segments),
                                         flat(parse_plan(expected).segments))
        self.assertGreater(read, 60)

    @settings(max_examples=300, deadline=None)
    @given(trees(), st.data())
    def test_every_broken_rule_is_refused(self, segments, data):
        """A valid tree with one rule broken at a drawn place (as plan_text_test.cc breaks them for
        ckptlab's reader): ckptlab.apply refuses its text on the tree's stages."""
        import torch
        import ckptlab
        stages = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(segments[-1].end)])
        lists, pending = [], [segments]
        while pending:
            listed = pending.pop()
            lists.append(listed)
            pending.extend(s.inner for s in listed if s.inner)
        listed = data.draw(st.sampled_from(lists))
        s = listed[data.draw(st.integers(0, len(listed) - 1))]
        rule = data.draw(st.sampled_from(["empty", "reversed", "begins late", "begins early",
                                          "ends late", "ends early", "a rerun plan"]))
        if rule == "empty":
            s.end = s.begin
        elif rule == "reversed":
            s.begin, s.end = s.end, s.begin
        elif rule == "begins late":
            s.begin += 1
        elif rule == "begins early":
            s.begin -= 1
        elif rule == "ends late":
            s.end += 1
        elif rule == "ends early":
            s.end -= 1
        else:
            s.inner = s.inner or [Segment(s.begin, s.end, "stored")]
            s.mode = data.draw(st.sampled_from(["stored", "recompute-all"]))
        text = write(segments, " ")
        with self.assertRaises(PlanError, msg=text):
            ckptlab.apply(stages, text)

    @settings(max_examples=400, deadline=None)
    @given(st.one_of(st.text(), st.text(alphabet="[](){},;:=@-# \n0123456789abcdefghikmoprstuvx")))
    def test_any_text_is_a_plan_or_one_line_of_error(self, text):
        try:
            plan = parse_plan(text)
        except PlanError as e:
            message = str(e)
            self.assertNotIn("\n", message)
            self.assertFalse(CONTROL & set(message), message)
            return
        self.assertTrue(plan.segments)

    @settings(max_examples=200, deadline=None)
    @given(trees(), st.sampled_from(["", " ", "\n  ", " # a comment\n"]))
    def test_written_trees_read_back(self, segments, blank):
        text = write(segments, blank)
        self.assertEqual(parse_plan(text).segments, segments, text)

    def test_deep_nesting_is_an_error(self):
        text = "[0,1) checkpointed {" * (MAX_DEPTH + 5) + "[0,1) stored" + "}" * (MAX_DEPTH + 5)
        with self.assertRaises(PlanError):
            parse_plan(text)

    def test_ckptlab_printed_plans(self):
        text = ("[0,4) checkpointed {[0,2) checkpointed, [2,4) stored}, [4,6) recompute-all, "
                "[6,8) offloaded; core=recompute @ 1,3; sequence=chunk:4 @ 5-7")
        plan = parse_plan(text)
        self.assertEqual([s.mode for s in plan.segments],
                         ["checkpointed", "recompute-all", "offloaded"])
        self.assertEqual(plan.policies[1].chunks, 4)
        self.assertEqual(plan.policies[1].stages, [(5, 7)])
        for bad in ["[0,2) stored, [3,4) stored", "[0,2) kept", "[0,2) stored {[0,2) stored}",
                    "[0,4) checkpointed {[0,2) stored}", "[0,2) stored; core=recompute @ 3-1"]:
            with self.assertRaises(PlanError, msg=bad):
                parse_plan(bad)


if __name__ == "__main__":
    unittest.main()
