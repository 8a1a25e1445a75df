#!/usr/bin/env python3
"""ckptlab's plans for exported models, run by PyTorch (python/ckptlab), against the plain model.

The two example models (examples/export_cnn.py, examples/export_decoder.py) are exported at a small
size, and a chain of what users' models hold besides (a tensor returned twice, the input returned
beside a new tensor, views of the input, the input itself, a zero-element view, a tuple taken whole,
an in-place write to the input, BatchNorm and a counter read after its update, a concatenation
handing BatchNorm a slice of its gradient, random numbers without a generator, a zero-element
parameter) is scripted, and two models that are no sequence (chain_models.py's GPT with a padding
mask and tied head, and U-Net) are cut by ckptlab.chain and saved with their batch (chain:file=);
each is swept by ckptlab under every default strategy and a plan of every segment mode (the chain's
with several checkpoints nested in one), and each row's plan (results.csv's `plan` column) is
applied in PyTorch to the same file's stages. Checked, per row:
  ckptlab  status ok, gradients equal to store_all's (max_grad_diff_vs_store_all 0), predicted
           activation bytes equal to measured;
  PyTorch  the planned model's gradients (every parameter's and the input's) and the buffers
           after its step (from the same state) equal the plain model's bitwise, and the bytes
           PyTorch keeps for backward (ckptlab.kept_bytes: saved tensors and checkpoints'
           inputs, each storage once, less the parameters, the buffers, the code's constant
           tensors and the batch, which exist before the step) equal ckptlab's predicted
           activation bytes less what ckptlab holds that is no saved tensor: the loss scalar;
           the RNG snapshot that each checkpointed segment drawing random numbers keeps from
           its forward to its rerun (ckptlab.apply's checkpoints keep one too, outside
           autograd's saved tensors); and a stored segment's outputs where an offloaded segment
           takes them (ckptlab's executor holds them for the stored segment's backward call).
           To the byte (docs/torchscript.md).
With --torchvision (torchvision_crosscheck_test) the models are torchvision's instead: resnet50,
convnext_tiny, densenet121, efficientnet_b0, swin_t and a small VisionTransformer, cut by ckptlab.chain at
32 px under cross-entropy, checked the same way. Under Bazel the sweep is in the runfiles;
elsewhere $SWEEP names it. Runs on the torch of the Python that runs it (Debian's python3-torch
1.13 here, PyPI's 2.15 in CI).
"""

import csv
import os
import subprocess
import sys
import tempfile

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
import ckptlab  # noqa: E402  (after the path)
from ckptlab.plan import parse_plan  # noqa: E402
from chain_models import WIDTH, Decoder, Program, UNet, program_loss, torchvision  # noqa: E402
from stage_modules import (  # noqa: E402
    Concat, Counter, EmptyJoin, EmptyParameter, EmptySlice, InPlace, Linear, PassThrough, Random,
    Scale, Transposed, Twice, TupleJoin, TupleScale)

RNG_SNAPSHOT_BYTES = torch.get_rng_state().numel()  # the CPU generator's state (mt19937)


def run(argv, what):
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {what} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


class Example:
    """An exported file, its ckptlab spec, its batch and loss as ckptlab draws them, and a plan
    of every segment mode, nested, which no default strategy makes on a CPU (offloaded
    segments, recompute-all inside a checkpoint)."""

    def __init__(self, path, spec, make_batch, loss, plan):
        self.path, self.spec, self.make_batch, self.loss = path, spec, make_batch, loss
        self.plan = plan


def export_chain(path, width):
    """What users' models hold, as a scripted nn.Sequential of 21 stages."""
    torch.manual_seed(3)
    stages = [Linear(width), Twice(), TupleJoin(), Linear(width), PassThrough(), TupleJoin(),
              Transposed(), Transposed(), nn.Flatten(), Scale(), InPlace(), EmptySlice(),
              EmptyJoin(), nn.BatchNorm1d(width), Concat(width), Counter(), Random(),
              EmptyParameter(), PassThrough(), TupleScale(), Linear(width)]
    torch.jit.script(nn.Sequential(*stages)).save(path)


