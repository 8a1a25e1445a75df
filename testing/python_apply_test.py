#!/usr/bin/env python3
"""ckptlab.apply against the plain model, on generated models and plans (Hypothesis).

The models hold what users' models hold: stages returning a tensor twice, their input beside a
new tensor, a view of their input, their input itself, a zero-element view of it; a stage taking
a tuple whole, beside an argument with a default; an in-place write to the input; BatchNorm,
its statistics written by the kernel alone (functional batch_norm), and a counter read after its
update (state); dropout and random numbers drawn without a generator; a zero-element parameter;
a concatenation handing a BatchNorm before it a slice of its gradient (a checkpoint must hand it
on as is: a contiguous copy rounds the BatchNorm's backward differently). Each is run eagerly
or scripted. The plans are trees of every segment mode. Properties:
  - a step of the planned model gives the plain model's loss and gradients (every parameter's
    and the input's) bitwise, and leaves the state (every buffer) as the plain model's step
    does; so does a second step, and one under bfloat16 autocast (reruns run under the first
    run's); a stage replaced between steps runs as replaced;
  - two forwards before one backward rerun each from the state its first run read (equal up to
    the order the two gradients are summed in); a stage writing its own parameter runs once
    under a plan storing it, and a plan rerunning it is refused by name;
  - a plan nesting MAX_NESTING checkpoints runs; one nesting more is refused by name;
  - `python3 -m ckptlab.apply` prints a plan's segments, and nothing else; bad input (a missing,
    special, oversized or foreign file, a plan too deep or for another model) is one line and
    exit status 2.
Runs on the torch of the Python that runs it (1.13 here, PyPI's 2.15 in CI).
"""

import copy
import os
import sys
import unittest

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import ckptlab  # noqa: E402
from ckptlab import PlanError  # noqa: E402
from stage_modules import (  # noqa: E402
    Concat, Counter, EmptyJoin, EmptyParameter, EmptySlice, InPlace, Linear, PassThrough, Random,
    RunningMean, Scale, Twice, TupleJoin, TupleScale, View)


WIDTH = 4
KINDS = {
    "linear": lambda: [Linear(WIDTH)],
    "dropout": lambda: [nn.Dropout(0.3)],
    "batch_norm": lambda: [nn.BatchNorm1d(WIDTH)],
    "concat": lambda: [nn.BatchNorm1d(WIDTH), Concat(WIDTH)],
    "running_mean": lambda: [RunningMean(WIDTH)],
    "counter": lambda: [Counter()],
    "twice": lambda: [Twice(), TupleJoin()],
    "pass_through": lambda: [PassThrough(), TupleJoin()],
    "tuple_default": lambda: [PassThrough(), TupleScale()],
    "view": lambda: [View()],
    "flatten": lambda: [nn.Flatten()],
    "empty_slice": lambda: [EmptySlice(), EmptyJoin()],
    "in_place": lambda: [Scale(), InPlace()],
    "empty_parameter": lambda: [EmptyParameter()],
    "random": lambda: [Random()],
}
MODES = ["stored", "checkpointed", "recompute-all", "offloaded"]


@st.composite
def models(draw):
    seed = draw(st.integers(0, 2**16))
    kinds = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=5))
    scripted = draw(st.booleans())
    torch.manual_seed(seed)
    stages = [Linear(WIDTH)]  # parameters first: the input's gradient flows through every stage
    for kind in kinds:
        stages += KINDS[kind]()
    return kinds, scripted, stages


@st.composite
def segments(draw, begin, end, depth):
    out, at = [], begin
    while at < end:
        stop = draw(st.integers(at + 1, end))
        mode = draw(st.sampled_from(MODES))
        text = f"[{at},{stop}) {mode}"
        if mode in ("checkpointed", "offloaded") and depth > 0 and draw(st.booleans()):
            text += " {" + draw(segments(at, stop, depth - 1)) + "}"
        out.append(text)
        at = stop
    return ", ".join(out)


