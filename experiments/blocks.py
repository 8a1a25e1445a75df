#!/usr/bin/env python3
"""Models tracing cannot cut, checkpointed by their own blocks: docs/results/blocks-cpu.

For each model (built from its config at a CPU size, random weights and batch): the blocks
ckptlab.find_blocks finds, the profile's seconds, and steps with none of them checkpointed, every
one, every other one, and every one selectively (ckptlab.selective, where this torch has it);
for a Hugging Face model, its own gradient_checkpointing_enable (every
layer); and ckptlab.optimize's blocks path at two budgets: halfway from every block's peak to
the plain step's, and Hugging Face's peak (else a tenth of the way), and at the first with
selective blocks allowed. Per row: the bytes PyTorch
keeps for backward (ckptlab.kept_bytes, less the parameters, buffers and batch) against the
prediction, the step's peak above its start (ckptlab.step_peak, the output held through
backward), the median step time against the plain model's (its steps taken in between), and
whether the gradients equal the plain model's bitwise. Each step starts from the random state the profile started from, so that
a layer drop draws as it drew there. A model this interpreter lacks (torchaudio, transformers)
is a row saying so.

  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=python \
      CKPTLAB_PLANNER=bazel-bin/python/native/libckptlab_planner.so \
      /usr/bin/python3 experiments/blocks.py --out=/tmp/blocks --steps=5

(One thread of each pool, as the tests run: two LibTorch threads on these 2 cores spread a
Conformer step's median of 5 over 410 to 541 ms in four runs, one over 461 to 493 ms.)

--out is a folder this run makes (refused where it exists); it holds blocks.csv (written whole:
a temporary, then renamed) and the table on stdout.
"""

import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import ckptlab  # noqa: E402
from ckptlab.plan import printable  # noqa: E402
from anymodel import write_csv  # noqa: E402  (this folder's: the same whole-or-nothing CSV)

FIELDS = ["model", "torch", "blocks", "profile_s", "checkpointed", "blocks_checkpointed",
          "blocks_selective", "budget_bytes", "predicted_kept_bytes", "kept_bytes",
          "kept_vs_plain", "peak_bytes", "peak_vs_plain", "step_ms", "step_vs_plain",
          "gradients_equal", "note"]
SEED = 0


def wav2vec2():
    from torchaudio.models import wav2vec2_model
    model = wav2vec2_model(  # wav2vec2 base's extractor; a 6-layer, 384-wide encoder
        extractor_mode="group_norm", extractor_conv_layer_config=None, extractor_conv_bias=False,
        encoder_embed_dim=384, encoder_projection_dropout=0.1, encoder_pos_conv_kernel=128,
        encoder_pos_conv_groups=16, encoder_num_layers=6, encoder_num_heads=6,
        encoder_attention_dropout=0.1, encoder_ff_interm_features=1536,
        encoder_ff_interm_dropout=0.0, encoder_dropout=0.1, encoder_layer_norm_first=False,
        encoder_layer_drop=0.1, aux_num_out=None)
    audio = torch.randn(2, 16000)  # one second at 16 kHz
    return model, (audio, torch.tensor([16000, 12000])), lambda out: out[0].square().mean()


def conformer():
    from torchaudio.models import Conformer
    model = Conformer(input_dim=80, num_heads=4, ffn_dim=512, num_layers=6,
                      depthwise_conv_kernel_size=31, dropout=0.1)
    frames = torch.randn(4, 200, 80)
    return model, (frames, torch.tensor([200, 180, 150, 90])), lambda out: out[0].square().mean()


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=6, n_embd=256, n_head=4, n_positions=256, vocab_size=4096)
    model = GPT2LMHeadModel(config)
    ids = torch.randint(4096, (4, 256))
    # No cache: a block's rerun would add its keys to it again (profile_blocks refuses it), and
    # gradient_checkpointing_enable turns it off in training too.
    return model, {"input_ids": ids, "labels": ids, "use_cache": False}, lambda out: out.loss


def bert():
    from transformers import BertConfig, BertForMaskedLM
    config = BertConfig(num_hidden_layers=6, hidden_size=256, num_attention_heads=4,
                        intermediate_size=1024, vocab_size=4096, max_position_embeddings=256)
    model = BertForMaskedLM(config)
    ids = torch.randint(4096, (4, 256))
    mask = torch.ones(4, 256, dtype=torch.long)
    mask[1, 200:] = 0
    return model, {"input_ids": ids, "attention_mask": mask, "labels": ids}, lambda out: out.loss


MODELS = {"wav2vec2": wav2vec2, "conformer": conformer, "gpt2": gpt2, "bert": bert}