def examples(tmp):
    cnn = os.path.join(tmp, "cnn.pt")
    decoder = os.path.join(tmp, "decoder.pt")
    run([sys.executable, os.path.join(ROOT, "examples/export_cnn.py"), cnn, "--width=8",
         "--depth=3", "--classes=10"], "export_cnn.py")
    run([sys.executable, os.path.join(ROOT, "examples/export_decoder.py"), decoder, "--vocab=64",
         "--context=32", "--width=32", "--heads=2", "--layers=3"], "export_decoder.py")

    def images():
        x = torch.randn(4, 3, 16, 16, requires_grad=True)
        return (x,), torch.randint(10, (4,))

    def tokens():
        ids = torch.randint(64, (2, 17))
        return (ids[:, :16].contiguous(),), ids[:, 1:].contiguous()

    def cross_entropy(y, targets):
        return nn.functional.cross_entropy(y.reshape(-1, y.size(-1)), targets.reshape(-1))

    chain = os.path.join(tmp, "chain.pt")
    export_chain(chain, width=6)

    def features():
        return (torch.randn(4, 6, requires_grad=True),), None

    def mean_square(y, targets):
        return y.pow(2).mean()

    torch.manual_seed(5)
    ids = torch.randint(50, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 8:] = 0
    gpt = chain_example(os.path.join(tmp, "gpt.pt"), Decoder(), (ids, mask, ids),
                        lambda output: output.loss)
    unet = chain_example(os.path.join(tmp, "unet.pt"), UNet(),
                         (torch.randn(2, 3, 16, 16, requires_grad=True),), None)
    # Values computed without gradients (a scale, a teacher), parametrized weights whose power
    # method runs without them and writes their buffers, BatchNorm.
    torch.manual_seed(6)
    program = Program([("linear", (0, 0)), ("no_grad", (1, 0)), ("teacher", (2, 1)),
                       ("parametrized", (3, 2)), ("spectral_hook", (4, 3)), ("batch_norm", (5, 5)),
                       ("linear", (6, 6))])
    mask = torch.tensor([1., 1., 0., 1.])
    no_grad = chain_example(os.path.join(tmp, "no_grad.pt"), program,
                            (torch.randn(4, WIDTH, requires_grad=True), mask), program_loss,
                            targets=(torch.randn(4, WIDTH),))

    return [
        Example(cnn, f"torchscript:file={cnn}:input=3x16x16:classes=10:batch=4", images,
                cross_entropy, "[0,2) offloaded {[0,1) checkpointed, [1,2) stored}, "
                "[2,4) recompute-all, [4,6) checkpointed {[4,5) offloaded, [5,6) stored}"),
        Example(decoder, f"torchscript:file={decoder}:tokens=16:vocab=64:batch=2", tokens,
                cross_entropy, "[0,1) stored, [1,3) offloaded, "
                "[3,5) checkpointed {[3,4) recompute-all, [4,5) stored}"),
        # Inner checkpoints that start past their outer one's input: on torch 1.13, PyTorch's
        # own nested checkpoints kept each inner one's input alive from the forward on.
        Example(chain, f"torchscript:file={chain}:input=6:batch=4", features, mean_square,
                "[0,1) stored, [1,13) checkpointed {[1,3) stored, [3,6) checkpointed, "
                "[6,9) checkpointed, [9,11) offloaded, [11,13) stored}, [13,14) stored, "
                "[14,16) recompute-all, [16,21) stored"),
        gpt,
        unet,
        no_grad,
    ]


def torchvision_examples(tmp, mine):
    """torchvision's models, cut by ckptlab.chain at 32 px, batch 2, under cross-entropy: the
    CNNs as torchvision builds them, and its VisionTransformer (vit_b_16's class) at a width
    whose file is not vit_b_16's 330 MB of parameters; those whose index `mine` takes."""
    models = [("resnet50", torchvision.models.resnet50),
              ("convnext_tiny", torchvision.models.convnext_tiny),
              ("densenet121", torchvision.models.densenet121),
              ("efficientnet_b0", torchvision.models.efficientnet_b0),
              ("swin_t", torchvision.models.swin_t),  # a mask made from shapes between stages
              ("vit", lambda: torchvision.models.VisionTransformer(
                  image_size=32, patch_size=8, num_layers=3, num_heads=2, hidden_dim=32,
                  mlp_dim=64, num_classes=10))]
    out = []
    for name, make in [m for k, m in enumerate(models) if mine(k)]:
        torch.manual_seed(11)
        model = make()
        images = torch.randn(2, 3, 32, 32, requires_grad=True)
        out.append(chain_example(os.path.join(tmp, f"{name}.pt"), model, (images,),
                                 nn.functional.cross_entropy, targets=(torch.tensor([3, 7]),)))
    return out


def chain_example(path, model, inputs, loss, targets=()):
    """`model` cut by ckptlab.chain and saved at `path` (chain:file=), its batch the file's as
    ckptlab takes it, its loss what the last stage returns, and a plan of every mode."""
    chain = ckptlab.chain(model, inputs, loss=loss, targets=targets)
    chain.save(path)
    batch = [b for name, b in torch.jit.load(path).named_buffers(recurse=False)
             if name.startswith("ckptlab_batch_")]

    def make_batch():
        return tuple(b.detach().clone().requires_grad_(b.is_floating_point()) for b in batch), None

    def the_output(y, targets):
        return y

    return Example(path, f"chain:file={path}", make_batch, the_output, every_mode(len(chain)))


