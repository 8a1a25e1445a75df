#!/usr/bin/env python3
"""python/ is a package a PyTorch user installs: `pip install ./python` into a fresh virtual
environment (offline: no index; the running Python's pip, setuptools and torch) installs
ckptlab, with its version and its torch requirement, and `import ckptlab` then works from any
folder, the checkout nowhere on the path. Needs a pip that takes --python (22.3 or later) and a
setuptools with bdist_wheel (70.1 or later, or wheel's: Debian's python3-wheel, which
tools/bazel installs).
"""

import ast
import os
import shutil
import site
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(HERE), "python")


def declared_version() -> str:
    """The __version__ assigned in python/ckptlab/__init__.py, read without importing it."""
    with open(os.path.join(PACKAGE, "ckptlab", "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__version__"]:
            return node.value.value
    raise AssertionError("python/ckptlab/__init__.py assigns no __version__")


class InstalledPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix="ckptlab-package-")
        # A copy: setuptools writes its build folders beside the sources it builds.
        cls.source = os.path.join(cls.scratch, "src")
        shutil.copytree(PACKAGE, cls.source, symlinks=False,
                        ignore=shutil.ignore_patterns("__pycache__", "BUILD"))
        env_dir = os.path.join(cls.scratch, "env")
        # No pip or setuptools of its own: the running Python's, and its torch, seen after what
        # is installed there through a .pth file (where the running Python is itself a virtual
        # environment's, --system-site-packages would show its base's instead).
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True)
        cls.python = os.path.join(env_dir, "bin", "python")
        cls.site = subprocess.run(
            [cls.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True).stdout.strip()
        with open(os.path.join(cls.site, "running-python.pth"), "w", encoding="utf-8") as f:
            f.write("".join(path + "\n" for path in site.getsitepackages()))
        cls.elsewhere = os.path.join(cls.scratch, "elsewhere")
        os.mkdir(cls.elsewhere)
        # No --no-deps: pip must find the torch the package requires already installed.
        cls.install = cls.pip("install", "--no-index", "--no-build-isolation", cls.source)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    @classmethod
    def pip(cls, command, *args):
        """The running Python's pip, acting on the new environment."""
        return cls.run_in_env(*args, python=[sys.executable, "-m", "pip", "--python", cls.python,
                                             command, "--disable-pip-version-check"])

    @classmethod
    def run_in_env(cls, *args, python=None):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        return subprocess.run([*(python or [cls.python]), *args], cwd=cls.elsewhere, env=env,
                              capture_output=True, text=True)

    def test_installs_offline_with_its_requirement_met(self):
        self.assertEqual(self.install.returncode, 0, self.install.stdout + self.install.stderr)
        show = self.pip("show", "ckptlab")
        self.assertEqual(show.returncode, 0, show.stderr)
        fields = dict(line.split(": ", 1) for line in show.stdout.splitlines() if ": " in line)
        self.assertEqual(fields.get("Version"), declared_version())
        self.assertEqual(fields.get("Requires"), "torch")
        check = self.pip("check")
        self.assertNotIn("ckptlab", check.stdout + check.stderr)

    def test_imports_from_any_folder_the_installed_copy(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        probe = self.run_in_env("-c", "import ckptlab, torch; print(ckptlab.__file__); "
                                "print(ckptlab.__version__); print(len(ckptlab.__all__))")
        self.assertEqual(probe.returncode, 0, probe.stderr)
        where, version, exported = probe.stdout.split()
        self.assertTrue(where.startswith(self.site + os.sep), where)
        self.assertEqual(version, declared_version())
        self.assertGreater(int(exported), 10)

    def test_its_command_runs_from_any_folder(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        usage = self.run_in_env("-m", "ckptlab.apply")
        self.assertEqual(usage.returncode, 2, usage.stdout + usage.stderr)
        self.assertIn("ckptlab.apply", usage.stderr)


if __name__ == "__main__":
    unittest.main()