def step(model, x, seed):
    """Loss, gradients (every parameter's, then the input's) and buffers after one step, scripted
    stages unoptimized, as ckptlab.apply runs them."""
    x = x.detach().clone().requires_grad_(True)
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    with torch.jit.optimized_execution(False):
        loss = model(x).pow(2).mean()
        loss.backward()
    grads = [p.grad for p in model.parameters()] + [x.grad]
    return loss.detach(), grads, [b.clone() for b in model.buffers()]


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.equal(a, b)


def made(stages, scripted):
    """An independent copy of the stages (parameters, buffers), each scripted if asked."""
    return [torch.jit.script(s) if scripted else s for s in copy.deepcopy(stages)]


class Apply(unittest.TestCase):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def test_planned_steps_equal_the_plain_models(self, data):
        kinds, scripted, stages = data.draw(models(), "model")
        plan = data.draw(segments(0, len(stages), 3), "plan")
        plain = nn.Sequential(*made(stages, scripted))
        planned_stages = nn.Sequential(*made(stages, scripted))
        planned = ckptlab.apply(planned_stages, plan)
        x = torch.randn(3, WIDTH)
        for seed in (7, 8):  # a second step starts from the state the first left
            expected = step(plain, x, seed)
            got = step(planned, x, seed)
            self.assertTrue(same(expected[0], got[0]), f"loss {expected[0]} != {got[0]}")
            for k, (e, g) in enumerate(zip(expected[1], got[1])):
                self.assertTrue(same(e, g), f"gradient {k} differs")
            for k, (e, g) in enumerate(zip(expected[2], got[2])):
                self.assertTrue(same(e, g), f"buffer {k} differs: {e} != {g}")

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def test_reruns_run_under_the_first_runs_autocast(self, data):
        kinds, scripted, stages = data.draw(models(), "model")
        plan = data.draw(segments(0, len(stages), 2), "plan")
        plain = nn.Sequential(*made(stages, scripted))
        planned = ckptlab.apply(nn.Sequential(*made(stages, scripted)), plan)
        x = torch.randn(3, WIDTH)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = step(plain, x, 7)
            got = step(planned, x, 7)
        for k, (e, g) in enumerate(zip(expected[1], got[1])):
            self.assertTrue(same(e, g), f"gradient {k} differs under autocast")

    def test_a_stage_replaced_after_apply_runs_as_replaced(self):
        torch.manual_seed(0)
        stages = nn.Sequential(Linear(WIDTH), Linear(WIDTH), Linear(WIDTH))
        planned = ckptlab.apply(stages, "[0,2) checkpointed, [2,3) stored")
        x = torch.randn(2, WIDTH)
        before = planned(x)
        stages[1] = Linear(WIDTH)
        after = planned(x)
        self.assertTrue(torch.equal(after, stages(x)))
        self.assertFalse(torch.equal(before, after))
        del stages[2]
        with self.assertRaisesRegex(PlanError, "the plan covers 3 stages; the model has 2"):
            planned(x)

    def test_a_stage_needing_several_arguments_gets_a_tuple_spread(self):
        class Spread(nn.Module):
            def forward(self, a, b, scale: float = 1.0):
                return a * b * scale

        torch.manual_seed(0)
        for stage in (Spread(), torch.jit.script(Spread())):
            stages = nn.Sequential(Linear(WIDTH), PassThrough(), stage)
            x = torch.randn(2, WIDTH)
            y = ckptlab.apply(stages, "[0,2) checkpointed, [2,3) stored")(x)
            a, b = stages[1](stages[0](x))
            self.assertTrue(torch.equal(y, a * b))

    def test_an_evaluation_before_training_learns_the_state_anew(self):
        torch.manual_seed(0)
        stages = [Linear(WIDTH), nn.BatchNorm1d(WIDTH), Linear(WIDTH)]
        plain = nn.Sequential(*made(stages, False))
        planned = ckptlab.apply(nn.Sequential(*made(stages, False)), "[0,3) checkpointed")
        x = torch.randn(5, WIDTH)
        for model in (plain, planned):
            model.eval()
            with torch.no_grad():
                model(x)  # a validation pass first: BatchNorm updates nothing in it
            model.train()
        expected, got = step(plain, x, 3), step(planned, x, 3)
        for e, g in zip(expected[1] + expected[2], got[1] + got[2]):
            self.assertTrue(same(e, g))  # its statistics updated once, not by the rerun again

    def test_a_statistic_the_first_step_leaves_as_it_was_is_state_too(self):
        # A batch whose mean is the running mean (0: a batch of opposite rows, a BatchNorm after
        # a normalization) leaves running_mean's value as it was, and the kernel gives it no new
        # version; its module's other statistics change, so it is state all the same, and a
        # later step's rerun must not update it a second time.
        torch.manual_seed(0)
        stages = [nn.BatchNorm1d(WIDTH), nn.BatchNorm1d(WIDTH)]
        plain = nn.Sequential(*made(stages, False))
        planned = ckptlab.apply(nn.Sequential(*made(stages, False)), "[0,2) checkpointed")
        half = torch.randn(1, WIDTH)  # x + -x is 0 exactly
        for x in (torch.cat([half, -half]), torch.randn(4, WIDTH)):
            expected, got = step(plain, x, 1), step(planned, x, 1)
            for k, (e, g) in enumerate(zip(expected[1] + expected[2], got[1] + got[2])):
                self.assertTrue(same(e, g), f"gradient or buffer {k}: {e} != {g}")

    def test_two_forwards_before_one_backward_rerun_each_from_its_own_state(self):
        # A GAN's discriminator on real and fake, gradient accumulation into one loss: each
        # rerun must read the state its own first run read (spectral_norm's u and v, BatchNorm's
        # batch), not the state the later forward left.
        torch.manual_seed(0)
        stages = [nn.utils.parametrizations.spectral_norm(nn.Linear(WIDTH, WIDTH)), nn.Tanh(),
                  nn.BatchNorm1d(WIDTH), Linear(WIDTH)]
        with torch.no_grad():  # a weight that moved since u and v converged
            stages[0].parametrizations.weight.original.mul_(3)
        real, fake = torch.randn(5, WIDTH), torch.randn(5, WIDTH)
        results = []
        for model in (nn.Sequential(*made(stages, False)),
                      ckptlab.apply(nn.Sequential(*made(stages, False)),
                                    "[0,2) checkpointed, [2,4) checkpointed")):
            (model(real).square().mean() + model(fake).square().mean()).backward()
            results.append([p.grad for p in model.parameters()] + list(model.buffers()))
        for e, g in zip(*results):
            # The two forwards' gradients are summed in another order: rounding, no more.
            self.assertTrue(torch.allclose(e, g, rtol=1e-6, atol=1e-7),
                            f"max |difference| {(e - g).abs().max().item():.3g}")

    def test_a_stage_writing_its_parameter_is_run_once_or_refused(self):
        class Decaying(nn.Linear):  # a constraint applied in forward: a rerun applies it again
            def forward(self, x):
                with torch.no_grad():
                    self.weight.mul_(0.9)
                return super().forward(x)

        torch.manual_seed(0)
        stages = [Linear(WIDTH), Decaying(WIDTH, WIDTH), Linear(WIDTH)]
        x = torch.randn(3, WIDTH)
        expected = step(nn.Sequential(*made(stages, False)), x, 2)
        stored = nn.Sequential(*made(stages, False))
        got = step(ckptlab.apply(stored, "[0,1) checkpointed, [1,2) stored, [2,3) checkpointed"),
                   x, 2)
        self.assertTrue(all(same(e, g) for e, g in zip(expected[1], got[1])))
        self.assertTrue(torch.equal(stored[1].weight, made(stages, False)[1].weight * 0.9))
        rerun = ckptlab.apply(nn.Sequential(*made(stages, False)), "[0,3) checkpointed")
        with self.assertRaisesRegex(PlanError, "stage 1 writes its parameter weight in place"):
            rerun(x)

    def test_a_container_with_a_forward_of_its_own_is_refused(self):
        class Scaled(nn.Sequential):
            def forward(self, x):
                return super().forward(x) * 2

        with self.assertRaisesRegex(PlanError, "Scaled has a forward of its own"):
            ckptlab.apply(Scaled(Linear(WIDTH)), "[0,1) checkpointed")

    def test_nesting_up_to_the_bound_runs_and_past_it_is_refused(self):
        torch.manual_seed(0)

        def nested(depth):
            text = "[0,1) stored"
            for _ in range(depth):
                text = "[0,1) checkpointed {" + text + "}"
            return text

        model = nn.Sequential(Linear(WIDTH))
        x = torch.randn(2, WIDTH)
        expected = step(model, x, 1)
        got = step(ckptlab.apply(model, nested(ckptlab.MAX_NESTING)), x, 1)
        self.assertTrue(all(same(e, g) for e, g in zip(expected[1], got[1])))
        with self.assertRaisesRegex(PlanError, f"nests {ckptlab.MAX_NESTING + 1} checkpoints"):
            ckptlab.apply(model, nested(ckptlab.MAX_NESTING + 1))
        long = nn.Sequential(*[Linear(WIDTH) for _ in range(ckptlab.MAX_NESTING + 1)])
        with self.assertRaisesRegex(PlanError, "recompute-all"):
            ckptlab.apply(long, f"[0,{len(long)}) recompute-all")


