#!/usr/bin/env python3
"""Writes tools/requirements-pypi.txt from tools/requirements-pypi.in: each `name==version` of
the .in with the sha256 of every file PyPI holds of that release (its simple index, PEP 503),
so that `pip install --require-hashes` installs those files and no other.

    python3 tools/lock_requirements.py          # after changing a version in the .in

The .in is every package of the environment pinned (pip installs it with --no-deps, so that
nothing is resolved at install time); its comments say how it was chosen. Written whole or not
at all (a temporary, then renamed); a release PyPI does not list, or one without a hash, ends
the run with exit 1 and nothing written.
"""

import html.parser
import os
import re
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "requirements-pypi.in")
TARGET = os.path.join(HERE, "requirements-pypi.txt")
INDEX = "https://pypi.org/simple/"


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []  # (file name, href)
        self._href = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(file: str) -> str:
    """The version a distribution's file name carries: a wheel's second field, an sdist's
    last."""
    if file.endswith(".whl"):
        return file[:-4].split("-")[1] if file.count("-") >= 4 else ""
    for extension in (".tar.gz", ".zip"):
        if file.endswith(extension):
            return file[:-len(extension)].rpartition("-")[2]
    return ""


def hashes(name: str, version: str) -> list:
    """The sha256 of each file of `name` at `version`, from PyPI's simple index."""
    with urllib.request.urlopen(INDEX + _normal(name) + "/", timeout=60) as page:
        parser = _Links()
        parser.feed(page.read().decode("utf-8"))
    found = sorted({href.split("#sha256=")[1] for file, href in parser.links
                    if "#sha256=" in href and _version(file) == version})
    if not found:
        raise SystemExit(f"lock_requirements: {name}=={version}: no file with a sha256 on PyPI")
    return found


def main() -> int:
    lines = []
    with open(SOURCE) as source:
        for line in source:
            pin = line.split("#")[0].strip()
            if not pin:
                lines.append(line.rstrip("\n"))
                continue
            name, _, version = pin.partition("==")
            if not version:
                raise SystemExit(f"lock_requirements: {pin!r} is not name==version")
            digests = hashes(name, version)
            lines.append(f"{pin} \\\n" + " \\\n".join(f"    --hash=sha256:{d}" for d in digests))
            print(f"lock_requirements: {pin}: {len(digests)} files", file=sys.stderr)
    fd, temporary = tempfile.mkstemp(dir=HERE, prefix=".requirements-")
    try:
        with os.fdopen(fd, "w") as out:
            out.write("# Written by tools/lock_requirements.py from requirements-pypi.in: edit "
                      "that, then run it.\n" + "\n".join(lines) + "\n")
        os.replace(temporary, TARGET)
    except BaseException:
        os.unlink(temporary)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
