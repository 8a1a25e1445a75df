"""Declares every external repository ckptlab needs; WORKSPACE calls ckpt_dependencies().

Everything comes from Debian's packages (installed by tools/bazel) or from local shims, so the
build never touches the network. Bazel 4.2.3 would otherwise try to download @rules_cc,
@rules_java, @platforms and @remote_coverage_tools; see ../shared/BAZEL_OFFLINE.md.
"""

load("//third_party/absl:absl.bzl", "absl_repository")
load("//third_party/libtorch:libtorch.bzl", "libtorch_repository")

def ckpt_dependencies():
    """Declares the toolchain shims and the system libraries."""

    # Offline shims for what Bazel 4.2.3 itself wants to download.
    native.local_repository(
        name = "rules_cc",
        path = "third_party/rules_cc_shim",
    )
    native.local_repository(
        name = "rules_java",
        path = "/usr/share/bazel/rules/java",
    )
    native.local_repository(
        name = "platforms",
        path = "/usr/share/bazel/tools/platforms",
    )
    native.local_repository(
        name = "remote_coverage_tools",
        path = "third_party/coverage_tools_stub",
    )

    # LibTorch: $LIBTORCH_HOME (pass it with --repo_env) or Debian's libtorch-dev.
    libtorch_repository(name = "libtorch")

    # Abseil: the one pkg-config finds (Debian's libabsl-dev), whichever release it is.
    absl_repository(name = "absl")

    # The other C++ libraries, from Debian's -dev packages under /usr.
    for dep in ["rapidcheck", "benchmark", "gtest"]:
        native.new_local_repository(
            name = dep,
            path = "/usr",
            build_file = "//third_party:%s/%s.BUILD" % (dep, dep),
        )
