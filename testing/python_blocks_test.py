#!/usr/bin/env python3
"""ckptlab's blocks path (find_blocks, profile_blocks, checkpoint_blocks) against the plain model.

The generated models are what tracing cannot cut: a mask sized by the batch's lengths
(`.item()`), a layer drop drawn with `.item()` before each block and one inside a block, a router
sending a data-dependent number of rows to each expert, blocks taking keyword arguments and
returning tuples, BatchNorm, a counter read after its update (state), dropout, weights tied
between two blocks, a block called twice, a product's output written in place; in float32,
float64 and bfloat16. Properties, for any policy per block (stored, checkpointed, and where this
torch has it selective, ckptlab.selective):
  - find_blocks finds the model's layers and nothing else;
  - a step gives the plain model's loss, gradients (every parameter's) and buffers bitwise, from
    the same random state, and so does the step after it;
  - the bytes PyTorch keeps for backward (planned.kept_bytes) equal profile.kept_bytes(names);
  - undo() gives the plain model back.
plan_blocks, for any budget between the least and the most a plan keeps: within it, the least
time repeated of every policy per block (brute force), stepping as the plain model and
keeping the bytes it says. optimize(granularity="blocks") at budgets between the least and the
stored step's measured peak: the next step's peak within the budget, the plain model's
gradients, the predicted kept bytes. And on torchaudio's Conformer and wav2vec2 (which
ckptlab.chain refuses), the same, optimize at two budgets; bad input is refused by name. Runs on
the torch of the Python that runs it, with the planner library of $CKPTLAB_PLANNER or Bazel's.
"""

import io
import itertools
import os
import re
import sys
import unittest

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import ckptlab  # noqa: E402
from ckptlab import BlocksError  # noqa: E402

# The planner library (ckptlab.native): Bazel's, in the runfiles, unless $CKPTLAB_PLANNER names one.
if "TEST_SRCDIR" in os.environ and "CKPTLAB_PLANNER" not in os.environ:
    os.environ["CKPTLAB_PLANNER"] = os.path.join(
        os.environ["TEST_SRCDIR"], "ckptlab/python/native/libckptlab_planner.so")

WIDTH, EXPERTS = 6, 3
KINDS = ["mlp", "dropout", "batch_norm", "router", "drop_inside", "counter", "written_in_place"]
# The policies a block may have on this torch (ckptlab.selective: torch's selective checkpoint).
SELECTIVE = ckptlab.selective.available() is None
POLICIES = ["stored", "checkpointed"] + (["selective"] if SELECTIVE else [])