def every_mode(stages):
    """A plan of every segment mode, nested, for a chain of `stages` (at least 7) stages."""
    a = max(3, stages // 4)
    b = max(a + 1, stages // 2)
    c = max(b + 2, 3 * stages // 4)
    return (f"[0,1) stored, [1,{a}) offloaded {{[1,2) checkpointed, [2,{a}) stored}}, "
            f"[{a},{b}) recompute-all, [{b},{c}) checkpointed {{[{b},{b + 1}) offloaded, "
            f"[{b + 1},{c}) stored}}, [{c},{stages}) stored")


def constants_of(stages):
    """The tensors stages' code holds as constants (a traced chain's Python number where an op
    takes a tensor: `x / 2.0`): made at load, as parameters are, so ckptlab's meter never sees a
    step allocate them, though autograd may save them (DivBackward keeps its divisor)."""
    return [t for stage in stages for t in stage.code_with_constants[1].const_mapping.values()
            if isinstance(t, torch.Tensor)]


def stochastic_stages(stages):
    """Which stages draw random numbers: their inlined graphs, as ckptlab reads them."""
    out = []
    for stage in stages:
        graph = stage.forward.graph.copy()
        torch._C._jit_pass_inline(graph)
        kinds = set()

        def walk(block):
            for node in block.nodes():
                kinds.add(node.kind())
                for inner in node.blocks():
                    walk(inner)

        walk(graph)
        out.append(any(word in k for k in kinds
                       for word in ("dropout", "bernoulli", "rand", "normal")))
    return out


def checkpointed_with_rng(plan, stochastic):
    """Top-level checkpointed, offloaded and recompute-all segments with a stochastic stage:
    each keeps an RNG snapshot from its forward to its rerun."""
    return sum(1 for s in plan.segments
               if s.mode != "stored" and any(stochastic[s.begin:s.end]))


def held_for_stored_backward(plan, stages, inputs):
    """Bytes ckptlab's executor keeps that PyTorch does not: a stored segment's outputs (their
    storages), which the executor holds for its backward call, where the next segment is
    offloaded (PyTorch keeps only the host copy; where the next segment is checkpointed, both
    keep them). The batch, which a chain's stages pass on, is the baseline's, not these."""
    total = 0
    for before, s in zip(plan.segments, plan.segments[1:]):
        if before.mode == "stored" and s.mode == "offloaded":
            batch = [t.detach().clone() for t in inputs]
            with torch.no_grad():
                first = nn.Sequential(*list(stages)[:s.begin])
                y = ckptlab.apply(first, f"[0,{s.begin}) stored")(*batch)
            ys = y if isinstance(y, (tuple, list)) else (y,)
            held = dict(ckptlab.planned._storage(t) for t in ys)
            for t in batch:
                held.pop(ckptlab.planned._storage(t)[0], None)
            total += sum(held.values())
    return total


def step(model, batch, loss_fn, baseline, seed, state):
    """One forward and backward from `seed`, the buffers first set to `state` (their values
    before any step): the gradients (the parameters', then the input's) and the buffers after,
    the bytes kept for backward besides `baseline`'s, and the loss's own."""
    inputs, targets = batch
    params = list(model.parameters())
    for t in params + list(inputs):
        t.grad = None
    with torch.no_grad():
        for b, value in zip(model.buffers(), state):
            b.copy_(value)
    torch.manual_seed(seed)
    loss, kept = ckptlab.kept_bytes(lambda: loss_fn(model(*inputs), targets),
                                    exclude=baseline + list(inputs) + ([] if targets is None
                                                                       else [targets]))
    loss.backward()
    grads = [p.grad for p in params] + [t.grad for t in inputs if t.requires_grad]
    grads += [b.clone() for b in model.buffers()]
    return grads, kept, loss.numel() * loss.element_size()


def main(argv):
    """No argument: the example models; --torchvision: torchvision's."""
    if argv not in ([], ["--torchvision"]):
        sys.exit(f"usage: torchscript_crosscheck_test.py [--torchvision]; got {argv}")
    # torchvision's models run in shards (Bazel's shard_count; ctest's _shardN tests set the
    # same variables): shard k takes the models whose index is k modulo the shards' count.
    shards = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
    shard = int(os.environ.get("TEST_SHARD_INDEX", "0"))
    if "TEST_SHARD_STATUS_FILE" in os.environ:
        open(os.environ["TEST_SHARD_STATUS_FILE"], "w").close()  # sharding is understood
    if argv and torchvision is None:
        print("SKIP: python3-torchvision is not installed")
        return 0
    # A folder of this run's own, removed after with its files: ctest hands every test one
    # TEST_TMPDIR, and both modes run at once there.
    scratch = os.environ.get("TEST_TMPDIR")
    with tempfile.TemporaryDirectory(prefix="crosscheck_", dir=scratch) as tmp:
        if argv:
            return check(torchvision_examples(tmp, lambda k: k % shards == shard), tmp)
        return check(examples(tmp), tmp)


def check(models, tmp):
    sweep = os.environ.get("SWEEP") or os.path.join(os.environ["TEST_SRCDIR"],
                                                    "ckptlab/experiments/sweep")
    out = os.path.join(tmp, "sweep")
    run([sweep, "--device=cpu", "--models=" + ",".join(m.spec for m in models), "--steps=1",
         "--warmup=0", "--out=" + out], "the sweep")
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    # Each model's plan of every mode, run as plan:file= (a plan fits one model's stages).
    for k, example in enumerate(models):
        plan_file = os.path.join(tmp, f"plan{k}.txt")
        with open(plan_file, "w") as f:
            f.write(example.plan + "\n")
        out = os.path.join(tmp, f"plan{k}")
        run([sweep, "--device=cpu", "--models=" + example.spec, "--strategies=plan:file=" +
             plan_file, "--steps=1", "--warmup=0", "--out=" + out], f"the sweep of {plan_file}")
        with open(os.path.join(out, "results.csv"), newline="") as f:
            rows += [r for r in csv.DictReader(f) if r["strategy"] != "store_all"]
    failures = []
    print(f"torch {torch.__version__}")
    print(f"{'model':18} {'strategy':28} {'ckptlab':>9} {'PyTorch':>9} {'held':>7} {'rng':>6}  plan")
    for example in models:
        mine = [r for r in rows if r["model_spec"] == example.spec
                or r["model_spec"].startswith(f"torchscript:file={example.path}:")]
        if len(mine) < 2:
            failures.append(f"{example.path}: {len(mine)} rows in results.csv")
            continue
        module = torch.jit.load(example.path)
        module.train()
        # A chain's stages spread a tuple into their arguments; nn.Sequential passes it whole.
        sequence = ckptlab.Chain if example.spec.startswith("chain:") else nn.Sequential
        stages = sequence(*module.children())
        baseline = list(stages.parameters()) + list(stages.buffers()) + constants_of(stages)
        stochastic = stochastic_stages(stages)
        batch = example.make_batch()
        with torch.jit.optimized_execution(False):
            # A module's first run in a process keeps more (8 KiB on the decoder, 1.13); ckptlab
            # profiles after one too.
            state = [b.clone() for b in stages.buffers()]
            step(stages, batch, example.loss, baseline, seed=1, state=state)
            reference, _, _ = step(stages, batch, example.loss, baseline, seed=7, state=state)
            for row in mine:
                name = os.path.basename(example.path)
                where = f"{name} {row['strategy']}"
                if row["status"] != "ok":
                    failures.append(f"{where}: status {row['status']}: {row['message']}")
                    continue
                if float(row["max_grad_diff_vs_store_all"]) != 0:
                    failures.append(f"{where}: ckptlab's gradients differ from store_all's")
                predicted = int(row["predicted_activation_bytes"])
                if predicted != int(row["activation_bytes"]):
                    failures.append(f"{where}: predicted {predicted} != measured "
                                    f"{row['activation_bytes']}")
                plan = parse_plan(row["plan"])
                grads, kept, held = step(ckptlab.apply(stages, row["plan"]), batch,
                                         example.loss, baseline, seed=7, state=state)
                for g, r in zip(grads, reference):
                    if g is None or r is None:  # a parameter the model runs without gradients
                        if g is not r:
                            failures.append(f"{where}: a gradient is None in one run only")
                            break
                    elif not torch.equal(g, r):
                        failures.append(f"{where}: a gradient or a buffer differs from the plain "
                                        f"model's by {(g - r).abs().max().item():.3g}")
                        break
                rng = RNG_SNAPSHOT_BYTES * checkpointed_with_rng(plan, stochastic)
                held += held_for_stored_backward(plan, stages, batch[0])
                print(f"{name:18} {row['strategy'][:28]:28} {predicted:9} {kept:9} {held:7} "
                      f"{rng:6}  {row['plan'][:60]}")
                if kept + held + rng != predicted:
                    failures.append(f"{where}: PyTorch keeps {kept} bytes; ckptlab predicts "
                                    f"{predicted} = {predicted - held - rng} + {held} held + "
                                    f"{rng} RNG snapshots")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
