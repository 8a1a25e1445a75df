#!/usr/bin/env python3
"""ckptlab.optimize: a model in, a budget answered by the sweep, the plan applied.

On chain_models.py's U-Net (BatchNorm, skips) and GPT (a padding mask, dropout, a tied head) and,
where python3-torchvision is installed, torchvision's mobilenet_v3_small (at sizes where its
activations, not its parameters' gradients, decide the peak: resnet18's 45 MB of gradients
outweigh its activations at 32 px, and no plan peaks lower than store_all there):
  - a budget below every plan's peak is OptimizeError naming the least peak; a budget between
    that and store_all's peak gets a plan whose predicted step peak fits it and whose step
    ratio is at least 1 (store_all's, 1.0, at a budget above its peak);
  - the planned module steps as the plain model (loss, gradients, buffers bitwise, two steps);
  - PyTorch keeps for backward the activation bytes the sweep predicted, less the loss scalar
    (ckptlab holds it; autograd does not save it), the RNG snapshots of checkpointed segments
    that draw random numbers (5,056 bytes each, kept outside autograd's saved tensors), and
    plus, at most, 8 bytes for each op of the chain taking a Python number where it takes a
    tensor (x / 2.0): PyTorch wraps the number in a tensor at every call, which autograd may
    save (DivBackward keeps its divisor), where the traced file the sweep measured holds a
    constant made at load. The U-Net's are saved by none of its ops: it is exact;
  - on generated models (values made without gradients, a teacher, parametrized weights,
    buffers of any size, in float32, float64, bfloat16 or bfloat16 beside float32 norms), all
    of the above at the least peak, and the training state each counted once as PyTorch holds
    it: the parameters, the buffers, the batch, the gradients of a plain step and AdamW's
    moments after one optimizer step;
  - bad input (a budget that is no size, a missing sweep) is one line naming it;
  - a chain saved anew at the same path is profiled again, not answered from the profile the
    sweep kept for the file it replaced (one line says why);
  - a chain cut for two data-parallel ranks (ckptlab.chain's ranks=2) runs under the sweep's
    --nproc=2, every row ok with the activation bytes it predicted, and is refused in one
    process (exit 2, one line naming the file, nothing written).
Under Bazel the sweep is in the runfiles; elsewhere $SWEEP names it.
"""

import csv
import os
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, assume, given, note, settings, strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
import ckptlab  # noqa: E402
from ckptlab import OptimizeError  # noqa: E402
from chain_models import (  # noqa: E402
    KINDS, WIDTH, Decoder, Program, UNet, program_loss, torchvision, trains)
import python_chain_test  # noqa: E402  (its helpers; as a module, so its tests are not run here)

SWEEP = os.environ.get("SWEEP") or os.path.join(os.environ.get("TEST_SRCDIR", ""),
                                                "ckptlab/experiments/sweep")
RNG_SNAPSHOT_BYTES = torch.get_rng_state().numel()


def python_numbers_as_tensors(chain):
    """The ops in the chain's stages that take a Python number where their schema takes a
    tensor."""
    count = 0
    for stage in chain:
        for node in stage.graph.nodes:
            schema = getattr(node.target, "_schema", None)
            if schema is None:
                continue
            for argument, value in zip(schema.arguments, node.args):
                if (str(argument.type) == "Tensor" and isinstance(value, (int, float))
                        and not isinstance(value, bool)):
                    count += 1
    return count


def stochastic(stage):
    return any("dropout" in str(n.target) or "bernoulli" in str(n.target)
               for n in stage.graph.nodes)


@st.composite
def generated_models(draw):
    """A program of chain_models.py's ops (values made without gradients, a teacher,
    parametrized weights, buffers from one element to a MiB, BatchNorm, dropout, in-place
    writes), in float32, float64, bfloat16, or bfloat16 with float32 norms; and its batch."""
    torch.manual_seed(draw(st.integers(0, 2**16)))
    ops = [("linear", (0, 0))] + [
        (draw(st.sampled_from(KINDS)), (draw(st.integers(0, 63)), draw(st.integers(0, 63))))
        for _ in range(draw(st.integers(2, 6)))]
    buffers = [draw(st.integers(1, 1 << 18)) for kind, _ in ops if kind == "buffer"]
    dtype, mixed = draw(st.sampled_from([(torch.float32, False), (torch.float64, False),
                                         (torch.bfloat16, False), (torch.bfloat16, True)]))
    note(f"ops {ops}, buffers {buffers}, {dtype}{' with float32 norms' if mixed else ''}")
    model = Program(ops, buffers).to_dtype(dtype, mixed)
    inputs = (torch.randn(6, WIDTH, dtype=dtype, requires_grad=True),
              torch.tensor([1., 1., 0., 1., 1., 0.], dtype=dtype))
    target = torch.randn(6, WIDTH, dtype=dtype)
    assume(trains(model, inputs, target))
    return model, inputs, target