class Block(nn.Module):
    """A residual block of one kind, called as block(x, mask=..., scale=...) -> (x, aux)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(WIDTH, WIDTH)
        if kind == "dropout":
            self.dropout = nn.Dropout(0.3)
        elif kind == "batch_norm":
            self.norm = nn.BatchNorm1d(WIDTH)
        elif kind == "router":
            self.router = nn.Linear(WIDTH, EXPERTS)
            self.experts = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(EXPERTS))
        elif kind == "counter":
            self.register_buffer("steps", torch.zeros(()))

    def forward(self, x, mask=None, scale=1.0):
        if self.kind == "written_in_place":  # a product's output written: no selective policy
            h = torch.tanh(self.fc(x).mul_(0.5))
        else:
            h = torch.tanh(self.fc(x))
        if self.kind == "dropout":
            h = self.dropout(h)
        elif self.kind == "batch_norm":
            h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        elif self.kind == "router":
            rows = h.reshape(-1, WIDTH)
            gate = self.router(rows).softmax(-1)
            choice = gate.argmax(-1)
            out = torch.zeros_like(rows)
            for e, expert in enumerate(self.experts):
                (picked,) = (choice == e).nonzero(as_tuple=True)
                if picked.numel():  # rows per expert: decided by the data
                    out = out.index_put((picked,), expert(rows[picked]) * gate[picked, e:e + 1])
            h = out.reshape(h.shape)
        elif self.kind == "drop_inside":
            if torch.rand(1).item() < 0.5:
                return x, x.new_zeros(())
        elif self.kind == "counter":
            self.steps += 1  # read after its update: a rerun must read what the first run read
            h = h * (1 + 0.01 * self.steps)
        if mask is not None:
            h = h * mask
        return x + scale * h, h.square().mean()


class Model(nn.Module):
    def __init__(self, kinds, layer_drop: float, tie: bool, twice: bool):
        super().__init__()
        self.embed = nn.Linear(WIDTH, WIDTH)
        self.layers = nn.ModuleList(Block(k) for k in kinds)
        if tie:  # tied weights: two blocks hold one Linear
            self.layers[-1].fc = self.layers[0].fc
        self.head = nn.Linear(WIDTH, 2)
        self.layer_drop, self.twice = layer_drop, twice

    def forward(self, x, lengths):
        n = int(lengths.max().item())  # a mask sized from the data
        x = self.embed(x[:, :n])
        mask = (torch.arange(n)[None, :] < lengths[:, None]).to(x.dtype)[..., None]
        aux = x.new_zeros(())
        for layer in self.layers:
            if self.training and torch.rand(1).item() < self.layer_drop:
                continue
            x, a = layer(x, mask=mask, scale=0.5)
            aux = aux + a
        if self.twice:
            x, a = self.layers[0](x, mask=mask)
            aux = aux + a
        return self.head(x), aux


def loss_of(output):
    return output[0].square().mean() + 0.1 * output[1]


def models(max_blocks, **extra):
    """Generated models (build's cases) of 2 to `max_blocks` blocks, with `extra` fields."""
    return st.fixed_dictionaries(dict({
        "kinds": st.lists(st.sampled_from(KINDS), min_size=2, max_size=max_blocks),
        "layer_drop": st.sampled_from([0.0, 0.3]),
        "tie": st.booleans(),
        "twice": st.booleans(),
        "dtype": st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
        "seed": st.integers(0, 2**16),
    }, **extra))


CASES = models(5, policies=st.lists(st.sampled_from(POLICIES), min_size=5, max_size=5))


def build(case):
    torch.manual_seed(case["seed"])
    model = Model(case["kinds"], case["layer_drop"], case["tie"], case["twice"])
    return model.to(case["dtype"]).train()


def batch(case):
    generator = torch.Generator().manual_seed(case["seed"])
    x = torch.randn(3, 7, WIDTH, generator=generator).to(case["dtype"])
    return x, torch.tensor([7, 4, 2])


def step(model, inputs, seed, loss_fn=loss_of):
    """The loss, each parameter's gradient, each buffer and the bytes kept for backward, of a
    step from `seed`'s random state."""
    torch.manual_seed(seed)
    exclude = list(model.parameters()) + list(model.buffers()) + list(inputs)
    loss, kept = ckptlab.kept_bytes(lambda: loss_fn(model(*inputs)), exclude=exclude)
    loss.backward()
    grads = [p.grad.clone() if p.grad is not None else None for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads, [b.clone() for b in model.buffers()], kept


def assert_same(test, got, want, what):
    test.assertTrue(torch.equal(got[0], want[0]), f"{what}: loss {got[0]} against {want[0]}")
    for k, (g, w) in enumerate(zip(got[1], want[1])):
        test.assertEqual(g is None, w is None, f"{what}: gradient {k}")
        if g is not None:
            test.assertTrue(torch.equal(g, w), f"{what}: gradient {k} differs by "
                            f"{(g.double() - w.double()).abs().max().item()}")
    for k, (g, w) in enumerate(zip(got[2], want[2])):
        test.assertTrue(torch.equal(g, w), f"{what}: buffer {k}")


class GeneratedModels(unittest.TestCase):
    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    @given(CASES)
    def test_steps_as_the_plain_model_and_keeps_the_prediction(self, case):
        inputs = batch(case)
        plain = build(case)
        model = build(case)
        names = ckptlab.find_blocks(model)
        self.assertEqual(names, [f"layers.{i}" for i in range(len(case["kinds"]))])
        seed = case["seed"] + 1
        torch.manual_seed(seed)  # the profile leaves the random state as it found it
        profile = ckptlab.profile_blocks(model, inputs, loss=loss_of)
        # A layer drop inside keeps nothing; one before a block: the profile never saw it.
        refused = {c.block for c in profile.calls if c.refused} | (
            set(names) - {c.block for c in profile.calls})
        partly = {c.block for c in profile.calls if c.selective_refused} | refused
        self.assertLessEqual(refused, partly)
        for name in refused:
            with self.assertRaises(BlocksError):
                profile.kept_bytes([name])
        for name in partly:
            with self.assertRaises(BlocksError):
                profile.kept_bytes(selective=[name])
        if SELECTIVE:  # a product's output written in place or a draw read, and nothing else
            kinds = dict(zip(names, case["kinds"]))
            self.assertEqual(partly - refused, {
                c.block for c in profile.calls
                if kinds[c.block] in ("written_in_place", "drop_inside")} - refused)
        chosen = [n for n, p in zip(names, case["policies"]) if p == "checkpointed"
                  and n not in refused]
        kept_outputs = [n for n, p in zip(names, case["policies"]) if p == "selective"
                        and n not in partly]
        applied = ckptlab.checkpoint_blocks(model, chosen, profile, selective=kept_outputs)
        got = step(model, inputs, seed)
        want = step(plain, inputs, seed)
        what = (f"{case['kinds']} {case['dtype']}, checkpointed {chosen}, selectively "
                f"{kept_outputs}")
        assert_same(self, got, want, what)
        self.assertEqual(got[3], profile.kept_bytes(chosen, kept_outputs), what)
        assert_same(self, step(model, inputs, seed + 1), step(plain, inputs, seed + 1),
                    what + ", second step")
        applied.undo()
        self.assertFalse(any("forward" in vars(m) for m in model.modules()))
        undone = step(model, inputs, seed)  # the profiled step's draws again
        assert_same(self, undone, step(plain, inputs, seed), what + ", undone")
        self.assertEqual(undone[3], profile.kept_bytes([]), what + ", undone")


# budget: where between the least and the most a plan keeps.
PLANNED = models(6, budget=st.floats(0.0, 1.0))


class PlannedWithinBudgets(unittest.TestCase):
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    @given(PLANNED)
    def test_the_fastest_plan_within_the_budget_steps_as_the_plain_model(self, case):
        """plan_blocks against every set of blocks that can be checkpointed: within the budget,
        and none within it repeats less forward time; its step as the plain model's, keeping
        the bytes it says."""
        inputs = batch(case)
        model = build(case)
        seed = case["seed"] + 1
        torch.manual_seed(seed)
        profile = ckptlab.profile_blocks(model, inputs, loss=loss_of)
        calls = {}
        for call in profile.calls:
            calls.setdefault(call.block, []).append(call)
        free = [b for b, c in calls.items() if len(c) == 1 and not c[0].refused]
        every = []  # (checkpointed, selective, what their reruns repeat) of every plan
        for policies in itertools.product(POLICIES, repeat=len(free)):
            chosen = [b for b, p in zip(free, policies) if p == "checkpointed"]
            kept_outputs = [b for b, p in zip(free, policies) if p == "selective"]
            if not any(calls[b][0].selective_refused for b in kept_outputs):
                every.append((chosen, kept_outputs,
                              sum(calls[b][0].forward_ms for b in chosen)
                              + sum(calls[b][0].selective_ms for b in kept_outputs)))
        kept = [profile.kept_bytes(chosen, kept_outputs) for chosen, kept_outputs, _ in every]
        budget = int(min(kept) + case["budget"] * (max(kept) - min(kept)))
        plan = ckptlab.plan_blocks(profile, budget, selective=SELECTIVE)
        self.assertEqual(ckptlab.plan_blocks(profile, budget).selective, [])  # unless asked
        what = (f"{case['kinds']} {case['dtype']}, budget {budget}: {plan.checkpointed}, "
                f"selectively {plan.selective}")
        self.assertLessEqual(plan.kept_bytes, budget, what)
        self.assertEqual(plan.kept_bytes, profile.kept_bytes(plan.checkpointed, plan.selective),
                         what)
        self.assertEqual(plan.stored_kept_bytes, profile.kept_bytes([]), what)
        least = min(ms for (_, _, ms), k in zip(every, kept) if k <= budget)
        # (The solver sums times in float: within its rounding of the least.)
        self.assertLessEqual(plan.recompute_ms, least * (1 + 1e-5) + 1e-9, what)
        applied = ckptlab.checkpoint_blocks(model, plan.checkpointed, profile, plan.selective)
        got = step(model, inputs, seed)
        applied.undo()
        assert_same(self, got, step(build(case), inputs, seed), what)
        self.assertEqual(got[3], plan.kept_bytes, what)


def peak_of(model, inputs, seed, loss_fn=loss_of):
    """The peak of a step from `seed`'s random state (ckptlab.step_peak), gradients from none,
    its output held through backward as a training loop holds it."""
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)

    def run():
        output = model(*inputs)
        loss_fn(output).backward()

    peak = ckptlab.step_peak(run)
    model.zero_grad(set_to_none=True)
    return peak


def check_optimized(test, make, inputs, seed, loss_fn, fractions, selective=False):
    """ckptlab.optimize's blocks path at budgets `fractions` of the way from the least peak its
    blocks reach to the stored step's (both measured here, each on a model of its own): the
    plain model's step bitwise, the kept bytes predicted, the peak of the step after within the
    budget; and below every plan's, refused with the lowest it measured. (optimize measures with
    the model's tensor attributes held to be put back, a weight weight_norm recomputes in each
    forward: its figure is at or above a later step's by those.)"""
    model = make()
    torch.manual_seed(seed)
    profile = ckptlab.profile_blocks(model, inputs, loss=loss_fn)
    stored = peak_of(make(), inputs, seed, loss_fn)
    ckptlab.checkpoint_blocks(model, ckptlab.block_plans.checkpointable(profile), profile)
    least = peak_of(model, inputs, seed, loss_fn)
    want = step(make(), inputs, seed, loss_fn)
    for fraction in fractions:
        budget = int(least + fraction * (stored - least))
        model = make()
        torch.manual_seed(seed)
        applied = ckptlab.optimize(model, inputs, budget, loss=loss_fn, granularity="blocks",
                                   progress=False, selective=selective)
        answer = applied.predicted
        if not selective:
            test.assertEqual(answer.plan.selective, [])
        what = (f"{type(model).__name__} at {budget} bytes: {answer.plan.checkpointed}, "
                f"selectively {answer.plan.selective}")
        test.assertLessEqual(answer.step_peak_bytes, budget, what)
        test.assertGreaterEqual(answer.stored_step_peak_bytes, stored, what)
        got = step(model, inputs, seed, loss_fn)
        assert_same(test, got, want, what)
        test.assertEqual(got[3], answer.plan.kept_bytes, what)
        test.assertLessEqual(peak_of(model, inputs, seed, loss_fn), answer.step_peak_bytes, what)
        applied.undo()
        test.assertFalse(any("forward" in vars(m) for m in model.modules()))
    model = make()
    torch.manual_seed(seed)
    with test.assertRaises(ckptlab.OptimizeError) as caught:
        ckptlab.optimize(model, inputs, 1, loss=loss_fn, granularity="blocks", progress=False)
    lowest = re.search("below the peaks of every plan of its blocks it measured: the lowest, "
                       "([0-9]+) bytes, with", str(caught.exception))
    test.assertIsNotNone(lowest, str(caught.exception))
    # Every block it can checkpoint, measured: within 1 KiB of this test's measurement of that
    # plan (two runs of a step may place a small allocation apart: 64 bytes on wav2vec2 once).
    test.assertLessEqual(int(lowest.group(1)), least + 1024)
    test.assertFalse(any("forward" in vars(m) for m in model.modules()))


class OptimizeBlocks(unittest.TestCase):
    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    @given(PLANNED)
    def test_within_the_budget_as_measured(self, case):
        inputs = batch(case)
        check_optimized(self, lambda: build(case), inputs, case["seed"] + 1, loss_of,
                        [case["budget"]], selective=SELECTIVE and case["seed"] % 2 == 1)

    def test_bad_input_and_the_traced_path_refused(self):
        case = {"kinds": ["mlp", "router"], "layer_drop": 0.3, "tie": False, "twice": False,
                "dtype": torch.float32, "seed": 5}
        model, inputs = build(case), batch(case)
        for kwargs, words in (({"granularity": "layers"}, "granularity='layers'; accepted: "
                               "stages, blocks"),
                              ({"budget": "x"}, "budget: 'x' is not a size"),
                              ({"planner": "/nonexistent"}, "no planner library at /nonexistent"),
                              ({"blocks": ["layers"]}, "layers is a ModuleList"),
                              ({"selective": "yes"}, "selective='yes'; accepted: True or False"),
                              ({"selective": True, "granularity": "stages"},
                               "selective=True is a policy of blocks")):
            arguments = dict({"budget": "1GiB", "granularity": "blocks"}, **kwargs)
            with self.assertRaises(ckptlab.OptimizeError) as caught:
                ckptlab.optimize(model, inputs, loss=loss_of, progress=False, **arguments)
            self.assertIn(words, str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))
        with self.assertRaises(ckptlab.OptimizeError) as caught:
            ckptlab.optimize(model, inputs, "9" * 10000, loss=loss_of, granularity="blocks")
        self.assertLess(len(str(caught.exception)), 300)
        leaf = inputs[0].clone().requires_grad_()
        applied = ckptlab.optimize(model, (leaf, inputs[1]), "1GiB", loss=loss_of,
                                   granularity="blocks", progress=False)
        applied.undo()
        self.assertIsNone(leaf.grad)  # the measured steps' gradients are put back
        self.assertTrue(all(p.grad is None for p in model.parameters()))
        many = nn.Sequential(*[nn.Linear(2, 2) for _ in range(65)])
        with self.assertRaises(ckptlab.OptimizeError) as caught:
            ckptlab.optimize(many, torch.randn(3, 2), "1GiB", granularity="blocks",
                             progress=False)
        self.assertIn("the step made 65 block calls; accepted: at most 64", str(caught.exception))
        # Its mask is sized by .item(): ckptlab.chain refuses it, and optimize says so and plans
        # its blocks, with no sweep.
        stderr, sys.stderr = sys.stderr, io.StringIO()
        try:
            applied = ckptlab.optimize(model, inputs, "1GiB", loss=loss_of, progress=False,
                                       sweep="/nonexistent")
            said = sys.stderr.getvalue()
        finally:
            sys.stderr = stderr
        self.assertEqual(said.count("\n"), 1, said)
        self.assertIn("planning its blocks instead", said)
        self.assertEqual(applied.predicted.plan.checkpointed, [])
        applied.undo()


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.fc(x.mul_(1.0))