class Command(unittest.TestCase):
    """`python3 -m ckptlab.apply PLAN MODEL.pt`: what a plan does to a file's stages, or one line
    on stderr naming the input and exit status 2."""

    def run_command(self, *args):
        import subprocess
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(HERE), "python"))
        return subprocess.run([sys.executable, "-m", "ckptlab.apply", *args], env=env,
                              capture_output=True, text=True)

    def setUp(self):
        import tempfile
        self.folder = tempfile.TemporaryDirectory(prefix="apply_cli_")
        self.dir = self.folder.name
        self.model = os.path.join(self.dir, "model.pt")
        torch.jit.script(nn.Sequential(Linear(WIDTH), Twice(), TupleJoin())).save(self.model)
        self.plan = os.path.join(self.dir, "plan.txt")
        with open(self.plan, "w") as f:
            f.write("[0,2) checkpointed, [2,3) stored\n")

    def tearDown(self):
        self.folder.cleanup()

    def refused(self, done, names):
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertIn(names, done.stderr)
        self.assertEqual(done.stdout, "")

    def test_a_plan_on_a_file_prints_its_segments_and_nothing_else(self):
        done = self.run_command(self.plan, self.model)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stderr, "")  # no RuntimeWarning, nothing
        self.assertEqual(done.stdout.splitlines(),
                         ["[0,2) checkpointed: 0.Linear, 1.Twice", "[2,3) stored: 2.TupleJoin"])

    def test_bad_input_is_one_line_and_exit_2(self):
        missing = os.path.join(self.dir, "missing.pt")
        self.refused(self.run_command(self.plan, missing), f"{missing}: No such file")
        self.refused(self.run_command(self.plan, self.dir), "not a regular file")
        text = os.path.join(self.dir, "text.pt")
        with open(text, "w") as f:
            f.write("not a model\n")
        self.refused(self.run_command(self.plan, text), "not a TorchScript archive")
        large = os.path.join(self.dir, "large.txt")
        with open(large, "w") as f:
            f.write("[0,3) stored\n" + "#" * (1 << 20))
        self.refused(self.run_command(large, self.model), "larger than 1048576 bytes")
        deep = os.path.join(self.dir, "deep.txt")
        with open(deep, "w") as f:
            text = "[0,3) stored"
            for _ in range(ckptlab.MAX_NESTING + 1):
                text = "[0,3) checkpointed {" + text + "}"
            f.write(text)
        self.refused(self.run_command(deep, self.model), "nests")
        single = os.path.join(self.dir, "linear.pt")  # a module, not a sequence of stages
        torch.jit.script(nn.Linear(WIDTH, WIDTH)).save(single)
        self.refused(self.run_command(self.plan, single), "linear.pt: the module is not a "
                     "sequence of stages: it has no child modules")
        other = os.path.join(self.dir, "other.txt")
        with open(other, "w") as f:
            f.write("[0,4) stored")
        self.refused(self.run_command(other, self.model), "the plan covers 4 stages")


if __name__ == "__main__":
    unittest.main()
