"""ckptlab for PyTorch users: run a plan ckptlab made, and measure what it keeps.

    import ckptlab
    planned = ckptlab.apply(model, plan_text)     # model: an nn.Sequential, a child per stage

Pure Python (the standard library and torch); see ckptlab.apply for how each segment runs.
"""

from ckptlab.apply import PlanError, apply, describe, kept_bytes
from ckptlab.plan import Plan, Segment, parse_plan

__all__ = ["apply", "describe", "kept_bytes", "parse_plan", "Plan", "PlanError", "Segment"]
