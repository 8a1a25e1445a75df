"""Offline stand-in for @rules_cc, for Bazel 4.2.3.

Bazel's own @bazel_tools//tools/cpp:BUILD loads @rules_cc//cc:defs.bzl, which Bazel would
download. Debian's bazel-rules-cc is too new for Bazel 4 (it needs use_cpp_toolchain), so this
shim forwards each rule to the native one of the same name.
"""

def cc_binary(**attrs):
    native.cc_binary(**attrs)

def cc_library(**attrs):
    native.cc_library(**attrs)

def cc_test(**attrs):
    native.cc_test(**attrs)

def cc_import(**attrs):
    native.cc_import(**attrs)

def cc_toolchain(**attrs):
    native.cc_toolchain(**attrs)

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**attrs)

def objc_library(**attrs):
    native.objc_library(**attrs)