class Optimize(unittest.TestCase):
    def answer(self, model, inputs, targets=(), loss=None, exact=True):
        """Optimizes `model` at a budget halfway between the least peak and store_all's, and
        checks the answer as the module docstring says."""
        batch = inputs + targets

        def optimize(budget):
            return ckptlab.optimize(model, inputs, budget, loss=loss, targets=targets,
                                    sweep=SWEEP, progress=False)

        with self.assertRaises(OptimizeError) as caught:
            optimize(1)
        message = str(caught.exception)
        self.assertIn(f"the model ({type(model).__name__})", message)
        self.assertNotIn("\n", message)
        least = int(re.search(r"least peak the planner reaches on [^,]*, ([0-9]+) bytes",
                              message).group(1))
        whole = optimize("16GiB")
        self.assertEqual(whole.predicted.step_ratio, 1.0)
        self.assertEqual(whole.predicted.plan, f"[0,{len(whole.stages)}) stored")
        # Room to plan (a profile taken again may differ by a few bytes from the one that named
        # the least peak), then halfway.
        self.assertGreater(whole.predicted.step_peak_bytes - least, 4096)
        budget = (least + whole.predicted.step_peak_bytes) // 2
        planned = optimize(budget)
        predicted = planned.predicted
        self.assertLessEqual(predicted.step_peak_bytes, budget)
        self.assertGreaterEqual(predicted.step_ratio, 1.0)
        self.assertLess(predicted.activation_bytes, whole.predicted.activation_bytes)

        n = len(inputs)
        loss = loss or (lambda output: output.square().mean())
        run = lambda *b: loss(model(*b[:n]), *b[n:])  # noqa: E731
        python_chain_test.ChainTest.assert_steps_equal(self, model, run, planned, batch, steps=2)
        state = [b.clone() for b in model.buffers()]
        baseline = list(model.parameters()) + list(model.buffers()) + list(batch)
        _, kept = ckptlab.kept_bytes(lambda: planned(*batch), baseline)
        with torch.no_grad():
            for b, s in zip(model.buffers(), state):
                b.copy_(s)
        self.assert_keeps_the_prediction(planned, batch, kept, exact)
        return planned

    def assert_keeps_the_prediction(self, planned, batch, kept, exact):
        """PyTorch keeps `kept` bytes under the plan: what was predicted, as the module docstring
        says."""
        predicted = planned.predicted
        plan = ckptlab.parse_plan(predicted.plan)
        snapshots = sum(1 for s in plan.segments if s.mode != "stored"
                        and any(stochastic(planned.stages[i]) for i in range(s.begin, s.end)))
        loss = planned(*batch).element_size()  # the scalar ckptlab holds, in the model's dtype
        expected = predicted.activation_bytes - loss - RNG_SNAPSHOT_BYTES * snapshots
        if exact:
            self.assertEqual(kept, expected, predicted.plan)
        self.assertGreaterEqual(kept, expected, predicted.plan)
        self.assertLessEqual(kept, expected + 8 * python_numbers_as_tensors(planned.stages),
                             predicted.plan)

    def test_a_unet_exactly(self):
        torch.manual_seed(0)
        # 32 px: at 16, LibTorch 2.6's operators' scratch holds every plan's peak within 2 KiB of
        # store_all's (1.13's, 20 KiB below), which leaves no budget to plan between.
        self.answer(UNet(), (torch.randn(2, 3, 32, 32, requires_grad=True),))

    def test_a_hugging_face_style_decoder(self):
        torch.manual_seed(0)
        ids = torch.randint(50, (2, 12))
        mask = torch.ones(2, 12, dtype=torch.int64)
        mask[1, 8:] = 0
        self.answer(Decoder(), (ids, mask, ids), loss=lambda output: output.loss, exact=False)

    @unittest.skipIf(torchvision is None, "torchvision is not installed")
    def test_mobilenet_v3_small(self):
        torch.manual_seed(0)
        model = torchvision.models.mobilenet_v3_small(weights=None)
        images, labels = torch.randn(4, 3, 64, 64), torch.tensor([3, 7, 1, 0])
        planned = self.answer(model, (images,), (labels,), loss=F.cross_entropy, exact=False)
        self.assertGreaterEqual(len(planned.stages), 11)  # its blocks

    def test_a_layer_no_gradient_reaches_is_kept_as_pytorch_keeps_it(self):
        """A linear and tanh whose output only a mask's shape reads: PyTorch frees their graph
        with their output, and so does the chain's step. The memory model, which keeps a
        stage's graph until its backward, predicted 192 bytes more than PyTorch kept, until the
        chain ran such layers without gradients."""
        torch.manual_seed(0)
        model = Program([("linear", (0, 0)), ("shape_mask", (1, 0)), ("linear", (0, 0)),
                         ("linear", (2, 0))])
        inputs = (torch.randn(6, WIDTH, requires_grad=True),
                  torch.tensor([1., 1., 0., 1., 1., 0.]))
        target = torch.randn(6, WIDTH)
        batch = inputs + (target,)
        planned = ckptlab.optimize(model, inputs, "16GiB", loss=program_loss, targets=(target,),
                                   sweep=SWEEP, progress=False)
        run = lambda *b: program_loss(model(*b[:2]), b[2])  # noqa: E731
        python_chain_test.ChainTest.assert_steps_equal(self, model, run, planned, batch, steps=2)
        self.assertIsNone(model.layers[0].weight.grad)  # as in the plain step: no gradient
        _, kept = ckptlab.kept_bytes(lambda: planned(*batch),
                                     list(model.parameters()) + list(model.buffers()) + list(batch))
        self.assert_keeps_the_prediction(planned, batch, kept, exact=True)

    @settings(max_examples=int(os.environ.get("EXAMPLES", 12)), deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(generated_models())
    def test_generated_models_in_their_own_dtypes(self, made):
        """At the least peak (or a little above it): the plain model's step, the bytes PyTorch
        keeps, and every byte of the training state counted once, each against PyTorch's own."""
        model, inputs, target = made
        batch = inputs + (target,)

        def optimize(budget):
            return ckptlab.optimize(model, inputs, budget, loss=program_loss, targets=(target,),
                                    sweep=SWEEP, progress=False)

        with self.assertRaises(OptimizeError) as caught:
            optimize(1)
        least = int(re.search(r"least peak the planner reaches on [^,]*, ([0-9]+) bytes",
                              str(caught.exception)).group(1))
        planned = optimize(least + max(4096, least // 50))
        predicted = planned.predicted
        note(f"{predicted}")
        run = lambda *b: program_loss(model(*b[:2]), b[2])  # noqa: E731
        python_chain_test.ChainTest.assert_steps_equal(self, model, run, planned, batch, steps=2)
        state = [b.clone() for b in model.buffers()]
        _, kept = ckptlab.kept_bytes(lambda: planned(*batch),
                                     list(model.parameters()) + list(model.buffers()) + list(batch))
        with torch.no_grad():
            for b, s in zip(model.buffers(), state):
                b.copy_(s)
        self.assert_keeps_the_prediction(planned, batch, kept, exact=False)

        def storage_bytes(tensors, besides=()):
            seen = {ckptlab.planned._storage(t)[0] for t in besides}
            sizes = dict(ckptlab.planned._storage(t) for t in tensors)
            return sum(size for key, size in sizes.items() if key not in seen)

        params = list(model.parameters())
        self.assertEqual(predicted.parameter_bytes, storage_bytes(params))
        self.assertEqual(predicted.buffer_bytes, storage_bytes(model.buffers(), params))
        self.assertEqual(predicted.batch_bytes, storage_bytes(batch))
        # A plain step's gradients, then AdamW's moments after an optimizer step (the model's
        # last use here: it changes the parameters).
        for p in params:
            p.grad = None
        program_loss(model(*inputs), target).backward()
        grads = [p.grad for p in params if p.grad is not None]
        self.assertEqual(predicted.gradient_bytes, storage_bytes(grads))
        adamw = torch.optim.AdamW(params)
        adamw.step()
        moments = [v for s in adamw.state.values() for k, v in s.items()
                   if k in ("exp_avg", "exp_avg_sq")]
        self.assertEqual(predicted.optimizer_bytes, storage_bytes(moments))
        self.assertEqual(predicted.total_peak_bytes,
                         predicted.parameter_bytes + predicted.buffer_bytes +
                         predicted.optimizer_bytes + predicted.batch_bytes +
                         max(predicted.step_peak_bytes, predicted.gradient_bytes))

    def test_bad_input_is_one_line_naming_it(self):
        model = UNet()
        images = torch.randn(2, 3, 16, 16)
        for budget in ["1GiB,recompute_all", "1:2", "", True, 1.5, "8 GiB"]:
            with self.subTest(budget=budget):
                with self.assertRaises(OptimizeError) as caught:
                    ckptlab.optimize(model, images, budget, sweep=SWEEP, progress=False)
                self.assertIn("budget=", str(caught.exception))
                self.assertNotIn("\n", str(caught.exception))
        missing = os.path.join(os.environ.get("TEST_TMPDIR", "/nonexistent"), "no-sweep")
        with self.assertRaises(OptimizeError) as caught:
            ckptlab.optimize(model, images, "1GiB", sweep=missing, progress=False)
        self.assertIn(f"no sweep at {missing}", str(caught.exception))
        with self.assertRaises(OptimizeError) as caught:  # the sweep's own refusal, one line
            ckptlab.optimize(model, images, "12parsecs", sweep=SWEEP, progress=False)
        self.assertIn("the sweep exited 2", str(caught.exception))
        self.assertIn("12parsecs", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))
        # A chain written by a newer torch than the sweep's LibTorch: refused, the model named
        # in place of the file, which is gone.
        with mock.patch.object(torch, "__version__", "99.0.0"):
            with self.assertRaises(OptimizeError) as caught:
                ckptlab.optimize(model, images, "1GiB", sweep=SWEEP, progress=False)
        self.assertIn("the model (UNet): written by torch 99.0.0, newer than the LibTorch",
                      str(caught.exception))
        self.assertNotIn("chain.pt", str(caught.exception))


class KeptProfiles(unittest.TestCase):
    def test_a_chain_written_anew_at_the_same_path_is_profiled_again(self):
        """The sweep keeps its profile under a digest of the file: a chain of the same shapes
        saved over it (other weights, another batch) is measured again, and the progress says
        why in one line."""
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as folder:
            path = os.path.join(folder, "unet.pt")
            out = os.path.join(folder, "out")

            def save(seed):
                torch.manual_seed(seed)
                ckptlab.chain(UNet(), torch.randn(2, 3, 16, 16)).save(path)

            def predict():
                run = subprocess.run([SWEEP, "--predict", f"--models=chain:file={path}",
                                      "--strategies=store_all", f"--out={out}"],
                                     capture_output=True, text=True, timeout=600)
                self.assertEqual(run.returncode, 0, run.stderr)
                return run.stderr

            save(0)
            predict()
            self.assertIn("by an earlier run; not measured again", predict())
            save(1)
            anew = predict()
            self.assertNotIn("not measured again", anew)
            lines = [line for line in anew.splitlines() if "another setting" in line]
            self.assertEqual(len(lines), 1, anew)
            self.assertIn("was made under another setting (this run's: file digest ", lines[0])


class DataParallel(unittest.TestCase):
    def test_a_chain_for_two_ranks_runs_under_nproc(self):
        torch.manual_seed(0)
        chain = ckptlab.chain(UNet(), torch.randn(4, 3, 16, 16), ranks=2)
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as folder:
            path = os.path.join(folder, "unet.pt")
            chain.save(path)
            model = f"--models=chain:file={path}"
            one = os.path.join(folder, "one")
            run = subprocess.run([SWEEP, model, "--strategies=store_all", f"--out={one}"],
                                 capture_output=True, text=True, timeout=600)
            self.assertEqual(run.returncode, 2)
            self.assertEqual(run.stderr.count("\n"), 1, run.stderr)
            self.assertIn(f"model chain:file={path} holds its batch for 2 ranks", run.stderr)
            self.assertIn("accepted: 2 ranks (--nproc=2)", run.stderr)
            self.assertFalse(os.path.exists(one))
            out = os.path.join(folder, "two")
            run = subprocess.run([SWEEP, model, "--strategies=store_all,recompute_all,uniform",
                                  "--nproc=2", "--steps=1", "--warmup=0", f"--out={out}"],
                                 capture_output=True, text=True, timeout=600)
            if run.returncode == 2 and "data parallel on cpu is not built" in run.stderr:
                # A build on a LibTorch without Gloo's headers (PyPI's wheel): NCCL alone.
                self.skipTest(run.stderr.strip())
            self.assertEqual(run.returncode, 0, run.stderr)
            with open(os.path.join(out, "results.csv")) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual(len(rows), 3)
            for row in rows:
                self.assertEqual((row["status"], row["world_size"]), ("ok", "2"), row["message"])
                self.assertEqual(row["activation_bytes"], row["predicted_activation_bytes"],
                                 row["strategy"])


if __name__ == "__main__":
    unittest.main()
