#!/usr/bin/env python3
"""Every peer beside ckptlab, on the models users train: docs/results/peers-cpu.

Each model is built from its config at a CPU size (random weights, a random batch, dropout as
its config has it) and trained one step at a time on this machine's torch, by each side:
  - plain: the model as it is (every activation stored);
  - its library's own checkpointing of every layer: Hugging Face's
    gradient_checkpointing_enable (non-reentrant), timm's set_grad_checkpointing;
  - torchtitan's full AC (every layer under a non-reentrant checkpoint) and its op-level
    selective AC (torch's selective checkpoint keeping the outputs of the matrix products and
    attention in torchtitan's default save list, every second mm recomputed; the list names
    aten.mm, not addmm, and the CUDA attention kernels, to which this adds the CPU's);
  - torch.compile (the aot_eager backend: AOTAutograd's min-cut partitioner, no code
    generation) under activation_memory_budget at each --budgets fraction, dynamo reset
    between them;
  - PyTorch's automatic SAC (torch.distributed._tools: SACEstimator, sac_ilp), where it runs;
  - ckptlab.optimize (its blocks path) at every other side's measured peak, and with selective
    blocks allowed where this torch has them.
One instrument for every side: the step's peak above what was allocated before it
(ckptlab.step_peak: the allocator's events, the output held through backward), the bytes kept
for backward when the loss is computed (ckptlab.kept_bytes: saved-tensor hooks, each storage
once, less parameters, buffers and batch), the median of --steps steps against the median of
as many plain steps taken between them, and the gradients against the plain step's (from the
same random state). Beside the measured peak: MemTracker's estimate for each eager side, and
ckptlab's predicted kept bytes for its rows.

  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CKPTLAB_PLANNER=$PWD/bazel-bin/python/native/\
libckptlab_planner.so PYTHONPATH=python ENV/bin/python experiments/peers.py --out=/tmp/peers

ENV is tools/python_env.sh's environment (torch, transformers, timm). --out is a folder this run
makes (refused where it exists): peers.csv (written whole after each model: a temporary, then
renamed), a frontier per model (<model>.svg: peak against step time, every side) and two tables
on stdout: every row, and each peer beside ckptlab's plans at the peer's peak. A side that fails
on a model is its row, with the error; a ckptlab row says whether its peak was within the budget.
`--report=DIR/peers.csv` prints a run's tables again, running nothing.
"""

import argparse
import collections
import csv
import functools
import html
import importlib
import os
import re
import sys
import time
import warnings

import torch
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import ckptlab  # noqa: E402
from ckptlab.plan import printable  # noqa: E402
from anymodel import write_csv, write_whole  # noqa: E402
from blocks import SEED, builder, call, measure, plain_baseline  # noqa: E402  (one instrument)

FIELDS = ["model", "torch", "side", "setting", "status", "within_budget", "peak_bytes",
          "peak_vs_plain",
          "kept_bytes", "kept_vs_plain", "step_ms", "step_vs_plain", "gradient_difference",
          "estimated_peak_bytes", "estimator", "predicted_kept_bytes", "note"]
BUDGETS = [1.0, 0.5, 0.3, 0.2, 0.1, 0.05]


def _lm(config, vocab, batch=4, seq=256):
    """A causal LM's batch: ids, their own labels (the model's loss), no cache."""
    ids = torch.randint(vocab, (batch, seq))
    return {"input_ids": ids, "labels": ids, "use_cache": False}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=6, n_embd=256, n_head=4, n_positions=256, vocab_size=4096)
    return GPT2LMHeadModel(config), _lm(config, 4096), lambda out: out.loss


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(num_hidden_layers=6, hidden_size=256, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=688, vocab_size=4096,
                         max_position_embeddings=256)
    return LlamaForCausalLM(config), _lm(config, 4096), lambda out: out.loss


def bert():
    from transformers import BertConfig, BertForMaskedLM
    config = BertConfig(num_hidden_layers=6, hidden_size=256, num_attention_heads=4,
                        intermediate_size=1024, vocab_size=4096, max_position_embeddings=256)
    ids = torch.randint(4096, (4, 256))
    mask = torch.ones(4, 256, dtype=torch.long)
    mask[1, 200:] = 0  # a padded row
    return (BertForMaskedLM(config), {"input_ids": ids, "attention_mask": mask, "labels": ids},
            lambda out: out.loss)


def vit():
    from transformers import ViTConfig, ViTForImageClassification
    config = ViTConfig(image_size=64, patch_size=8, hidden_size=256, num_hidden_layers=6,
                       num_attention_heads=4, intermediate_size=1024, num_labels=10)
    images = torch.randn(8, 3, 64, 64)
    return (ViTForImageClassification(config),
            {"pixel_values": images, "labels": torch.randint(10, (8,))}, lambda out: out.loss)


