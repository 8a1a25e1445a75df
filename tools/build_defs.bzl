"""Thin wrappers over the native C++ rules: one warning/copts list for the whole project.

Native rules only (Bazel 4.2.3, offline): nothing here loads another repository's .bzl.
"""

# Warnings for ckptlab's own code. LibTorch's headers are included as system headers
# (-isystem through `includes`), so their warnings stay out of the way.
# -fno-semantic-interposition: .bazelrc's --force_pic compiles everything as for a shared
# library, where GCC may not inline or clone a function other code could replace at load time;
# nothing here is replaced so, and without it the chain solver's small accessors were calls
# through the PLT (strategy_properties_test 173 s -> 61 s; docs/build.md, "Build modes").
CKPT_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-fno-semantic-interposition",
]

# Tests and their testonly helpers compile at -O1 (after the mode's -O2): they time nothing (the
# sweep and the benchmarks do, at -O2), their own code is the thin part of their run, and both CI
# builds compile them. Measured in docs/build.md.
CKPT_TEST_COPTS = ["-O1"]

def ckpt_cc_library(name, copts = [], testonly = False, **kwargs):
    native.cc_library(
        name = name,
        copts = CKPT_COPTS + (CKPT_TEST_COPTS if testonly else []) + copts,
        testonly = testonly,
        **kwargs
    )

def ckpt_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = CKPT_COPTS + copts, **kwargs)

def ckpt_cc_test(name, copts = [], deps = [], size = "small", **kwargs):
    """A GoogleTest test; `deps` should include a main (gtest_main or a custom one)."""
    native.cc_test(
        name = name,
        copts = CKPT_COPTS + CKPT_TEST_COPTS + copts,
        deps = deps,
        size = size,
        **kwargs
    )

def ckpt_cc_benchmark(name, copts = [], tags = [], **kwargs):
    """A Google Benchmark binary: testonly, tagged so `bazel test` wildcards skip it."""
    native.cc_binary(
        name = name,
        copts = CKPT_COPTS + copts,
        testonly = True,
        tags = tags + ["benchmark"],
        **kwargs
    )

def ckpt_strategy(name, srcs = None, hdrs = [], deps = []):
    """A strategy plugin: <name>.cc (or `srcs`), linked whole (it self-registers)."""
    ckpt_cc_library(
        name = name,
        srcs = srcs or [name + ".cc"],
        hdrs = hdrs,
        alwayslink = 1,
        visibility = ["//visibility:public"],
        deps = ["//core/plan:strategy", "@absl//:status", "@absl//:strings"] + deps,
    )

def ckpt_sources():
    """This package's .h and .cc files as `:sources`, for testing/layering_test.sh."""
    native.filegroup(
        name = "sources",
        srcs = native.glob(["*.h", "*.cc"]),
        visibility = ["//testing:__pkg__"],
    )
