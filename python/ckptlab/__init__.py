"""ckptlab for PyTorch users: run a plan ckptlab made, and measure what it keeps.

    import ckptlab
    planned = ckptlab.apply(model, plan_text)     # model: an nn.Sequential, a child per stage
    chain = ckptlab.chain(model, inputs)          # any model, cut into such a chain of stages
    planned = ckptlab.optimize(model, inputs, budget="8GiB")   # cut, planned by the sweep, applied
    profile = ckptlab.profile_blocks(model, inputs)   # a model tracing cannot cut, by its blocks
    plan = ckptlab.plan_blocks(profile, "2GiB")       # the fastest blocks within a budget
    ckptlab.checkpoint_blocks(model, names, profile)  # those blocks checkpointed in place

Python (the standard library and torch), and for plan_blocks ckptlab's planner in C++
(ckptlab.native says where it is found); see ckptlab.planned for how each segment runs, and
`python3 -m ckptlab.apply PLAN_FILE MODEL.pt` for a plan's segments on a file's stages.
"""

__version__ = "0.1.0"  # the package's (python/pyproject.toml reads it here)

from ckptlab.block_checkpoints import checkpoint_blocks
from ckptlab.block_plans import BlockPlan, plan_blocks
from ckptlab.blocks import Applied, BlockProfile, BlocksError, find_blocks, profile_blocks
from ckptlab.chains import Chain, ChainError, chain
from ckptlab.optimized import OptimizeError, Prediction, optimize
from ckptlab.peaks import step_peak
from ckptlab.plan import Plan, PlanError, Segment, parse_plan
from ckptlab.planned import MAX_NESTING, PlannedSequential, apply, describe, kept_bytes

__all__ = ["__version__", "Applied", "apply", "BlockPlan", "BlockProfile", "BlocksError", "Chain",
           "chain", "ChainError", "checkpoint_blocks", "describe", "find_blocks", "kept_bytes",
           "MAX_NESTING", "optimize", "OptimizeError", "parse_plan", "Plan", "PlanError",
           "plan_blocks", "PlannedSequential", "Prediction", "profile_blocks", "Segment",
           "step_peak"]