def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    config = T5Config(num_layers=4, num_decoder_layers=4, d_model=256, d_kv=64, num_heads=4,
                      d_ff=1024, vocab_size=4096, decoder_start_token_id=0, pad_token_id=0)
    ids, labels = torch.randint(4096, (4, 256)), torch.randint(4096, (4, 64))
    return (T5ForConditionalGeneration(config),
            {"input_ids": ids, "labels": labels, "use_cache": False}, lambda out: out.loss)


def whisper():
    from transformers import WhisperConfig, WhisperForAudioClassification
    config = WhisperConfig(num_mel_bins=80, encoder_layers=4, encoder_attention_heads=4,
                           encoder_ffn_dim=1024, d_model=256, max_source_positions=250,
                           num_labels=10)
    features = torch.randn(4, 80, 500)  # 5 s of 10 ms frames: the encoder halves them
    return (WhisperForAudioClassification(config),
            {"input_features": features, "labels": torch.randint(10, (4,))}, lambda out: out.loss)


def _timm(name, size, **kwargs):
    import timm
    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
    images, labels = torch.randn(8, 3, size, size), torch.randint(10, (8,))
    return model, (images,), lambda out: torch.nn.functional.cross_entropy(out, labels)


MODELS = {
    "gpt2": gpt2, "llama": llama, "bert": bert, "t5": t5, "vit": vit, "whisper": whisper,
    "timm_vit": lambda: _timm("vit_tiny_patch16_224", 64, img_size=64, patch_size=8),
    "timm_convnext": lambda: _timm("convnext_atto", 96),
    "timm_efficientnet": lambda: _timm("efficientnet_b0", 96),
    "timm_swin": lambda: _timm("swin_tiny_patch4_window7_224", 112, img_size=112,
                               window_size=7, depths=(2, 2, 2, 2), embed_dim=48, num_heads=(2, 2, 4, 4)),
}

# torchtitan's default save list for op-level selective AC, the CPU's attention kernel added.
_SAVED = {"mm", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"}


def _titan_contexts():
    """A selective checkpoint's contexts under torchtitan's op policy: the outputs of the ops in
    _SAVED kept, but every second mm's (counted apart in the forward and the recompute)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    saved = {getattr(torch.ops.aten, n).default for n in _SAVED if hasattr(torch.ops.aten, n)}
    counts = collections.Counter()

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            counts[mode] += 1
        keep = func in saved and not (func == torch.ops.aten.mm.default and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _every_layer(model, context_fn=None):
    """Each of ckptlab.find_blocks' layers under a non-reentrant checkpoint (torchtitan's full
    AC; with `context_fn`, its selective one), its forward replaced on the instance."""
    modules = dict(model.named_modules())
    names = ckptlab.find_blocks(model)
    for name in names:
        block = modules[name]
        options = {"context_fn": context_fn} if context_fn is not None else {}
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False,
                                          **options)
    return f"{len(names)} layers"


def _memtracker(model, inputs, loss):
    """MemTracker's peak for one step of `model`, less the parameters and buffers it counts."""
    from torch.distributed._tools.mem_tracker import MemTracker
    tracker = MemTracker()
    tracker.track_external(model)
    torch.manual_seed(SEED)
    with tracker:
        loss(call(model, inputs)).backward()
    model.zero_grad(set_to_none=True)
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    return peak["Total"] - sum(v for k, v in peak.items()
                               if getattr(k, "value", "") in ("Parameter", "Buffer"))


def _gradient_difference(grads, plain):
    """The largest difference of any gradient from the plain step's, over the largest plain one."""
    if len(grads) != len(plain):
        return float("inf")
    scale = max((g.abs().max().item() for g in plain if g is not None and g.numel()), default=0)
    scale = scale or 1.0
    worst = 0.0
    for g, p in zip(grads, plain):
        if (g is None) != (p is None):
            return float("inf")
        if g is not None and g.numel():
            worst = max(worst, (g.double() - p.double()).abs().max().item())
    return worst / scale


