#!/usr/bin/env python3
"""experiments/peers.py, the command behind docs/results/peers-cpu, rerun small.

Bad flags are refused in one line with exit 2, and nothing is made. On a torch with
transformers, Whisper's encoder at one step and one compile budget gives a row per side; ckptlab's
rows peak within the peak they were planned at, keep the bytes they predicted and give the
plain step's gradients exactly, as every eager side does (Whisper's config has no dropout); the
frontier is an SVG; --report prints the run's tables again from its CSV. Without transformers
the model's row says so.
"""

import csv
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(ROOT, "experiments", "peers.py")
if "TEST_SRCDIR" in os.environ and "CKPTLAB_PLANNER" not in os.environ:
    os.environ["CKPTLAB_PLANNER"] = os.path.join(
        os.environ["TEST_SRCDIR"], "ckptlab/python/native/libckptlab_planner.so")


def peers(*args):
    return subprocess.run([sys.executable, PEERS, *args], capture_output=True, text=True,
                          timeout=600)


class Peers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def test_bad_flags(self):
        out = os.path.join(self.tmp, "out")
        for args, words in [
            (["--steps=0"], "--steps=0; accepted: 1 to 100"),
            (["--models=gpt2,nope"], "'nope' is no model here; accepted: gpt2"),
            (["--budgets=0.5,2"], "--budgets=0.5,2; accepted: fractions in (0, 1]"),
            (["--budgets=x\x1b"], "--budgets=x\\x1b"),
            (["--budgets=0.5,.5"], "each once"),
            (["--models=gpt2,gpt2"], "names a model twice"),
            (["--steps=\u0665"], "--steps=\u0665; accepted: 1 to 100"),
            (["--steps=1", "--steps=2"], "--steps is given twice"),
            (["--ste=1"], "unrecognized arguments: --ste=1"),
            (["--bogus=\x1b"], "unrecognized arguments: --bogus=\\x1b"),
        ]:
            run = peers(f"--out={out}", *args)
            self.assertEqual(run.returncode, 2, run.stderr)
            self.assertIn(words, run.stderr)
            self.assertEqual(len(run.stderr.strip().splitlines()), 1, run.stderr)
            self.assertFalse(os.path.exists(out))
        os.mkdir(out)
        run = peers(f"--out={out}", "--models=whisper")
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("File exists; accepted: a folder this run makes", run.stderr)
        self.assertEqual(os.listdir(out), [])

    def test_whisper(self):
        out = os.path.join(self.tmp, "whisper")
        run = peers(f"--out={out}", "--models=whisper", "--steps=1", "--budgets=0.5",
                    "--no-selective")
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        with open(os.path.join(out, "peers.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        try:
            import transformers  # noqa: F401
        except ImportError:
            self.assertEqual([r["status"] for r in rows], ["not run"])
            self.assertIn("transformers", rows[0]["note"])
            return
        sides = {(r["side"], r["setting"]): r for r in rows}
        for side in [("plain", ""), ("Hugging Face", "gradient_checkpointing_enable"),
                     ("torchtitan", "full AC"), ("torchtitan", "op SAC"),
                     ("torch.compile", "activation_memory_budget=0.5"),
                     ("automatic SAC", "sac_ilp")]:
            self.assertIn(side, sides)
        for (side, _), r in sides.items():
            if side in ("plain", "Hugging Face", "torchtitan") or side.startswith("ckptlab"):
                self.assertEqual(r["status"], "ok", r)
                self.assertEqual(float(r["gradient_difference"]), 0.0, r)
        planned = [r for r in rows if r["side"] == "ckptlab"]
        self.assertTrue(planned)
        for r in planned:
            budget = int(r["setting"].removeprefix("optimize at ").replace(",", ""))
            self.assertLessEqual(int(r["peak_bytes"]), budget, r)
            self.assertEqual(r["within_budget"], "True", r)
            self.assertEqual(r["predicted_kept_bytes"], r["kept_bytes"], r)
        self.assertLess(int(sides[("plain", "")]["kept_bytes"]),
                        int(sides[("plain", "")]["peak_bytes"]))
        report = peers(f"--report={os.path.join(out, 'peers.csv')}")
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertIn("| whisper | plain |", report.stdout)
        self.assertIn("| whisper | Hugging Face gradient_checkpointing_enable |", report.stdout)
        self.assertEqual(report.stdout, run.stdout)  # the run's own tables, again
        for args, words in [([f"--report={out}"], "is no regular file"),
                            ([f"--report={out}/peers.csv", "--steps=1"],
                             "--steps with --report")]:
            refused = peers(*args)
            self.assertEqual(refused.returncode, 2, refused.stderr)
            self.assertIn(words, refused.stderr)
        with open(os.path.join(out, "whisper.svg")) as f:
            svg = f.read()
        self.assertTrue(svg.startswith("<svg") and svg.rstrip().endswith("</svg>"))
        self.assertEqual(svg.count("<circle"), len([r for r in rows if r["status"] == "ok"])
                         + len({r["side"] for r in rows if r["status"] == "ok"}))


if __name__ == "__main__":
    unittest.main()
