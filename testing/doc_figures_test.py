#!/usr/bin/env python3
"""The figures in docs/ that tools/doc_figures.py makes: each one holds on today's code (rerun,
the same table byte for byte, where the sweep runs on the LibTorch the figure was made on), a
figure with one digit changed is named as no longer holding (exit 1), and an unknown figure is
one line and exit 2. Under Bazel the sweep is in the runfiles; elsewhere $SWEEP names it.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SWEEP = os.environ.get("SWEEP") or os.path.join(os.environ.get("TEST_SRCDIR", ""),
                                                "ckptlab/experiments/sweep")
TOOL = os.path.join(ROOT, "tools", "doc_figures.py")


def figures(*args):
    return subprocess.run([sys.executable, TOOL, f"--sweep={SWEEP}", *args],
                          capture_output=True, text=True, timeout=600)


class DocFigures(unittest.TestCase):
    def test_every_figure_holds_and_an_edited_one_is_named(self):
        done = figures("check")
        self.assertEqual(done.returncode, 0, done.stderr)
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as root:
            os.makedirs(os.path.join(root, "docs"))
            shutil.copy(os.path.join(ROOT, "docs", "offload.md"), os.path.join(root, "docs"))
            path = os.path.join(root, "docs", "offload.md")
            with open(path) as f:
                text = f.read()
            start = text.index("<!-- figure offload-budgets, ")
            cell = re.compile(r"\| ([0-9]+)\.([0-9]+) MiB \|").search(text, start)
            edited = (text[:cell.start(2)] + str((int(cell.group(2)[0]) + 1) % 10)
                      + text[cell.start(2) + 1:])
            with open(path, "w") as f:
                f.write(edited)
            done = figures(f"--root={root}", "check", "offload-budgets")
            if "not checked" in done.stderr:
                self.skipTest(done.stderr.strip())  # another LibTorch than the figure's
            self.assertEqual(done.returncode, 1, done.stderr)
            self.assertIn("FAIL: offload-budgets in docs/offload.md no longer holds",
                          done.stderr)
            with open(path) as f:
                self.assertEqual(f.read(), edited)  # check writes nothing

    def test_an_unknown_figure_is_one_line_and_exit_2(self):
        done = figures("check", "no-such-figure")
        self.assertEqual(done.returncode, 2)
        self.assertEqual(done.stderr.strip().count("\n"), 0, done.stderr)
        self.assertIn("no figure no-such-figure; accepted: offload-least-peak", done.stderr)


if __name__ == "__main__":
    unittest.main()