def rows_of(name, make, steps, budgets, selective):
    build = builder(make)
    plain, inputs, loss, plain_kept, plain_peak, plain_grads = plain_baseline(build, steps)
    base = {"model": name, "torch": torch.__version__.split("+")[0]}
    rows = []

    def side(label, setting, prepare, estimate=True, warm=0):
        """A row: prepare(a fresh model) -> (a note, what to step), warmed, measured; its error
        otherwise."""
        row = dict(base, side=label, setting=setting)
        try:
            note, run = prepare(build()[0])
            for _ in range(warm):  # compilation, outside the measured steps
                loss(call(run, inputs)).backward()
                run.zero_grad(set_to_none=True)
            kept, peak, grads, ms, ratio = measure(run, inputs, loss, steps, plain)
            row.update(status="ok", peak_bytes=peak, peak_vs_plain=f"{peak / plain_peak:.3f}",
                       kept_bytes=kept, kept_vs_plain=f"{kept / plain_kept:.3f}",
                       step_ms=f"{ms:.1f}", step_vs_plain=f"{ratio:.3f}",
                       gradient_difference=f"{_gradient_difference(grads, plain_grads):.2e}",
                       note=note)
            if estimate:
                try:
                    row.update(estimated_peak_bytes=_memtracker(run, inputs, loss),
                               estimator="MemTracker")
                except Exception as e:  # noqa: BLE001 (whatever the estimator raises)
                    row.update(estimator=f"MemTracker failed: {_line(e)}")
        except ckptlab.OptimizeError as e:  # (no plan of its blocks peaks within the budget)
            row.update(status="no plan", note=_line(e))
        except Exception as e:  # noqa: BLE001 (a side that fails on a model is its row)
            row.update(status="failed", note=_line(e))
        rows.append(row)
        print(f"peers: {name}: {label} {setting}: {row['status']}", file=sys.stderr, flush=True)
        return row

    side("plain", "", lambda m: ("", m))
    if hasattr(plain, "gradient_checkpointing_enable"):
        def hugging_face(m):
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            return "every layer", m
        side("Hugging Face", "gradient_checkpointing_enable", hugging_face)
    if hasattr(plain, "set_grad_checkpointing"):
        def timm_own(m):
            m.set_grad_checkpointing(True)
            return "every block", m
        side("timm", "set_grad_checkpointing", timm_own)
    side("torchtitan", "full AC", lambda m: (_every_layer(m), m))
    side("torchtitan", "op SAC", lambda m: (_every_layer(m, _titan_contexts), m))
    for fraction in budgets:
        def compiled(m, fraction=fraction):
            import torch._functorch.config as functorch_config
            torch._dynamo.reset()
            functorch_config.activation_memory_budget = fraction
            return "aot_eager", torch.compile(m, backend="aot_eager")
        side("torch.compile", f"activation_memory_budget={fraction}", compiled, estimate=False,
             warm=2)
    import torch._functorch.config as functorch_config
    functorch_config.activation_memory_budget = 1.0  # (torch's default)
    torch._dynamo.reset()
    rows.append(dict(base, side="automatic SAC", setting="sac_ilp", status="not run",
                     note=_automatic_sac_why()))

    # ckptlab at every other side's measured peak.
    peaks = sorted({r["peak_bytes"] for r in rows if r.get("status") == "ok"
                    and r["side"] != "plain" and r["peak_bytes"] < plain_peak})
    runs = [(p, False) for p in peaks]
    if selective and ckptlab.selective.available() is None:
        runs += [(p, True) for p in peaks]
    for budget, allowed in runs:
        planned = []

        def optimized(m, budget=budget, allowed=allowed):
            torch.manual_seed(SEED)
            planned.append(ckptlab.optimize(m, inputs, budget, loss=loss, granularity="blocks",
                                            progress=False, selective=allowed).predicted.plan)
            return (f"{len(planned[0].checkpointed)} checkpointed, "
                    f"{len(planned[0].selective)} selective"), m

        row = side("ckptlab" + (" selective" if allowed else ""), f"optimize at {budget:,}",
                   optimized, estimate=False)
        if planned:
            row["predicted_kept_bytes"] = planned[0].kept_bytes
        if row["status"] == "ok":
            row["within_budget"] = row["peak_bytes"] <= budget
    if not peaks:
        rows.append(dict(base, side="ckptlab", setting="optimize", status="not run",
                         note="no other side peaked below the plain step"))
    return rows


def _automatic_sac_why() -> str:
    """Why PyTorch's automatic SAC has no row here: what its estimator needs."""
    try:
        importlib.import_module("torch.distributed._tools.sac_ilp")
    except ImportError as e:
        return _line(e)
    return ("SACEstimator runs the model under FakeTensorMode and prices each operator with "
            "a benchmark or a roofline of a CUDA device; this machine has none")


def _cell(text: str) -> str:
    """`text` in a Markdown table's cell."""
    return text.replace("|", "\\|")


def _line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return printable(f"{type(e).__name__}: {text}"[:300])


