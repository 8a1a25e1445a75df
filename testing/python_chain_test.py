#!/usr/bin/env python3
"""ckptlab.chain: any PyTorch model cut into a chain of stages, against the plain model.

Models: generated programs over a pool of values (skips read from any earlier value, as a U-Net
or DenseNet does; residuals; tuples returned by a module; views and shape arithmetic; in-place
writes; BatchNorm and a counter as state; dropout; integer inputs and masks; several outputs),
torchvision's resnet50, vit_b_16, convnext_tiny, densenet121 and efficientnet_b0 where
python3-torchvision is installed, and a GPT written as Hugging Face writes one (ids and a padding
mask, a ModuleList, a head tied to the token embedding, a dataclass output, a masked loss), and
a U-Net (every encoder level concatenated into the decoder); the models are chain_models.py's.
Properties:
  - the chain's loss and gradients (every parameter's, the input's) equal the model's bitwise,
    and the buffers after a step equal the model's (BatchNorm statistics updated once);
  - ckptlab.apply(chain, plan) under generated plans gives the same, over two steps;
  - the chain holds the model's own parameters and buffers (the same tensors, tied ones once);
  - making a chain leaves the model's buffers, its attributes and the random streams as they
    were, and nothing of the trace on its tensors (the model deep-copies);
  - a chain for data-parallel ranks steps each rank's rows of the batch as the model does;
  - Chain.save writes the stages and the batch whole, replacing a link rather than following it;
  - granularity: at least one stage per block, a transformer's attention and MLP apart, what
    each stage keeps summing to what the chain keeps;
  - state read before its update reruns as the step read it; a checkpoint inside the model
    (reentrant, as Hugging Face's) is traced as what it wraps; frozen layers keep nothing, and
    unfreezing one after the cut is refused;
  - a model that cannot be traced, writes a parameter, gives a buffer a new tensor, or does what
    a trace cannot see, a bad batch, loss, max_stages or ranks: ChainError, one line naming the
    module or the value.
Runs on the torch of the Python that runs it (1.13 here, PyPI's 2.15 in CI).
"""

import copy
import os
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
from hypothesis import (  # noqa: E402
    HealthCheck, assume, given, note, settings, strategies as st)

import ckptlab  # noqa: E402
from ckptlab import ChainError  # noqa: E402

from chain_models import (  # noqa: E402
    KINDS, WIDTH, Decoder, Program, UNet, program_loss, torchvision, trains)
from python_apply_test import segments  # noqa: E402  (plan trees of every mode)


@st.composite
def programs(draw):
    torch.manual_seed(draw(st.integers(0, 2**16)))
    count = draw(st.integers(1, 8))
    ops = [(draw(st.sampled_from(KINDS)), (draw(st.integers(0, 63)), draw(st.integers(0, 63))))
           for _ in range(count)]
    model = Program([("linear", (0, 0))] + ops)
    batch = (torch.randn(6, WIDTH, requires_grad=True), torch.tensor([1., 1., 0., 1., 1., 0.]),
             torch.randn(6, WIDTH))
    assume(trains(model, batch[:2], batch[2]))
    return model, batch


def step(run, model, batch, seed):
    """Loss, gradients (every parameter's, then the floating-point inputs') and buffers after
    one step of `run(*batch)`."""
    batch = [t.detach().clone().requires_grad_(t.requires_grad) for t in batch]
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    loss = run(*batch)
    loss.backward()
    grads = [p.grad for p in model.parameters()] + [t.grad for t in batch if t.requires_grad]
    return loss.detach(), grads, [b.clone() for b in model.buffers()]


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.equal(a, b)


