"""ckptlab's plan text, read in Python: the grammar of core/plan/plan_text.h (docs/plans.md).

    [0,4) checkpointed {[0,2) checkpointed, [2,4) stored}, [4,8) stored; core=recompute @ 1,3

    plan = parse_plan(text)          # a Plan, or PlanError naming the line and column
    plan.segments[0].mode            # "checkpointed"
    plan.policies                    # [Policy(part="core", action="recompute", chunks=None, ...)]

Any text gives a Plan or a PlanError (never another exception): nesting is bounded by
MAX_DEPTH, numbers by MAX_STAGE, and control characters in messages are escaped. It reads what
core/plan/plan_text.cc reads: testing/plan_corpus.inc holds both readers to one corpus.
"""

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

MODES = ("stored", "checkpointed", "recompute-all", "offloaded")
# Braces within braces, as core/plan/plan_text.h's kMaxPlanTextDepth (testing/plan_corpus.inc
# holds both readers to it). Read without recursion: Python's stack is not the bound.
MAX_DEPTH = 1000
MAX_STAGE = 1 << 30


class PlanError(ValueError):
    """Plan text that is not a plan, or a plan that does not fit a model."""


@dataclass
class Segment:
    begin: int
    end: int
    mode: str
    inner: List["Segment"] = field(default_factory=list)  # the rerun's plan; [] = all stored


@dataclass
class Policy:
    part: str
    action: str
    chunks: Optional[int]
    stages: List[Tuple[int, int]]  # ranges, first and last inclusive


@dataclass
class Plan:
    segments: List[Segment]
    policies: List[Policy]

    def stage_count(self) -> int:
        return self.segments[-1].end if self.segments else 0


def printable(text: str) -> str:
    """`text` with control characters (C0, DEL, C1) escaped, for messages; a byte that was no
    UTF-8 (read with errors="surrogateescape") as the byte it was, \\xff."""
    return "".join(c if c == " " or (c.isprintable() and not 0x7F <= ord(c) <= 0x9F)
                   else f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF
                   else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
                   for c in text)


# Blanks as ckptlab's reader takes them (C's isspace): ' ', \t, \n, \v, \f, \r, never a Unicode
# space (a no-break space is an error in both).
_TOKEN = re.compile(r"[ \t\n\v\f\r]*(?:#[^\n]*\n?[ \t\n\v\f\r]*)*")
_WORD = re.compile(r"[a-z][a-z0-9_-]*")
_INT = re.compile(r"[0-9]+")


class _Reader:
    def __init__(self, text: str):
        self.text = text
        self.at = 0

    def where(self) -> str:
        line = self.text.count("\n", 0, self.at) + 1
        column = self.at - (self.text.rfind("\n", 0, self.at) + 1) + 1
        return f"line {line}, column {column}"

    def fail(self, expected: str):
        found = self.text[self.at:self.at + 12]
        found = f"'{printable(found)}'" if found else "the end"
        raise PlanError(f"plan text, {self.where()}: expected {expected}, found {found}")

    def skip(self):
        self.at = _TOKEN.match(self.text, self.at).end()

    def peek(self, literal: str) -> bool:
        self.skip()
        return self.text.startswith(literal, self.at)

    def take(self, literal: str):
        if not self.peek(literal):
            self.fail(f"'{literal}'")
        self.at += len(literal)

    def integer(self) -> int:
        self.skip()
        m = _INT.match(self.text, self.at)
        digits = m.group().lstrip("0") or "0" if m else ""  # leading zeros, as ckptlab reads
        if not m or len(digits) > 10 or int(digits) > MAX_STAGE:
            self.fail(f"a stage number (0 to {MAX_STAGE})")
        self.at = m.end()
        return int(digits)

    def word(self, what: str) -> str:
        self.skip()
        m = _WORD.match(self.text, self.at)
        if not m:
            self.fail(what)
        self.at = m.end()
        return m.group()

    def segments(self) -> List[Segment]:
        """segments := segment {',' segment}, a segment's inner plan in braces, read with a stack
        of the lists being filled (one per level of braces)."""
        top: List[Segment] = []
        levels = [top]
        while True:
            segment, opens = self.segment()
            levels[-1].append(segment)
            if opens:
                if len(levels) > MAX_DEPTH:
                    self.fail(f"at most {MAX_DEPTH} levels of braces")
                levels.append(segment.inner)
                continue
            while not self.peek(","):
                if len(levels) == 1:
                    return top
                self.take("}")
                levels.pop()
            self.take(",")

    def segment(self) -> Tuple[Segment, bool]:
        """A segment up to its mode, and whether a brace (taken) opens its inner plan."""
        self.take("[")
        begin = self.integer()
        self.take(",")
        end = self.integer()
        self.take(")")
        mode = self.word("a mode (" + ", ".join(MODES) + ")")
        if mode not in MODES:
            self.fail("a mode (" + ", ".join(MODES) + ")")
        if not self.peek("{"):
            return Segment(begin, end, mode), False
        if mode not in ("checkpointed", "offloaded"):
            self.fail(f"no braces after a {mode} segment (only checkpointed and offloaded "
                      "segments have a plan of their rerun)")
        self.take("{")
        return Segment(begin, end, mode), True

    def policy(self) -> Policy:
        part = self.word("a part name")
        self.take("=")
        action = self.word("an action")
        chunks = None
        if self.peek(":"):
            self.take(":")
            chunks = self.integer()
        self.take("@")
        stages = []
        while True:
            first = self.integer()
            last = first
            if self.peek("-"):
                self.take("-")
                last = self.integer()
            if last < first or last - first > MAX_STAGE:
                self.fail("a range first-last with first <= last")
            stages.append((first, last))
            if not self.peek(","):
                break
            self.take(",")
        return Policy(part, action, chunks, stages)


def _check(segments: List[Segment]):
    """Each list of segments starts where its owner does (0 at the top), its segments are not
    empty and follow one another, and an inner plan ends where its segment does; without
    recursion, as the reader."""
    pending = [(segments, 0, None, "at the top")]
    while pending:
        listed, begin, end, where = pending.pop()
        at = begin
        for s in listed:
            if s.begin != at or s.end <= s.begin:
                raise PlanError(f"plan: segment [{s.begin},{s.end}) {where}: expected one that "
                                f"starts at {at} and is not empty")
            if s.inner:
                pending.append((s.inner, s.begin, s.end, f"inside [{s.begin},{s.end})"))
            at = s.end
        if end is not None and at != end:
            raise PlanError(f"plan: the segments {where} end at {at}, not at {end}")


def parse_plan(text: str) -> Plan:
    """The plan `text` writes; PlanError naming where it is not one."""
    if not isinstance(text, str):
        raise PlanError("plan text must be a str")
    reader = _Reader(text)
    segments = reader.segments()
    policies = []
    while reader.peek(";"):
        reader.take(";")
        reader.skip()
        if reader.at == len(text):
            break
        policies.append(reader.policy())
    reader.skip()
    if reader.at != len(text):
        reader.fail("';' or the end")
    _check(segments)
    return Plan(segments, policies)
