#!/usr/bin/env python3
"""Checks that every repository path the documentation names exists.

Reads README.md and docs/*.md (not docs/results/, which holds published runs as they were) and
collects:
  - relative Markdown link targets, [text](path), resolved against the page's folder;
  - code spans that name a path under one of the project's top-level folders (`core/plan/plan.h`,
    `tools/bazel`, `docs/sweep.md`) or a top-level file (`WORKSPACE`, `.bazelrc`);
  - Bazel labels (`//experiments:sweep`, `//testing/...`): the package's BUILD file, and for a
    named target, that the BUILD file mentions it;
  - the same paths and labels among the words of shell code blocks (commands), not of other
    code blocks (a C++ example names the files a reader would write).
A path with a wildcard or a placeholder (<...>, *, $) is skipped, and so is one that git
ignores (a build output such as third_party/cmake_bundle/, made by a tool the docs name). Prints each missing path with
the page and line that name it; exit status 1 when any is missing, 0 otherwise.

  tools/check_doc_paths.py          # from .ci/run
"""

import os
import re
import subprocess
import sys

TOP_FOLDERS = ("core", "strategies", "models", "experiments", "testing", "third_party", "tools",
               "docs", ".ci")
TOP_FILES = ("WORKSPACE", "BUILD", ".bazelrc", ".clang-format", "CMakeLists.txt", "README.md")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`]+)`")
LABEL = re.compile(r"^//([A-Za-z0-9_/.-]*?)(?::([A-Za-z0-9_.-]+)|/?\.\.\.)?$")


def pages(root):
    yield os.path.join(root, "README.md")
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        for name in sorted(os.listdir(docs)):
            if name.endswith(".md"):
                yield os.path.join(docs, name)


def placeholder(path):
    return any(c in path for c in "<>*$") or path.endswith("-")


def expand_braces(word):
    """models/heavy_mlp.{h,cc} -> models/heavy_mlp.h, models/heavy_mlp.cc (one brace group)."""
    match = re.search(r"\{([^{}]*)\}", word)
    if not match:
        return [word]
    return [word[:match.start()] + part + word[match.end():] for part in match.group(1).split(",")]


def ignored_by_git(root, path):
    """Whether git ignores `path` (a generated file); False where git cannot say."""
    try:
        return subprocess.run(["git", "-C", root, "check-ignore", "-q", "--", path],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=False).returncode == 0
    except OSError:
        return False


def check_label(root, package, target):
    build = os.path.join(root, package, "BUILD")
    if not os.path.isfile(build):
        return f"no BUILD file in {package or 'the top folder'}"
    if target is not None:
        with open(build, encoding="utf-8") as f:
            if f'name = "{target}"' not in f.read():
                return f"{package}/BUILD has no target '{target}'"
    return None


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    missing = 0
    checked = 0
    for page in pages(root):
        rel_page = os.path.relpath(page, root)
        in_fence = False
        shell_fence = False
        with open(page, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                # Shell blocks hold commands whose paths must exist; other blocks (C++, Python)
                # show files a reader would write.
                in_fence = not in_fence
                shell_fence = in_fence and line[3:].strip() in ("", "sh", "bash")
                continue
            problems = []
            if not in_fence:
                for target in LINK.findall(line):
                    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                        continue  # a URL or an anchor
                    target = target.split("#")[0]
                    if placeholder(target):
                        continue
                    checked += 1
                    if not os.path.exists(os.path.join(os.path.dirname(page), target)):
                        problems.append(f"link target {target}")
            spans = CODE.findall(line) if not in_fence else []
            if in_fence and shell_fence:
                spans = line.split()
            for span in spans:
                for word in span.split():
                    word = word.strip("\"',;()")
                    label = LABEL.match(word)
                    if label:
                        checked += 1
                        problem = check_label(root, label.group(1), label.group(2))
                        if problem:
                            problems.append(f"label {word}: {problem}")
                        continue
                    head = word.split("/")[0]
                    if "/" not in word and word not in TOP_FILES:
                        continue
                    if head not in TOP_FOLDERS and word not in TOP_FILES:
                        continue
                    if placeholder(word) or ":" in word or "=" in word:
                        continue
                    for path in expand_braces(word):
                        checked += 1
                        if (not os.path.exists(os.path.join(root, path.rstrip("/"))) and
                                not ignored_by_git(root, path)):
                            problems.append(f"path {path}")
            for problem in problems:
                print(f"{rel_page}:{number}: {problem} does not exist")
                missing += 1
    if missing:
        print(f"check_doc_paths: {missing} path(s) named in the docs do not exist "
              f"({checked} checked)")
        return 1
    print(f"check_doc_paths: all {checked} paths and labels named in the docs exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