class ChainTest(unittest.TestCase):
    def assert_steps_equal(self, model, plain, chained, batch, steps=1):
        """`chained(*batch)` steps as `plain(*batch)` does, from the same buffers."""
        start = [b.clone() for b in model.buffers()]
        expected = []
        for seed in range(steps):
            expected.append(step(plain, model, batch, seed))
        with torch.no_grad():
            for b, s in zip(model.buffers(), start):
                b.copy_(s)
        for seed in range(steps):
            loss, grads, buffers = step(chained, model, batch, seed)
            self.assertTrue(same(loss, expected[seed][0]), (loss, expected[seed][0]))
            self.assertEqual(len(grads), len(expected[seed][1]))
            for g, e in zip(grads, expected[seed][1]):
                self.assertTrue(same(g, e))
            for b, e in zip(buffers, expected[seed][2]):
                self.assertTrue(same(b, e))

    def assert_own_tensors(self, model, chain):
        own = {id(t) for t in list(model.parameters()) + list(model.buffers())}
        for t in list(chain.parameters()) + list(chain.buffers()):
            self.assertIn(id(t), own)
        self.assertEqual({id(p) for p in chain.parameters()},
                         {id(p) for p in model.parameters() if p.numel()} &
                         {id(p) for p in chain.parameters()})

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(programs(), st.data())
    def test_a_chain_and_its_plans_step_as_the_model(self, made, data):
        model, batch = made

        def plain(*b):
            return program_loss(model(*b[:2]), b[2])

        buffers = [b.clone() for b in model.buffers()]
        torch.manual_seed(7)
        rng = torch.get_rng_state()
        chain = ckptlab.chain(model, batch[:2], loss=program_loss, targets=batch[2])
        note(f"ops {model.ops}; {len(chain)} stages")
        self.assertTrue(torch.equal(torch.get_rng_state(), rng))
        for b, before in zip(model.buffers(), buffers):
            self.assertTrue(torch.equal(b, before))
        copy.deepcopy(model)  # nothing of the trace left on its tensors or attributes
        self.assert_own_tensors(model, chain)
        self.assert_steps_equal(model, plain, chain, batch)
        plan = data.draw(segments(0, len(chain), 2))
        self.assert_steps_equal(model, plain, ckptlab.apply(chain, plan), batch, steps=2)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(programs(), st.data())
    def test_a_chain_for_ranks_steps_each_ranks_rows_as_the_model(self, made, data):
        model, batch = made

        def plain(*b):
            return program_loss(model(*b[:2]), b[2])

        chain = ckptlab.chain(model, batch[:2], loss=program_loss, targets=batch[2], ranks=2)
        self.assertEqual(chain.ranks, 2)
        planned = ckptlab.apply(chain, data.draw(segments(0, len(chain), 2)))
        for rank in (0, 1):
            share = chain.share(rank)
            for t, whole in zip(share, batch):
                self.assertTrue(torch.equal(t, whole[3 * rank:3 * rank + 3]))
            self.assert_steps_equal(model, plain, chain, share)
            self.assert_steps_equal(model, plain, planned, share)
        with self.assertRaises(ChainError) as caught:
            chain.share(2)
        self.assertIn("rank=2; accepted: a whole number in 0..1", str(caught.exception))

    def test_max_stages_keeps_the_cuts_carrying_least(self):
        torch.manual_seed(0)
        model = Program([("linear", (-1, -1))] * 8)
        batch = (torch.randn(6, WIDTH, requires_grad=True), torch.ones(6))
        full = ckptlab.chain(model, batch)
        self.assertGreaterEqual(len(full), 8)
        for most in (1, 3):
            cut = ckptlab.chain(model, batch, max_stages=most)
            self.assertEqual(len(cut), most)
            self.assert_steps_equal(model, lambda *b: model(*b)["main"].square().mean(), cut,
                                    batch)

    def test_bad_input_is_one_line_naming_it(self):
        model = Program([("linear", (0, 0))])
        batch = (torch.randn(6, WIDTH), torch.ones(6))
        cases = [
            (dict(inputs=(batch[0], 3)), "inputs must be a tensor or a tuple of tensors; got a "
                                         "tuple"),
            (dict(inputs=batch, max_stages=0), "max_stages=0; accepted"),
            (dict(inputs=batch, max_stages=True), "max_stages=True; accepted"),
            (dict(inputs=batch, ranks=4), "ranks=4 for a batch of a torch.float32 tensor of shape "
                                          "[6, 4], a torch.float32 tensor of shape [6]; accepted: "
                                          "a whole number in 1..65536 dividing every tensor's "
                                          "first dimension"),
            (dict(inputs=batch, ranks=0), "ranks=0 for a batch"),
            (dict(inputs=(batch[0], torch.tensor(1.)), ranks=2), "the batch holds a "
                                                                  "torch.float32 tensor of shape "
                                                                  "[], which has no rows"),
            (dict(inputs=(batch[0][:0], batch[1][:0])), "the batch holds a torch.float32 tensor "
                                                         "of shape [0, 4], which has no rows; "
                                                         "accepted: tensors of one row or more"),
            (dict(inputs=batch, loss=lambda out: out["main"]), "the loss must return a "
                                                               "floating-point scalar tensor"),
            (dict(inputs=batch[:1]), "the model (Program) fails on the example batch: TypeError"),
        ]
        for kwargs, words in cases:
            with self.subTest(words=words):
                with self.assertRaises(ChainError) as caught:
                    ckptlab.chain(model, **kwargs)
                self.assertIn(words, str(caught.exception))
                self.assertNotIn("\n", str(caught.exception))
        with self.assertRaises(ChainError) as caught:  # nothing for the default loss to square
            ckptlab.chain(nn.Identity(), torch.ones(3, dtype=torch.int64))
        self.assertIn("no floating-point tensor for the default loss", str(caught.exception))

    def test_save_writes_whole_and_replaces_a_link(self):
        torch.manual_seed(0)
        model = UNet()
        chain = ckptlab.chain(model, torch.randn(2, 3, 16, 16))
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as folder:
            victim = os.path.join(folder, "victim")
            with open(victim, "w") as f:
                f.write("not to be written through")
            path = os.path.join(folder, "chain.pt")
            os.symlink(victim, path)
            chain.save(path)
            self.assertFalse(os.path.islink(path))
            with open(victim) as f:
                self.assertEqual(f.read(), "not to be written through")
            extra = {"ckptlab_torch": ""}
            saved = torch.jit.load(path, _extra_files=extra)
            self.assertEqual(extra["ckptlab_torch"], torch.__version__.encode())  # the writer's
            self.assertEqual(len(list(saved.children())), len(chain))
            self.assertTrue(torch.equal(saved.ckptlab_batch_0, chain.example[0]))
            self.assertTrue(torch.equal(saved.ckptlab_ranks, torch.tensor(1)))
            with self.assertRaises(OSError):
                chain.save(os.path.join(folder, "missing", "chain.pt"))
            self.assertEqual(sorted(os.listdir(folder)), ["chain.pt", "victim"])
        with self.assertRaises(ChainError) as caught:
            ckptlab.Chain(nn.Linear(2, 2)).save("never-written.pt")
        self.assertIn("holds no batch", str(caught.exception))

    def test_state_read_before_it_is_updated_reruns_as_the_step_read_it(self):
        class Average(nn.Module):  # a buffer read, then updated without gradients
            def __init__(self):
                super().__init__()
                self.inner, self.outer = nn.Linear(8, 8), nn.Linear(8, 8)
                self.register_buffer("average", torch.zeros(8))

            def forward(self, x):
                h = torch.tanh(self.inner(x) + self.average)
                with torch.no_grad():
                    self.average.mul_(0.5).add_(h.mean(0))
                return self.outer(h)

        class Normalised(nn.Module):  # spectral_norm's power method: reads v, then writes u, v
            def __init__(self):
                super().__init__()
                self.inner = nn.utils.parametrizations.spectral_norm(nn.Linear(8, 8))
                self.outer = nn.Linear(8, 1)

            def forward(self, x):
                return self.outer(torch.relu(self.inner(x)))

        for make in (Average, Normalised):
            with self.subTest(model=make.__name__):
                torch.manual_seed(0)
                model = make()
                with torch.no_grad():  # a weight far from the power method's converged u, v
                    for p in model.parameters():
                        p.mul_(3)
                x = torch.randn(4, 8)
                chain = ckptlab.chain(model, x)
                plain = lambda x: model(x).square().mean()  # noqa: E731
                for k in range(1, len(chain) + 1):
                    rest = f", [{k},{len(chain)}) stored" if k < len(chain) else ""
                    self.assert_steps_equal(model, plain,
                                            ckptlab.apply(chain, f"[0,{k}) checkpointed{rest}"),
                                            (x,), steps=2)

    def test_what_a_trace_cannot_see_is_refused_not_trained_otherwise(self):
        class Reverse(torch.autograd.Function):  # a gradient-reversal layer's own backward
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, grad):
                return -grad

        class Model(nn.Module):
            def __init__(self, kind):
                super().__init__()
                self.kind, self.inner, self.outer = kind, nn.Linear(8, 8), nn.Linear(8, 1)

            def forward(self, x):
                h = self.inner(x)
                if self.kind == "function":
                    h = Reverse.apply(h)
                elif self.kind == "hook" and h.requires_grad:
                    h.register_hook(lambda g: 10 * g)
                elif self.kind == "penalty":  # a gradient penalty, autograd.grad in the forward
                    x = x.detach().requires_grad_(True)
                    y = self.outer(torch.tanh(self.inner(x)))
                    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
                    return y + g.norm(dim=1, keepdim=True)
                return self.outer(torch.tanh(h))

        for kind in ("function", "hook", "penalty"):
            with self.subTest(kind=kind):
                torch.manual_seed(0)
                model = Model(kind)
                x = torch.randn(4, 8)
                try:
                    chain = ckptlab.chain(model, x)
                except ChainError as e:
                    self.assertIn("a step of the chain does not give the model's gradient of "
                                  "inner.weight", str(e))
                    self.assertNotIn("\n", str(e))
                    self.assertTrue(all(p.grad is None for p in model.parameters()))
                    continue
                # Newer torches trace autograd.grad's own operators: then the chain is the step.
                self.assertEqual(kind, "penalty")
                self.assert_steps_equal(model, lambda x: model(x).square().mean(), chain, (x,))

    def test_a_detach_in_the_forward_is_a_detach_of_the_chain(self):
        """h + relu(h).detach(), cut on a batch where the detached branch is zero (where the
        chain's own check cannot tell a detach from an alias, which newer torches trace it as),
        steps as the model on a batch where it is not; an in-place detach_ is either followed
        or refused by name."""
        class Model(nn.Module):
            def __init__(self, in_place):
                super().__init__()
                self.in_place, self.inner, self.outer = in_place, nn.Linear(8, 8), nn.Linear(8, 1)

            def forward(self, x):
                h = self.inner(x)
                kept = torch.relu(h) * 2
                kept = kept.detach_() if self.in_place else kept.detach()
                return self.outer(torch.tanh(h) + kept * h)

        for in_place in (False, True):
            with self.subTest(in_place=in_place):
                torch.manual_seed(0)
                model = Model(in_place)
                with torch.no_grad():
                    model.inner.bias.fill_(-10)
                quiet, loud = torch.randn(4, 8) / 100, torch.randn(4, 8) * 100
                try:
                    chain = ckptlab.chain(model, quiet)
                except ChainError as e:
                    self.assertTrue(in_place, str(e))
                    self.assertIn("x.detach_() in the forward", str(e))
                    self.assertNotIn("\n", str(e))
                    continue
                self.assert_steps_equal(model, lambda x: model(x).square().mean(), chain,
                                        (loud,))

    def test_a_chain_is_cut_for_its_frozen_layers_and_leaves_the_batch_untouched(self):
        class Writes(nn.Module):  # writes its input in place
            def __init__(self):
                super().__init__()
                self.inner, self.outer = nn.Linear(8, 8), nn.Linear(8, 1)

            def forward(self, x):
                return self.outer(torch.tanh(self.inner(x.mul_(2))))

        torch.manual_seed(0)
        model = Writes()
        model.inner.requires_grad_(False)
        x = torch.randn(4, 8)
        before = x.clone()
        chain = ckptlab.chain(model, x)
        self.assertTrue(torch.equal(x, before))
        self.assertTrue(torch.equal(chain.example[0], before))
        plain = lambda x: model(x.clone()).square().mean()  # noqa: E731
        self.assert_steps_equal(model, plain, lambda x: chain(x.clone()), (x,))
        self.assertIsNone(model.inner.weight.grad)
        model.inner.requires_grad_(True)  # unfrozen: it would need another chain
        for run in (chain, ckptlab.apply(chain, f"[0,{len(chain)}) checkpointed")):
            with self.assertRaises(ChainError) as caught:
                run(x.clone())
            self.assertIn("cut with inner.weight frozen, and it is not now", str(caught.exception))

    def test_a_parameter_written_while_the_model_runs_is_refused_by_name(self):
        class Decaying(nn.Module):  # a rerun would scale the weight again
            def __init__(self):
                super().__init__()
                self.inner = nn.Linear(WIDTH, WIDTH)

            def forward(self, x):
                with torch.no_grad():
                    self.inner.weight.mul_(0.9)
                return self.inner(x)

        with self.assertRaises(ChainError) as caught:
            ckptlab.chain(nn.Sequential(nn.Tanh(), Decaying()), torch.randn(2, WIDTH))
        self.assertIn("writes its parameter 1.inner.weight in place (mul_", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))

    def test_a_buffer_given_a_new_tensor_is_refused_by_name(self):
        class Rebinding(nn.Module):  # an average kept by assignment, not in place
            def __init__(self):
                super().__init__()
                self.inner = nn.Linear(WIDTH, WIDTH)
                self.register_buffer("average", torch.zeros(WIDTH))

            def forward(self, x):
                y = self.inner(x)
                self.average = 0.9 * self.average + 0.1 * y.detach().mean(0)
                return y

        model = nn.Sequential(nn.Tanh(), Rebinding())
        before = model[1].average
        with self.assertRaises(ChainError) as caught:
            ckptlab.chain(model, torch.randn(2, WIDTH))
        self.assertIn("gives its buffer 1.average a new tensor", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))
        self.assertIs(model[1].average, before)  # put back as it was
        self.assertTrue(torch.equal(before, torch.zeros(WIDTH)))

    def test_a_checkpoint_inside_the_model_is_traced_as_what_it_wraps(self):
        class Checkpointed(nn.Module):  # gradient checkpointing as Hugging Face's models do it
            def __init__(self):
                super().__init__()
                self.stem = nn.Linear(WIDTH, WIDTH)  # its output requires grad, as an embedding's
                self.blocks = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(3))

            def forward(self, x):
                x = self.stem(x)
                for block in self.blocks:
                    x = torch.tanh(torch.utils.checkpoint.checkpoint(block, x, use_reentrant=True))
                return x

        torch.manual_seed(0)
        model = Checkpointed()
        x = torch.randn(3, WIDTH)
        chain = ckptlab.chain(model, x)
        plain = lambda x: model(x).square().mean()  # noqa: E731
        self.assert_steps_equal(model, plain, chain, (x,))
        self.assert_steps_equal(model, plain, ckptlab.apply(chain, f"[0,{len(chain)}) stored"),
                                (x,))

    def test_a_model_that_cannot_be_traced_is_named(self):
        class Gate(nn.Module):
            def forward(self, x):
                return x * 2 if bool(x.sum() > 0) else x  # a value read from the data

        model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Sequential(nn.ReLU(), Gate()))
        with self.assertRaises(ChainError) as caught:
            ckptlab.chain(model, torch.randn(2, WIDTH))
        message = str(caught.exception)
        self.assertIn("1.1 (Gate) cannot be traced by running it", message)
        self.assertNotIn("\n", message)

    def test_values_read_from_a_draw_or_from_lengths_are_refused_by_name(self):
        class LayerDrop(nn.Module):  # torchaudio's wav2vec2: a draw per layer, read in Python
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))

            def forward(self, x):
                for layer in self.layers:
                    if not (self.training and torch.rand(1).item() <= 0.1):
                        x = layer(x)
                return x

        class Padded(nn.Module):  # torchaudio's Conformer: a mask as long as the longest input
            def forward(self, x, lengths):
                longest = int(torch.max(lengths).item())
                mask = torch.arange(longest)[None, :] >= lengths[:, None]
                return x[:, :longest].masked_fill(mask[..., None], 0.0)

        for model, inputs, name in [
                (nn.Sequential(nn.Linear(WIDTH, WIDTH), LayerDrop()), (torch.randn(2, WIDTH),),
                 "1 (LayerDrop)"),
                (Padded(), (torch.randn(2, 5, WIDTH), torch.tensor([5, 3])), "the model (Padded)")]:
            with self.assertRaises(ChainError) as caught:
                ckptlab.chain(model, inputs)
            self.assertIn(f"{name} cannot be traced by running it", str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))