def frontier_svg(model, rows) -> str:
    """Peak against step time, a point per side (ckptlab's joined as its frontier)."""
    points = [(float(r["step_vs_plain"]), r["peak_bytes"] / 2**20, r["side"], r["setting"])
              for r in rows if r.get("status") == "ok"]
    if not points:
        return ""
    width, height, margin = 640, 420, 60
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs + [1.0]) * 0.95, max(xs) * 1.05
    y1 = max(ys) * 1.08

    def at(x, y):
        return (margin + (x - x0) / (x1 - x0 or 1) * (width - 2 * margin),
                height - margin - y / (y1 or 1) * (height - 2 * margin))

    colors = {"plain": "#000000", "Hugging Face": "#d62728", "timm": "#d62728",
              "torchtitan": "#9467bd", "torch.compile": "#1f77b4", "ckptlab": "#2ca02c",
              "ckptlab selective": "#17becf"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
           f'{html.escape(model)}: peak against step time, every side</text>']
    left, bottom = at(x0, 0)
    right, top = at(x1, y1)
    out.append(f'<polyline points="{left},{top} {left},{bottom} {right},{bottom}" fill="none" '
               'stroke="#444"/>')
    for k in range(6):
        x = x0 + (x1 - x0) * k / 5
        y = y1 * k / 5
        px, _ = at(x, 0)
        _, py = at(x0, y)
        out.append(f'<text x="{px}" y="{bottom + 15}" text-anchor="middle">{x:.2f}</text>')
        out.append(f'<text x="{left - 5}" y="{py + 4}" text-anchor="end">{y:.1f}</text>')
    out.append(f'<text x="{width / 2}" y="{height - 15}" text-anchor="middle">step time over '
               'the plain step\'s</text>')
    out.append(f'<text x="15" y="{height / 2}" text-anchor="middle" transform="rotate(-90 15 '
               f'{height / 2})">peak above the step\'s start (MiB)</text>')
    for label in ("ckptlab", "ckptlab selective"):  # its plans, from the least peak up
        line = sorted(((p[0], p[1]) for p in points if p[2] == label), key=lambda p: p[1])
        if len(line) > 1:
            path = " ".join(f"{a},{b}" for a, b in (at(x, y) for x, y in line))
            out.append(f'<polyline points="{path}" fill="none" stroke="{colors[label]}"/>')
    for x, y, label, setting in points:
        px, py = at(x, y)
        out.append(f'<circle cx="{px}" cy="{py}" r="4" fill="{colors.get(label, "#7f7f7f")}">'
                   f'<title>{html.escape(f"{label} {setting}")}</title></circle>')
        if label == "torch.compile":  # its budget beside it
            out.append(f'<text x="{px + 6}" y="{py - 4}" fill="{colors[label]}">'
                       f'{html.escape(setting.split("=")[-1])}</text>')
    shown = [label for label in colors if any(p[2] == label for p in points)]
    for k, label in enumerate(shown):
        out.append(f'<circle cx="{width - 150}" cy="{40 + 15 * k}" r="4" fill="{colors[label]}"/>'
                   f'<text x="{width - 140}" y="{44 + 15 * k}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def fail(message):
    print(f"peers: {message}", file=sys.stderr)
    sys.exit(2)


def _number(value):
    """A CSV cell or a row's value as a number ('' stays '')."""
    if value in ("", None) or isinstance(value, (int, float)):
        return "" if value is None else value
    return float(value) if any(c in value for c in ".e") else int(value)


def print_tables(table):
    """Every row, then per model each peer beside ckptlab's plans at the peer's peak."""
    print("| model | side | setting | peak | peak vs plain | kept vs plain | step vs plain | "
          "gradient difference | estimate (peak) | note |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for t in table:
        if t.get("status") != "ok":
            print(f"| {t['model']} | {t.get('side', '')} | {t.get('setting', '')} | "
                  f"{t.get('status', '')} | | | | | | {_cell(t.get('note', ''))} |")
            continue
        estimate = _number(t.get("estimated_peak_bytes", ""))
        print(f"| {t['model']} | {t['side']} | {t['setting']} | {_number(t['peak_bytes']):,} | "
              f"{t['peak_vs_plain']} | {t['kept_vs_plain']} | {t['step_vs_plain']} | "
              f"{t['gradient_difference']} | {f'{estimate:,}' if estimate != '' else ''} | "
              f"{_cell(t.get('note', ''))} |")
    print()
    print("| model | peer | peak vs plain | step vs plain | ckptlab at its peak: peak, step | "
          "selective: peak, step |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for t in table:
        if t.get("status") != "ok" or t["side"] == "plain" or t["side"].startswith("ckptlab"):
            continue
        at = f"optimize at {_number(t['peak_bytes']):,}"
        cells = []
        for side in ("ckptlab", "ckptlab selective"):
            ours = next((r for r in table if r["model"] == t["model"] and r.get("side") == side
                         and r.get("setting") == at), None)
            cells.append("" if ours is None else ours["status"] if ours["status"] != "ok"
                         else f"{ours['peak_vs_plain']}, {ours['step_vs_plain']}")
        print(f"| {t['model']} | {t['side']} {t['setting']} | {t['peak_vs_plain']} | "
              f"{t['step_vs_plain']} | {cells[0]} | {cells[1]} |")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors one line of fail()'s, no flag abbreviated."""

    def error(self, message):
        fail(printable(message))


def main():
    parser = _Parser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--report", help="a run's peers.csv: its tables printed, nothing run")
    parser.add_argument("--out", help="a folder this run makes")
    parser.add_argument("--models", default=",".join(MODELS), help=",".join(MODELS))
    parser.add_argument("--steps", default="5", help="timed steps per row (1 to 100)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                        help="torch.compile's activation_memory_budget fractions, in (0, 1]")
    parser.add_argument("--no-selective", action="store_true",
                        help="no ckptlab rows with selective blocks")
    flags = [a.split("=", 1)[0] for a in sys.argv[1:] if a.startswith("--")]
    twice = next((f for f in flags if flags.count(f) > 1), None)
    if twice is not None:
        fail(f"{printable(twice)} is given twice; accepted: each flag once")
    args = parser.parse_args()
    if args.report is not None:
        others = [f for f in flags if f != "--report"]
        if others:
            fail(f"{printable(others[0])} with --report, which runs nothing; accepted: --report "
                 "alone")
        if not os.path.isfile(args.report):
            fail(f"--report={printable(args.report)} is no regular file; accepted: a run's "
                 "peers.csv")
        try:
            with open(args.report, newline="") as f:
                print_tables(list(csv.DictReader(f)))
        except OSError as e:
            fail(f"--report={printable(args.report)}: {e.strerror}; accepted: a run's peers.csv")
        except (KeyError, ValueError) as e:
            fail(f"--report={printable(args.report)}: {_line(e)}; accepted: a run's peers.csv")
        return 0
    if args.out is None:
        fail("--out is missing; accepted: a folder this run makes (or --report=CSV)")
    names = args.models.split(",")
    for name in names:
        if name not in MODELS:
            fail(f"--models: '{printable(name)}' is no model here; accepted: {', '.join(MODELS)}")
    if len(set(names)) != len(names):
        fail(f"--models={printable(args.models)} names a model twice; accepted: each once")
    if not re.fullmatch(r"[0-9]{1,3}", args.steps) or not 1 <= int(args.steps) <= 100:
        fail(f"--steps={printable(args.steps)}; accepted: 1 to 100")
    steps = int(args.steps)
    texts = args.budgets.split(",")
    budgets = [float(b) for b in texts if re.fullmatch(r"(0|1)?\.[0-9]+|1|1\.0*", b)]
    if (len(budgets) != len(texts) or not all(0 < b <= 1 for b in budgets)
            or len(set(budgets)) != len(budgets)):
        fail(f"--budgets={printable(args.budgets)}; accepted: fractions in (0, 1] such as 0.5, "
             "each once, joined by ','")
    try:
        os.mkdir(args.out)
    except OSError as e:
        fail(f"--out={printable(args.out)}: {e.strerror}; accepted: a folder this run makes")
    warnings.filterwarnings("ignore")
    torch.backends.mkldnn.enabled = False  # (experiments/blocks.py says why)
    table = []
    start = time.time()
    for name in names:
        print(f"peers: {name} ({time.time() - start:.0f} s in)", file=sys.stderr, flush=True)
        try:
            rows = rows_of(name, MODELS[name], steps, budgets, not args.no_selective)
        except ImportError as e:
            rows = [{"model": name, "torch": torch.__version__.split("+")[0], "status": "not run",
                     "note": _line(e)}]
        except Exception as e:  # noqa: BLE001 (its plain step failed: the model's row)
            rows = [{"model": name, "torch": torch.__version__.split("+")[0], "status": "failed",
                     "note": _line(e)}]
        table.extend(rows)
        svg = frontier_svg(name, rows)
        if svg:
            write_whole(args.out, f"{name}.svg", lambda f: f.write(svg))
        write_csv(args.out, "peers.csv", FIELDS, table)  # the models so far, whole
    print_tables(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