def fail(message):
    print(f"blocks: {message}", file=sys.stderr)
    sys.exit(2)


def call(model, inputs):
    return model(**inputs) if isinstance(inputs, dict) else model(*inputs)


def tensors(inputs):
    values = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
    return [v for v in values if isinstance(v, torch.Tensor)]


def timed(model, inputs, loss) -> float:
    """One step's milliseconds, from SEED's random state, as measure runs it."""
    exclude = list(model.parameters()) + list(model.buffers()) + tensors(inputs)
    torch.manual_seed(SEED)
    start = time.perf_counter()
    value, _ = ckptlab.kept_bytes(lambda: loss(call(model, inputs)), exclude=exclude)
    value.backward()
    ms = (time.perf_counter() - start) * 1e3
    model.zero_grad(set_to_none=True)
    return ms


def measure(model, inputs, loss, steps, plain=None):
    """Kept bytes of a step, its peak, its gradients, the median of `steps` steps' times, and
    that over the median of as many steps of `plain` taken between them (the machine's drift over a
    run, up to 0.7x to 1.4x here, cancels within a row), each step from SEED's random state."""
    exclude = list(model.parameters()) + list(model.buffers()) + tensors(inputs)
    torch.manual_seed(SEED)
    value, kept = ckptlab.kept_bytes(lambda: loss(call(model, inputs)), exclude=exclude)
    value.backward()  # the step the profile predicts, and the gradients compared
    grads = [p.grad.clone() if p.grad is not None else None for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    times, plain_times = [], []
    for _ in range(steps):
        times.append(timed(model, inputs, loss))
        plain_times.append(timed(plain if plain is not None else model, inputs, loss))
    torch.manual_seed(SEED)

    def step():  # the output held through backward, as a training loop holds it
        output = call(model, inputs)
        loss(output).backward()

    peak = ckptlab.step_peak(step)
    model.zero_grad(set_to_none=True)
    ms = statistics.median(times)
    return kept, peak, grads, ms, ms / statistics.median(plain_times)


def same(a, b):
    return all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
               for x, y in zip(a, b))


def builder(make):
    """A function that builds make()'s (model, inputs, loss) anew from SEED's random state, the
    model in training mode."""
    def build():
        torch.manual_seed(SEED)
        model, inputs, loss = make()
        return model.train(), inputs, loss
    return build


def plain_baseline(build, steps):
    """The plain model built, warmed up (the process's first steps run slower) and measured:
    (model, inputs, loss, kept bytes, peak, gradients)."""
    plain, inputs, loss = build()
    measure(plain, inputs, loss, 1)
    kept, peak, grads, _, _ = measure(plain, inputs, loss, steps)
    return plain, inputs, loss, kept, peak, grads