class RealModels(unittest.TestCase):
    def test_a_hugging_face_style_decoder(self):
        torch.manual_seed(0)
        model = Decoder()
        ids = torch.randint(0, 50, (2, 12))
        mask = torch.ones(2, 12, dtype=torch.int64)
        mask[1, 9:] = 0  # padding

        def loss(output):
            return output.loss

        batch = (ids, mask, ids)
        chain = ckptlab.chain(model, batch, loss=loss)
        self.assertGreaterEqual(len(chain), 2 * len(model.h))  # attention and MLP apart
        kept = chain.kept_per_stage(*batch)
        self.assertEqual(sum(kept), ckptlab.kept_bytes(lambda: chain(*batch),
                                                       list(model.parameters()) + [ids, mask])[1])
        self.assertLess(max(kept), sum(kept) / 4)  # no stage holds a block's activations
        tied = [p for p in chain.parameters() if p is model.wte.weight]
        self.assertEqual(len(tied), 1)
        ChainTest.assert_own_tensors(self, model, chain)
        ChainTest.assert_steps_equal(self, model, lambda *b: model(*b).loss, chain, batch)
        plan = f"[0,{len(chain) // 2}) checkpointed, [{len(chain) // 2},{len(chain)}) stored"
        ChainTest.assert_steps_equal(self, model, lambda *b: model(*b).loss,
                                     ckptlab.apply(chain, plan), batch, steps=2)

    def test_a_unet_cut_where_every_skip_is_alive(self):
        torch.manual_seed(0)
        model = UNet()
        images = torch.randn(2, 3, 16, 16, requires_grad=True)
        chain = ckptlab.chain(model, images)
        ChainTest.assert_own_tensors(self, model, chain)
        plain = lambda x: model(x).square().mean()  # noqa: E731
        ChainTest.assert_steps_equal(self, model, plain, chain, (images,))
        inside = [stage for stage in list(chain)[1:]
                  if len([n for n in stage.graph.nodes if n.op == "placeholder"]) > 1]
        self.assertTrue(inside)  # some cuts carry a skip beside the tensor going down or up
        plan = f"[0,{len(chain) // 2}) checkpointed, [{len(chain) // 2},{len(chain)}) offloaded"
        ChainTest.assert_steps_equal(self, model, plain, ckptlab.apply(chain, plan), (images,),
                                     steps=2)

    @unittest.skipIf(torchvision is None, "torchvision is not installed")
    def test_torchvision_models(self):
        cases = [  # name, keyword arguments, the number of blocks
            ("resnet50", {}, 16),
            ("vit_b_16", {"image_size": 32}, 12),
            ("convnext_tiny", {}, 18),
            ("densenet121", {}, 58),
            ("efficientnet_b0", {}, 16),
        ]
        for name, kwargs, blocks in cases:
            with self.subTest(model=name):
                torch.manual_seed(0)
                model = getattr(torchvision.models, name)(weights=None, **kwargs)
                images = torch.randn(2, 3, 32, 32, requires_grad=True)
                labels = torch.tensor([3, 7])
                chain = ckptlab.chain(model, images, loss=F.cross_entropy, targets=labels)
                self.assertGreaterEqual(len(chain), blocks)
                ChainTest.assert_own_tensors(self, model, chain)
                plain = lambda x, y: F.cross_entropy(model(x), y)  # noqa: E731
                ChainTest.assert_steps_equal(self, model, plain, chain, (images, labels))
                third = len(chain) // 3
                plan = (f"[0,{third}) checkpointed, [{third},{2 * third}) recompute-all, "
                        f"[{2 * third},{len(chain)}) stored")
                ChainTest.assert_steps_equal(self, model, plain, ckptlab.apply(chain, plan),
                                             (images, labels))


if __name__ == "__main__":
    unittest.main()