class Refusals(unittest.TestCase):
    def setUp(self):
        self.case = {"kinds": ["mlp", "mlp"], "layer_drop": 0.0, "tie": False, "twice": False,
                     "dtype": torch.float32, "seed": 3}
        self.model = build(self.case)
        self.inputs = batch(self.case)
        self.profile = ckptlab.profile_blocks(self.model, self.inputs, loss=loss_of)

    def refused(self, call, *words):
        with self.assertRaises(BlocksError) as caught:
            call()
        message = str(caught.exception)
        self.assertNotIn("\n", message)
        for word in words:
            self.assertIn(word, message)

    def test_names(self):
        self.refused(lambda: self.profile.kept_bytes(["layers.7"]), "'layers.7'", "layers.0")
        self.refused(lambda: self.profile.kept_bytes("layers.0"), "'layers.0'",
                     "accepted: a list of block names")
        self.refused(lambda: self.profile.kept_bytes(["layers.0", "layers.0"]), "twice")
        for bad in (None, 5, [["layers.0"]], b"layers.0"):
            self.refused(lambda: self.profile.kept_bytes(bad), "accepted: a list")
        self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs, blocks=["layers"]),
                     "layers is a ModuleList", "never calls")
        self.refused(lambda: ckptlab.profile_blocks(None, self.inputs), "NoneType", "nn.Module")
        self.refused(lambda: ckptlab.profile_blocks(self.model, None), "no tensor")
        self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs, targets=None),
                     "targets=NoneType")
        self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs, loss=5),
                     "loss=int")
        self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs,
                                                    blocks=["layers.0", "layers.0.fc"]),
                     "layers.0.fc is inside layers.0")
        self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs, blocks=["x\n"]),
                     "'x\\n'")
        self.refused(lambda: ckptlab.profile_blocks(nn.Linear(2, 2), torch.ones(1, 2)),
                     "no repeated blocks")
        self.refused(lambda: ckptlab.profile_blocks(self.model, (3,)), "no tensor")
        with torch.inference_mode():
            self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs),
                         "torch.inference_mode() is on")
            frozen = tuple(t.clone() for t in self.inputs)
        self.refused(lambda: ckptlab.profile_blocks(self.model, frozen), "an inference tensor")

    def test_a_stage_gives_way_to_its_blocks(self):
        """Stages of repeated blocks (ConvNeXt's, EfficientNet's, Swin's): each stage whose body
        holds at least half of its parameters gives way to the blocks of its body, refined in
        turn; a stage of one block stays; experts inside a child, a block's own layers held in a
        container, and a body holding less than half are not blocks."""
        class Block(nn.Module):  # a module of modules
            def __init__(self, width=WIDTH):
                super().__init__()
                self.mlp = nn.Sequential(nn.Linear(width, width), nn.Tanh())

            def forward(self, x):
                return x + self.mlp(x)

        class Stage(nn.Module):  # a downsampling layer, then its body
            def __init__(self, n, listed=False, down=WIDTH):
                super().__init__()
                blocks = [Block(down) for _ in range(n)]
                self.blocks = nn.ModuleList(blocks) if listed else nn.Sequential(*blocks)
                self.down, self.back = nn.Linear(WIDTH, down), nn.Linear(down, WIDTH)

            def forward(self, x):
                x = self.down(x)
                for block in self.blocks:
                    x = block(x)
                return self.back(x)

        def stages(*each):
            return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Sequential(*each))

        model = stages(Stage(1), Stage(2), Stage(3, listed=True))
        names = ["1.0", "1.1.blocks.0", "1.1.blocks.1", "1.2.blocks.0", "1.2.blocks.1",
                 "1.2.blocks.2"]
        self.assertEqual(ckptlab.find_blocks(model), names)
        x = torch.randn(2, WIDTH)
        profile = ckptlab.profile_blocks(model, x)
        self.assertEqual(profile.blocks, names)
        self.assertEqual(len(profile.calls), len(names))
        # A stage that is its body (an EfficientNet's nn.Sequential of blocks), in a stage.
        nested = stages(nn.Sequential(Block(), Block()), nn.Sequential(Block(), Block()))
        self.assertEqual(ckptlab.find_blocks(nested), ["1.0.0", "1.0.1", "1.1.0", "1.1.1"])
        # A body holding less than half of its stage's parameters: the stages stay.
        wide = stages(Stage(2, down=1), Stage(2, down=1))
        self.assertEqual(ckptlab.find_blocks(wide), ["1.0", "1.1"])

        class Experts(nn.Module):  # a layer whose mixture holds its experts
            def __init__(self):
                super().__init__()
                self.attention = nn.Linear(WIDTH, WIDTH)
                self.mixture = nn.Module()
                self.mixture.experts = nn.ModuleList(Block() for _ in range(EXPERTS))

            def forward(self, x):
                x = self.attention(x)
                return x + sum(e(x) for e in self.mixture.experts)

        self.assertEqual(ckptlab.find_blocks(stages(Experts(), Experts())), ["1.0", "1.1"])
        # Layers in a container of their own (torchvision's Conv2dNormActivation, a Sequential).
        layers = stages(*(nn.Sequential(*(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
                                          for _ in range(3))) for _ in range(2)))
        self.assertEqual(ckptlab.find_blocks(layers), ["1.0", "1.1"])

    def test_selective(self):
        """A block under two policies, a selective policy on a torch without it, and a kept
        output written in place (which torch's own check misses, giving other gradients)."""
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile,
                                                       selective=["layers.0"]),
                     "layers.0 is named both checkpointed and selective")
        self.refused(lambda: self.profile.kept_bytes(selective="layers.1"), "accepted: a list")
        self.refused(lambda: ckptlab.plan_blocks(self.profile, "1GiB", selective=1),
                     "selective=1; accepted: True or False")
        if not SELECTIVE:
            self.refused(lambda: self.profile.kept_bytes(selective=["layers.1"]),
                         "cannot be selectively checkpointed", f"torch {torch.__version__}")
            self.refused(lambda: ckptlab.plan_blocks(self.profile, "1GiB", selective=True),
                         f"selective=True: torch {torch.__version__}")
            with self.assertRaises(ckptlab.OptimizeError) as caught:
                ckptlab.optimize(self.model, self.inputs, "1GiB", granularity="blocks",
                                 selective=True, progress=False)
            self.assertIn(f"selective=True: torch {torch.__version__}", str(caught.exception))
            return
        case = dict(self.case, kinds=["written_in_place", "mlp"])
        model = build(case)
        profile = ckptlab.profile_blocks(model, self.inputs, loss=loss_of)
        self.refused(lambda: ckptlab.checkpoint_blocks(model, [], profile,
                                                       selective=["layers.0"]),
                     "layers.0 cannot be selectively checkpointed", "written in place")
        self.assertGreater(profile.kept_bytes(selective=["layers.1"]), profile.kept_bytes(
            ["layers.1"]))  # its kept products, and no more: the prediction property's
        self.assertEqual(ckptlab.plan_blocks(profile, "1GiB", selective=True).selective, [])

        class Written(nn.Module):  # a block's product, its output, written after it returns
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x).mul_(2).sin()
                return x

        profile = ckptlab.profile_blocks(Written(), torch.randn(3, 4, WIDTH))
        self.assertEqual([c.selective_refused is not None for c in profile.calls], [True, True])
        self.assertIn("written in place", profile.calls[0].selective_refused)

    def test_selective_where_kept_outputs_leave_the_block(self):
        """A product's output kept by the code after the blocks (a router's logits, stashed for
        a z-loss) or handed to the next block inside an object: counted once, exactly; a
        scratch tensor written and freed before a product does not refuse it; a block reading
        a draw into Python is refused (another step may write what it keeps)."""
        if not SELECTIVE:
            self.skipTest(ckptlab.selective.available())

        class Stashed(nn.Module):
            def __init__(self):
                super().__init__()
                self.router, self.fc = nn.Linear(WIDTH, 3), nn.Linear(WIDTH, WIDTH)

            def forward(self, x):
                scratch = torch.empty_like(x)
                scratch.fill_(1)  # written, freed: its address may be a kept output's next
                del scratch
                self.logits = self.router(x)
                return {"h": x + self.fc(torch.tanh(x)) * self.logits.softmax(-1)[..., :1]}

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Stashed() for _ in range(3))

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)["h"]
                return x, sum(torch.logsumexp(l.logits, -1).square().mean() for l in self.layers)

        x = torch.randn(3, 5, WIDTH)
        for names in (["layers.1"], ["layers.0", "layers.1", "layers.2"]):
            torch.manual_seed(0)
            model, plain = Model(), Model()
            plain.load_state_dict(model.state_dict())
            profile = ckptlab.profile_blocks(model, (x,), loss=loss_of)
            self.assertEqual([c.selective_refused for c in profile.calls], [None] * 3)
            applied = ckptlab.checkpoint_blocks(model, [], profile, selective=names)
            got, want = step(model, (x,), 1), step(plain, (x,), 1)
            assert_same(self, got, want, f"selectively {names}")
            self.assertEqual(got[3], profile.kept_bytes(selective=names), names)
            applied.undo()

        class Drawn(nn.Module):  # a product's output, the block's, written on some steps
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Reading() for _ in range(2))

            def forward(self, x, write):
                for layer in self.layers:
                    h = layer(x)
                    if write:
                        h.mul_(0.5)
                    x = x + h.sin()
                return x

        class Reading(nn.Linear):  # reads a draw into Python: refused where it does
            reads = False

            def __init__(self):
                super().__init__(WIDTH, WIDTH)

            def forward(self, x):
                if self.reads and torch.rand(()) < 0.5:
                    x = x * 2
                return super().forward(x)

        model, x = Drawn(), torch.randn(3, 4, WIDTH)
        profile = ckptlab.profile_blocks(model, (x, True))
        self.assertIn("written in place", profile.calls[0].selective_refused)
        profile = ckptlab.profile_blocks(model, (x, False))
        self.assertEqual([c.selective_refused for c in profile.calls], [None, None])
        applied = ckptlab.checkpoint_blocks(model, [], profile, selective=["layers.0"])
        model(x, False).square().mean().backward()
        with self.assertRaises(BlocksError) as caught:  # written on this step: never silently
            model(x, True).square().mean().backward()
        self.assertIn("layers.0: an output its selective checkpoint kept was written in place",
                      str(caught.exception))
        applied.undo()
        model.layers[1].reads = True
        profile = ckptlab.profile_blocks(model, (x, False))
        self.assertIn("reads a tensor's value", profile.calls[1].selective_refused)
        self.assertIsNone(profile.calls[0].selective_refused)

    def test_budgets(self):
        stored = self.profile.kept_bytes([])
        least = self.profile.kept_bytes(["layers.0", "layers.1"])
        self.assertEqual(ckptlab.plan_blocks(self.profile, stored).checkpointed, [])
        self.assertEqual(ckptlab.plan_blocks(self.profile, f"{stored}B").kept_bytes, stored)
        self.assertEqual(ckptlab.plan_blocks(self.profile, "1GiB").checkpointed, [])
        self.assertEqual(ckptlab.plan_blocks(self.profile, least).kept_bytes, least)
        self.refused(lambda: ckptlab.plan_blocks(self.profile, least - 1),
                     f"budget={least - 1} bytes", f"the least, {least} bytes",
                     "checkpoints 2 of the 2 blocks")
        for bad, words in (("x", "'x' is not a size"), ("1GiB\n", "'1GiB\\n'"),
                           ("-1", "'-1'"), (-1, "budget=-1"), (True, "budget=True"),
                           (None, "budget=None"), (1.5, "budget=1.5"), ("1\0", "accepted")):
            self.refused(lambda: ckptlab.plan_blocks(self.profile, bad), *words)
        self.refused(lambda: ckptlab.plan_blocks(None, "1GiB"), "profile_blocks' answer")
        option = ckptlab.native.Option(1.0, 1.0, 8)
        for boundaries, stages, words in (([1], [[option]], "1 boundaries for 1 stages"),
                                          ([1] * 66, [[option]] * 65, "stages=65"),
                                          ([1, -1], [[option]], "a negative boundary"),
                                          ([1, 1], [[]], "has 0 options")):
            with self.assertRaises(ckptlab.native.NativeError) as caught:
                ckptlab.native.plan_options(boundaries, stages, 1, 8)
            self.assertIn(words, str(caught.exception))
        self.refused(lambda: ckptlab.plan_blocks(self.profile, "1GiB", planner="/nonexistent"),
                     "no planner library at /nonexistent", "CKPTLAB_PLANNER")

    def test_another_model_or_twice(self):
        other = build(self.case)
        self.refused(lambda: ckptlab.checkpoint_blocks(other, ["layers.0"], self.profile),
                     "another model")
        applied = ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile)
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile),
                     "checkpointed already")
        self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs), "layers.0",
                     "checkpointed")
        applied.undo()
        applied.undo()
        ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile).undo()
        self.model.eval()  # a profile is of the model as it ran
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile),
                     "changed since it was profiled")
        self.model.train()
        ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile).undo()
        # What the step saves depends on every parameter's dtype, device, shape and whether it
        # takes a gradient: each change is named; put back, the profile is good again.
        weight = self.model.layers[1].fc.weight
        weight.requires_grad_(False)
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile),
                     "changed since it was profiled", "layers.1.fc.weight",
                     "without gradient, was float32")
        weight.requires_grad_(True)
        self.model.double()
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile),
                     "float64 on cpu, shape [6, 6], was float32 on cpu")
        self.model.float()
        ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile).undo()
        hook = self.model.layers[1].register_forward_hook(lambda m, i, o: (o[0] * 2, o[1]))
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile),
                     "layers.1's hooks added or removed")
        hook.remove()
        ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile).undo()
        self.model.layers[0].kind = "dropout"  # a plain attribute: what the block runs
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile),
                     "layers.0.kind is 'dropout', was 'mlp'")
        self.model.layers[0].kind = "mlp"
        ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile).undo()
        self.model.layers[1].fc = nn.Linear(WIDTH, WIDTH)
        self.refused(lambda: ckptlab.checkpoint_blocks(self.model, ["layers.0"], self.profile),
                     "changed since it was profiled", "a module replaced")

    def test_plain_attributes_the_step_sets(self):
        """The model's plain attributes are put back after the profile, as its buffers are: a
        model that flips a flag every step is profiled for its next step, and the profile stays
        good after further steps; a flag set by hand after it is not, nor an attribute added. A
        block that sets its own is refused by name."""
        class Flipping(nn.Module):  # a flag outside the blocks, flipped by every forward
            def __init__(self):
                super().__init__()
                self.layers = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(),
                                            nn.Linear(WIDTH, WIDTH))
                self.odd, self.calls, self.scaled = False, 0, False

            def forward(self, x):
                self.odd, self.calls = not self.odd, self.calls + 1
                x = self.layers[0](x)
                if self.odd:  # odd steps keep one more tensor for backward
                    x = x * torch.sigmoid(x)
                return self.layers[2](self.layers[1](x)) * (2.0 if self.scaled else 1.0)

        model, x = Flipping(), torch.randn(3, WIDTH)
        for steps in range(3):
            profile = ckptlab.profile_blocks(model, x, blocks=["layers.0", "layers.2"])
            self.assertEqual((model.odd, model.calls), (steps % 2 == 1, steps))
            _, kept = ckptlab.kept_bytes(lambda: model(x).square().mean(),
                                         exclude=list(model.parameters()) + [x])
            self.assertEqual(profile.kept_bytes(), kept, f"step {steps}")
        model(x)  # steps after the profile: its state, not its settings
        ckptlab.checkpoint_blocks(model, ["layers.0"], profile).undo()
        model.scaled = True
        self.refused(lambda: ckptlab.checkpoint_blocks(model, ["layers.0"], profile),
                     "scaled is True, was False")
        model.scaled = False
        model.layers[2].extra = 1  # an attribute the forward may read, added since
        self.refused(lambda: ckptlab.checkpoint_blocks(model, ["layers.0"], profile),
                     "layers.2.extra is 1, was absent")
        del model.layers[2].extra
        model.layers[0].shape = (3, 4)  # a tuple of numbers, as a convolution's padding
        profile = ckptlab.profile_blocks(model, x, blocks=["layers.0", "layers.2"])
        model.layers[0].shape = (3, 5)
        self.refused(lambda: ckptlab.checkpoint_blocks(model, ["layers.0"], profile),
                     "layers.0.shape is (3, 5), was (3, 4)")
        del model.layers[0].shape
        # A hook every module runs, registered after the profile.
        profile = ckptlab.profile_blocks(model, x, blocks=["layers.0", "layers.2"])
        hook = nn.modules.module.register_module_forward_hook(lambda m, i, o: o)
        try:
            self.refused(lambda: ckptlab.checkpoint_blocks(model, ["layers.0"], profile),
                         "a global hook")
        finally:
            hook.remove()
        ckptlab.checkpoint_blocks(model, ["layers.0"], profile).undo()

        class Counting(nn.Linear):  # a block with a counter and a flag of its own
            def __init__(self):
                super().__init__(WIDTH, WIDTH)
                self.inner = nn.Identity()
                self.inner.flag = False

            def forward(self, x):
                self.inner.flag = not self.inner.flag
                return super().forward(x) if self.inner.flag else torch.tanh(super().forward(x))

        model = nn.Sequential(Counting(), nn.Tanh(), Counting())
        profile = ckptlab.profile_blocks(model, x, blocks=["0", "2"])
        self.assertFalse(model[0].inner.flag)
        self.refused(lambda: ckptlab.checkpoint_blocks(model, ["2"], profile),
                     "2 cannot be checkpointed", "sets its plain attribute inner.flag")

    def test_plain_attributes_around_a_call(self):
        """What the model does to plain attributes around a block's call, and what a block does
        to those of others: the plain step's gradients where it can be replayed, a refusal by
        name where it cannot, the profile good where the step only changes state."""
        class Scaled(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.active = nn.Linear(WIDTH, WIDTH), False

            def forward(self, x, owner=None):
                if owner is not None:
                    owner.calls += 1
                return torch.tanh(self.fc(x) * (3.0 if self.active else 1.0))

        class Around(nn.Module):  # sets each layer's flag for its call only
            def __init__(self, hand_over=False):
                super().__init__()
                self.layers = nn.ModuleList(Scaled() for _ in range(2))
                self.hand_over, self.calls, self.history, self.aux = hand_over, 0, [], None
                self.steps = 0

            def forward(self, x):
                self.steps += 1
                for layer in self.layers:
                    layer.active = True
                    x = layer(x, self if self.hand_over else None)
                    layer.active = False
                self.history, self.aux = None, x.abs().mean()  # a list, then none; a tensor
                return x

        torch.manual_seed(0)
        model, x = Around(), torch.randn(3, WIDTH)
        names = ["layers.0", "layers.1"]
        profile = ckptlab.profile_blocks(model, x)
        # Put back as they were: a list that became None, None that became a tensor.
        self.assertEqual((model.history, model.aux), ([], None))
        want = step(model, (x,), 1, lambda out: out.square().mean())
        applied = ckptlab.checkpoint_blocks(model, names, profile)
        got = step(model, (x,), 1, lambda out: out.square().mean())
        applied.undo()
        assert_same(self, got, want, "flags set around the calls")
        self.assertEqual(got[3], profile.kept_bytes(names))
        model.layers[0].forward = model.layers[0].forward  # a forward on the instance
        self.refused(lambda: ckptlab.checkpoint_blocks(model, names, profile),
                     "layers.0's forward replaced on the instance")
        del model.layers[0].forward
        model.steps = "many"  # a state of another type
        self.refused(lambda: ckptlab.checkpoint_blocks(model, names, profile),
                     "steps is 'many', a str, where the profiled step held a int")
        model.steps = 0
        if hasattr(nn.modules.module, "register_module_full_backward_hook"):
            hook = nn.modules.module.register_module_full_backward_hook(lambda m, gi, go: None)
            try:
                self.refused(lambda: ckptlab.checkpoint_blocks(model, names, profile),
                             "a global hook")
            finally:
                hook.remove()
        handing = Around(hand_over=True)
        profile = ckptlab.profile_blocks(handing, x)
        self.assertEqual(handing.calls, 0)
        self.refused(lambda: ckptlab.checkpoint_blocks(handing, ["layers.1"], profile),
                     "sets the plain attribute calls of a module it does not hold")

        class Once(Scaled):  # deletes its own attribute
            def forward(self, x):
                if hasattr(self, "first"):
                    del self.first
                return super().forward(x)

        once = nn.Sequential(Once(), Once())
        for layer in once:
            layer.first = True
        profile = ckptlab.profile_blocks(once, x)
        self.assertTrue(once[0].first)
        self.refused(lambda: ckptlab.checkpoint_blocks(once, ["0"], profile),
                     "sets its plain attribute first")
        self.refused(lambda: ckptlab.profile_blocks(
            nn.Sequential(nn.LazyLinear(WIDTH), nn.LazyLinear(WIDTH)), x),
            "0.weight is not initialized yet")

        class Stages(nn.Module):  # stages held as ModuleLists, which no forward calls
            def __init__(self):
                super().__init__()
                self.stages = nn.ModuleList(nn.ModuleList(Scaled() for _ in range(2))
                                            for _ in range(2))

            def forward(self, x):
                for stage in self.stages:
                    for block in stage:
                        x = block(x)
                return x

        self.assertEqual(ckptlab.find_blocks(Stages()),
                         ["stages.0.0", "stages.0.1", "stages.1.0", "stages.1.1"])

    def test_a_block_handed_a_cache(self):
        class Layer(nn.Module):  # appends its keys to a cache, as a decoder's attention does
            def __init__(self, index):
                super().__init__()
                self.fc, self.index = nn.Linear(WIDTH, WIDTH), index

            def forward(self, x, cache=None, pair=()):
                cache = pair[1][0] if pair else cache
                if cache is not None:
                    cache.layers.setdefault(self.index, []).append(x)
                return torch.tanh(self.fc(x))

        class Cache:
            def __init__(self):
                self.layers = {}  # holds no tensor until the first block adds one

        class Decoder(nn.Module):
            def __init__(self, by_keyword):
                super().__init__()
                self.layers = nn.ModuleList(Layer(i) for i in range(2))
                self.by_keyword = by_keyword

            def forward(self, x):
                cache = Cache()
                for layer in self.layers:
                    x = layer(x, pair=(x, [cache])) if self.by_keyword else layer(x, cache)
                return x

        for by_keyword in (False, True):
            model = Decoder(by_keyword)
            profile = ckptlab.profile_blocks(model, torch.randn(3, WIDTH))
            for name in ("layers.0", "layers.1"):
                self.refused(lambda: ckptlab.checkpoint_blocks(model, [name], profile), name,
                             "handed a Cache, an object holding tensors", "use_cache=False")

        class Looped(nn.Module):  # a list holding itself, handed to a block
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Layer(i) for i in range(2))

            def forward(self, x):
                loop = [x, [Cache()]]
                loop[1].append(loop)
                return self.layers[1](self.layers[0](x, pair=loop))

        self.refused(lambda: ckptlab.profile_blocks(Looped(), torch.randn(3, WIDTH)),
                     "nested deeper than 32")

    def test_a_block_writing_its_input(self):
        model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Sequential(InPlace(), InPlace()))
        profile = ckptlab.profile_blocks(model, torch.randn(2, WIDTH))
        self.assertEqual(ckptlab.find_blocks(model), ["1.0", "1.1"])
        self.refused(lambda: ckptlab.checkpoint_blocks(model, ["1.1"], profile), "1.1",
                     "writes its input in place")

    def test_what_a_rerun_cannot_replay(self):
        class Residual(nn.Module):  # x += block(x): the block's input written after it returns
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
                                            for _ in range(2))

            def forward(self, x):
                x = x.clone()
                for layer in self.layers:
                    x += layer(x)
                return x

        class Drawing(nn.Module):  # a generator of its own
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(WIDTH, WIDTH)
                self.generator = torch.Generator().manual_seed(1)

            def forward(self, x):
                return self.fc(x) * torch.rand(x.shape, generator=self.generator)

        class Normed(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(WIDTH, WIDTH)

            def forward(self, x, norm):
                return self.fc(norm(x))

        class Handed(nn.Module):  # a norm the model holds, updated by each block it is handed to
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Normed() for _ in range(2))
                self.norm = nn.BatchNorm1d(WIDTH)

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x, self.norm)
                return x

        class Rebinding(nn.Module):  # self.ema = ...: a new tensor under the buffer's name
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(WIDTH, WIDTH)
                self.register_buffer("ema", torch.ones(WIDTH))

            def forward(self, x):
                y = self.fc(x) * self.ema
                with torch.no_grad():
                    self.ema = 0.5 * self.ema + 0.5 * y.abs().mean(0)
                return torch.tanh(y)

        class Scaled(nn.Module):  # reads a buffer it shares; `update` writes it after
            def __init__(self, scale, update):
                super().__init__()
                self.fc = nn.Linear(WIDTH, WIDTH)
                self.register_buffer("scale", scale)
                self.update = update

            def forward(self, x):
                y = torch.tanh(self.fc(x) + self.scale)
                if self.update:
                    with torch.no_grad():
                        self.scale.mul_(2)
                return y

        class Drawn(nn.Module):  # draws from a generator the model hands it
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(WIDTH, WIDTH)

            def forward(self, x, generator):
                return x + torch.tanh(self.fc(x)) * torch.rand(x.shape, generator=generator)

        class Handing(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Drawn() for _ in range(2))
                self.generator = torch.Generator().manual_seed(1)

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x, self.generator)
                return x

        shared = torch.ones(WIDTH)
        x = torch.randn(4, WIDTH)
        cases = [(Residual(), "layers.0", "written in place after it returns"),
                 (Handing(), "layers.1", "torch.Generator of its own or one it is handed"),
                 (nn.Sequential(Rebinding(), Rebinding()), "0", "buffer ema a new tensor"),
                 (nn.Sequential(Scaled(shared, False), Scaled(shared, True)), "0",
                  "buffer scale is written after it returns"),
                 (nn.Sequential(Drawing(), Drawing()), "1", "torch.Generator of its own"),
                 (Handed(), "layers.1", "buffer norm.running_mean")]
        for model, name, words in cases:
            profile = ckptlab.profile_blocks(model, x)
            self.refused(lambda: ckptlab.checkpoint_blocks(model, [name], profile), name, words)
        drawing = cases[4][0]
        self.assertEqual([d.generator.initial_seed() for d in drawing], [1, 1])
        state = drawing[0].generator.get_state()
        ckptlab.profile_blocks(drawing, x)
        self.assertTrue(torch.equal(drawing[0].generator.get_state(), state))

    def test_what_a_block_is_handed(self):
        class Keyed(nn.Module):  # keywords that checkpoint() takes too, meant for the block
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(WIDTH, WIDTH)

            def forward(self, x, debug=False, preserve_rng_state=0.0, context_fn=None,
                        use_reentrant=None):
                y = torch.tanh(self.fc(x)) * (2 if debug else 1) + preserve_rng_state
                return y + (context_fn if context_fn is not None else 0)

        class Keying(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Keyed() for _ in range(2))

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x, debug=True, preserve_rng_state=0.5, context_fn=3.0,
                              use_reentrant=1)
                return x

        def make():
            torch.manual_seed(8)
            return Keying()

        x = torch.randn(3, WIDTH)
        model, plain = make(), make()
        profile = ckptlab.profile_blocks(model, x)
        ckptlab.checkpoint_blocks(model, ["layers.0", "layers.1"], profile)
        got = step(model, (x,), 3, lambda out: out.square().mean())
        assert_same(self, got, step(plain, (x,), 3, lambda out: out.square().mean()), "keyed")

        class Sparse(nn.Module):  # a graph convolution over a sparse adjacency
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))

            def forward(self, x, adjacency):
                for layer in self.layers:
                    x = torch.sparse.mm(adjacency, layer(x))
                return x

        indices = torch.tensor([[0, 1, 2], [1, 2, 0]])
        adjacency = torch.sparse_coo_tensor(indices, torch.ones(3), (3, 3))
        self.refused(lambda: ckptlab.profile_blocks(Sparse(), (x, adjacency)),
                     "torch.sparse_coo tensor", "accepted: strided")
        with self.assertRaises(ckptlab.ChainError) as caught:
            ckptlab.chain(Sparse(), (x, adjacency))
        self.assertIn("torch.sparse_coo tensor", str(caught.exception))
        self.refused(lambda: ckptlab.profile_blocks(self.model, self.inputs, blocks=[]),
                     "blocks=[] names no block")
        evil = type("Ev\x1bil\n", (nn.ModuleList,), {})
        model = nn.Sequential(nn.Linear(WIDTH, WIDTH))
        model.layers = evil([nn.Linear(WIDTH, WIDTH)])
        self.refused(lambda: ckptlab.profile_blocks(model, x, blocks=["layers"]), "Ev\\x1bil\\x0a")
        self.refused(lambda: ckptlab.plan_blocks(self.profile, 2**63), "budget=9223372036854775808")
        self.assertEqual(ckptlab.plan_blocks(self.profile, 2**63 - 1).checkpointed, [])

    def test_a_buffer_handed_to_every_block(self):
        class Masked(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Block("batch_norm") for _ in range(3))
                self.register_buffer("mask", torch.ones(1, 1, WIDTH))

            def forward(self, x):
                for layer in self.layers:
                    x, _ = layer(x, mask=self.mask)
                return x

        def make():
            torch.manual_seed(4)
            return Masked()

        x = torch.randn(3, 5, WIDTH)
        model, plain = make(), make()
        profile = ckptlab.profile_blocks(model, x)
        self.assertEqual([c.refused for c in profile.calls], [None] * 3)
        ckptlab.checkpoint_blocks(model, ["layers.0", "layers.2"], profile)
        got = step(model, (x,), 9, lambda out: out.square().mean())
        assert_same(self, got, step(plain, (x,), 9, lambda out: out.square().mean()), "masked")

    def test_a_buffer_under_two_names(self):
        class Holder(nn.Module):
            def __init__(self, steps):
                super().__init__()
                self.register_buffer("steps", steps)

        class Shared(nn.Module):  # one counter held by two submodules, read through one
            def __init__(self):  # before the other updates it
                super().__init__()
                self.fc = nn.Linear(WIDTH, WIDTH)
                steps = torch.zeros(())
                self.a, self.b = Holder(steps), Holder(steps)

            def forward(self, x):
                read = 1 + 0.1 * self.b.steps
                self.a.steps += 1
                return x + torch.tanh(self.fc(x)) * read

        def make():
            torch.manual_seed(6)
            return nn.Sequential(Shared(), Shared())

        x = torch.randn(3, WIDTH)
        model, plain = make(), make()
        profile = ckptlab.profile_blocks(model, x)
        ckptlab.checkpoint_blocks(model, ["0", "1"], profile)
        got = step(model, (x,), 2, lambda out: out.square().mean())
        assert_same(self, got, step(plain, (x,), 2, lambda out: out.square().mean()), "shared")
        self.assertEqual(got[3], profile.kept_bytes(["0", "1"]))

    def test_another_wrapper_kept(self):
        block = self.model.layers[1]
        calls = []

        def wrapper(*a, **k):
            calls.append(1)
            return type(block).forward(block, *a, **k)

        block.forward = wrapper
        profile = ckptlab.profile_blocks(self.model, self.inputs, loss=loss_of)
        applied = ckptlab.checkpoint_blocks(self.model, ["layers.1"], profile)
        loss_of(self.model(*self.inputs)).backward()
        applied.undo()
        self.assertIs(vars(block)["forward"], wrapper)
        self.assertGreater(len(calls), 1)