def rows_of(name, make, steps):
    """The rows of one model: none, every and every other block checkpointed, Hugging Face's own
    every layer, and ckptlab.optimize at two budgets (the second Hugging Face's peak, where it
    has one; else a tenth of the way from every block's peak to the plain step's)."""
    build = builder(make)
    plain, inputs, loss, plain_kept, plain_peak, plain_grads = plain_baseline(build, steps)
    names = ckptlab.find_blocks(plain)
    row = {"model": name, "torch": torch.__version__.split("+")[0], "blocks": len(names)}
    rows = []

    def add(label, model, seconds, chosen, predicted, note, budget="", selective=()):
        kept, peak, grads, ms, ratio = measure(model, inputs, loss, steps, plain)
        rows.append(dict(row, profile_s=seconds, checkpointed=label,
                         blocks_checkpointed=len(chosen), blocks_selective=len(selective),
                         budget_bytes=budget,
                         predicted_kept_bytes=predicted, kept_bytes=kept,
                         kept_vs_plain=f"{kept / plain_kept:.3f}", peak_bytes=peak,
                         peak_vs_plain=f"{peak / plain_peak:.3f}", step_ms=f"{ms:.1f}",
                         step_vs_plain=f"{ratio:.3f}",
                         gradients_equal=same(grads, plain_grads), note=note))
        return peak

    peaks = {}
    policies = [("none", [], ()), ("every block", names, ()), ("every other", names[::2], ())]
    if ckptlab.selective.available() is None:
        policies.append(("every block, selectively", [], names))
    for label, chosen, selective in policies:
        model, _, _ = build()
        torch.manual_seed(SEED)
        start = time.perf_counter()
        profile = ckptlab.profile_blocks(model, inputs, loss=loss)
        seconds = f"{time.perf_counter() - start:.2f}"
        ran = {c.block for c in profile.calls}  # (a layer drop's draw leaves some out)
        policy = "selective" if selective else "checkpointed"
        refused = {c.block: c.refused if not selective else c.selective_refused
                   for c in profile.calls if (c.selective_refused if selective else c.refused)}
        chosen = [n for n in chosen if n not in refused and n in ran]
        selective = [n for n in selective if n not in refused and n in ran]
        applied = ckptlab.checkpoint_blocks(model, chosen, profile, selective)
        note = "; ".join(f"{printable(b)} not {policy}: {r}" for b, r in refused.items())
        peaks[label] = add(label, model, seconds, chosen, profile.kept_bytes(chosen, selective),
                           note, selective=selective)
        applied.undo()
    budgets = [(peaks["every block"] + peaks["none"]) // 2]
    if hasattr(plain, "gradient_checkpointing_enable"):
        model, _, _ = build()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        budgets.append(add("gradient_checkpointing_enable", model, "", names, "",
                           "its checkpoints' random states (5,056 bytes each) uncounted"))
    else:
        budgets.append(peaks["every block"] + (peaks["none"] - peaks["every block"]) // 10)
    runs = [(budget, False) for budget in budgets]
    if ckptlab.selective.available() is None:  # the planner allowed selective blocks too
        runs.append((budgets[0], True))
    for budget, selective in runs:
        model, _, _ = build()
        torch.manual_seed(SEED)
        label = "optimize, selective allowed" if selective else "optimize"
        start = time.perf_counter()
        try:
            applied = ckptlab.optimize(model, inputs, budget, loss=loss, granularity="blocks",
                                       progress=False, selective=selective)
        except ckptlab.OptimizeError as e:
            rows.append(dict(row, checkpointed=label, budget_bytes=budget,
                             note=printable(str(e))))
            continue
        seconds = f"{time.perf_counter() - start:.2f}"
        answer = applied.predicted
        plan = answer.plan
        add(label, model, seconds, plan.checkpointed, plan.kept_bytes,
            f"measured peak {answer.step_peak_bytes}; checkpointed "
            f"{' '.join(plan.checkpointed) or 'none'}"
            + (f"; selectively {' '.join(plan.selective)}" if plan.selective else ""), budget,
            plan.selective)
        applied.undo()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a folder this run makes")
    parser.add_argument("--models", default=",".join(MODELS), help=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row (1 to 100)")
    args = parser.parse_args()
    names = args.models.split(",")
    for name in names:
        if name not in MODELS:
            fail(f"--models: '{printable(name)}' is no model here; accepted: "
                 f"{', '.join(MODELS)}")
    if not 1 <= args.steps <= 100:
        fail(f"--steps={args.steps}; accepted: 1 to 100")
    try:
        os.mkdir(args.out)
    except OSError as e:
        fail(f"--out={printable(args.out)}: {e.strerror}; accepted: a folder this run makes")
    # oneDNN's convolutions sum in an order that depends on where their buffers lie: wav2vec2's
    # plain step would not repeat its own gradients.
    torch.backends.mkldnn.enabled = False
    table = []
    for name in names:
        print(f"blocks: {name}", file=sys.stderr)
        try:
            table.extend(rows_of(name, MODELS[name], args.steps))
        except ImportError as e:
            table.append({"model": name, "torch": torch.__version__.split("+")[0],
                          "note": f"not run: {printable(str(e))}"})
    write_csv(args.out, "blocks.csv", FIELDS, table)
    print("| model | torch | checkpointed | budget | kept (predicted) | kept vs plain | peak | "
          "peak vs plain | step vs plain | gradients equal |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for t in table:
        if "kept_bytes" not in t:
            print(f"| {t['model']} | {t['torch']} | {t.get('checkpointed', '')} | "
                  f"{t.get('budget_bytes', '')} | {t['note']} | | | | | |")
            continue
        predicted = t["predicted_kept_bytes"]
        budget = t["budget_bytes"]
        selective = t["blocks_selective"]
        print(f"| {t['model']} | {t['torch']} | {t['checkpointed']} ({t['blocks_checkpointed']} "
              f"of {t['blocks']}{f', {selective} selectively' if selective else ''}) | "
              f"{f'{budget:,}' if budget != '' else ''} | {t['kept_bytes']:,}"
              f"{f' ({predicted:,})' if predicted != '' else ''} | {t['kept_vs_plain']} | "
              f"{t['peak_bytes']:,} | {t['peak_vs_plain']} | {t['step_vs_plain']} | "
              f"{'yes' if t['gradients_equal'] else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