class TorchAudio(unittest.TestCase):
    """torchaudio's Conformer (a padding mask sized by lengths.max().item()) and wav2vec2 (a layer
    drop drawn with torch.rand(1).item() per layer): every block and every other one."""

    def setUp(self):
        try:
            import torchaudio.models  # noqa: F401
        except ImportError:
            self.skipTest("no torchaudio (Debian: python3-torchaudio, which tools/bazel installs)")
        # oneDNN's convolutions sum in an order that depends on where their buffers lie: the
        # plain wav2vec2's feature extractor gives other gradients from one step to the next.
        self.mkldnn = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False

    def tearDown(self):
        torch.backends.mkldnn.enabled = self.mkldnn

    def check(self, make, inputs):
        def loss(output):  # (frames, lengths)
            return output[0].square().mean()

        model = make()
        names = ckptlab.find_blocks(model)
        for every in (1, 2):  # of the blocks the profiled step ran (a layer drop's draw)
            model, plain = make(), make()
            torch.manual_seed(11)
            profile = ckptlab.profile_blocks(model, inputs, loss=loss)
            chosen = [n for n in names if n in {c.block for c in profile.calls}][::every]
            ckptlab.checkpoint_blocks(model, chosen, profile)
            got, want = step(model, inputs, 11, loss), step(plain, inputs, 11, loss)
            assert_same(self, got, want, f"{type(model).__name__}, checkpointed {chosen}")
            self.assertEqual(got[3], profile.kept_bytes(chosen))
            self.assertLess(got[3], profile.kept_bytes([]))
        check_optimized(self, make, inputs, 11, loss, [0.3, 0.8])  # two budgets
        return names

    def test_conformer(self):
        from torchaudio.models import Conformer

        def make():
            torch.manual_seed(5)
            return Conformer(input_dim=8, num_heads=2, ffn_dim=16, num_layers=3,
                             depthwise_conv_kernel_size=3, dropout=0.1).train()

        names = self.check(make, (torch.randn(3, 10, 8), torch.tensor([10, 7, 5])))
        self.assertEqual(names, [f"conformer_layers.{i}" for i in range(3)])

    def test_wav2vec2(self):
        from torchaudio.models import wav2vec2_model

        def make():
            torch.manual_seed(5)
            return wav2vec2_model(
                extractor_mode="group_norm", extractor_conv_layer_config=[(8, 10, 5), (8, 3, 2)],
                extractor_conv_bias=False, encoder_embed_dim=16, encoder_projection_dropout=0.1,
                encoder_pos_conv_kernel=4, encoder_pos_conv_groups=2, encoder_num_layers=4,
                encoder_num_heads=2, encoder_attention_dropout=0.1,
                encoder_ff_interm_features=32, encoder_ff_interm_dropout=0.1,
                encoder_dropout=0.1, encoder_layer_norm_first=False, encoder_layer_drop=0.25,
                aux_num_out=None).train()

        names = self.check(make, (torch.randn(2, 400), torch.tensor([400, 300])))
        self.assertEqual(names, ["feature_extractor.conv_layers.0",
                                 "feature_extractor.conv_layers.1"]
                         + [f"encoder.transformer.layers.{i}" for i in range(4)])


if __name__ == "__main__":
    unittest.main()
