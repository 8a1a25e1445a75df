"""Repository rule that finds LibTorch and tells the build whether it has CUDA.

Where LibTorch comes from, first match wins:
  1. $LIBTORCH_HOME, passed with `--repo_env=LIBTORCH_HOME=/path`: an official LibTorch
     distribution or the directory of a pip `torch` package (both have include/ and lib/).
  2. Debian's libtorch-dev: headers under /usr/include, libraries in the multiarch lib dir.

Data parallelism (core/dist/data_parallel) needs c10d's Gloo backend, whose headers include Gloo's
own: include/gloo beside LibTorch's headers (for Debian's LibTorch, /usr/include: libgloo-dev).
Where they are, the target defines CKPT_HAS_GLOO=1 (and links Debian's libgloo when LibTorch is
Debian's, whose libtorch_cpu uses it as a shared library); elsewhere 0. Debian's 1.13 lacks one
header c10d's reducer.hpp includes; then the target adds shims/ (a declaration of the two names
reducer.hpp takes from it) to the include path. A CUDA LibTorch's NCCL backend needs NCCL's
nccl.h: where it is (in CUDA's headers, or beside LibTorch's) and LibTorch has
ProcessGroupNCCL.hpp, the target defines CKPT_HAS_NCCL=1; elsewhere 0.

The LibTorch has CUDA when its lib/ holds libtorch_cuda.so. Then the generated target
defines CKPT_HAS_CUDA=1 for every dependent (so `#if CKPT_HAS_CUDA` code compiles only then),
links the CUDA libraries (and the CUDA runtime libtorch_cuda.so itself loads), and exposes
CUDA's headers ($CUDA_HOME, else /usr/local/cuda).
`load("@libtorch//:cuda.bzl", "LIBTORCH_HAS_CUDA")` gives the same answer to BUILD files.
"""

_HEADER_DIRS = ["torch", "ATen", "c10", "caffe2"]  # and gloo, where present (below)

def _fail_missing(what, path, source):
    fail("ckptlab: %s not found at %s (from %s). Point --repo_env=LIBTORCH_HOME at a LibTorch " %
         (what, path, source) +
         "distribution or a pip torch package directory (with include/ and lib/), or " +
         "install Debian's libtorch-dev.")

def _find_cudart(rctx, lib_dir, cuda_home, source):
    """The CUDA runtime to link: the very file libtorch_cuda.so loads.

    That is an official distribution's libcudart-<hash>.so.N in lib/, a pip torch's
    nvidia/.../libcudart.so.N beside it in site-packages, or the system's. Linking another
    copy (say $CUDA_HOME's) would load two CUDA runtimes into one process, or, with the same
    soname, whichever the loader finds first. ldd says which; without ldd, $CUDA_HOME's.
    """
    ldd = rctx.which("ldd")
    if ldd:
        result = rctx.execute([ldd, lib_dir + "/libtorch_cuda.so"])
        for line in result.stdout.splitlines():
            name, arrow, rest = line.strip().partition(" => ")
            if arrow and name.startswith("libcudart") and rest.startswith("/"):
                return rest.partition(" (")[0]
    for candidate in [cuda_home + "/lib64/libcudart.so", cuda_home + "/lib/libcudart.so"]:
        if rctx.path(candidate).exists:
            return candidate
    fail("ckptlab: %s has CUDA, but no CUDA runtime to link was found: ldd does not say " %
         source + "which libcudart %s/libtorch_cuda.so loads, and %s/lib64 has no " %
         (lib_dir, cuda_home) + "libcudart.so; set --repo_env=CUDA_HOME=/path/to/cuda")

def _libtorch_repository_impl(rctx):
    home = rctx.os.environ.get("LIBTORCH_HOME", "").rstrip("/")
    if home:
        source = "LIBTORCH_HOME=" + home
        include_dir = home + "/include"
        lib_dir = home + "/lib"
    else:
        source = "Debian's libtorch-dev"
        include_dir = "/usr/include"
        lib_dir = ""
        for candidate in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"]:
            if rctx.path(candidate + "/libtorch_cpu.so").exists:
                lib_dir = candidate
                break
        if not lib_dir:
            _fail_missing("libtorch_cpu.so", "/usr/lib/<triplet>", source)

    if not rctx.path(include_dir + "/torch/csrc/api/include/torch/torch.h").exists:
        _fail_missing("torch/csrc/api/include/torch/torch.h", include_dir, source)
    if not rctx.path(lib_dir + "/libtorch_cpu.so").exists:
        _fail_missing("libtorch_cpu.so", lib_dir, source)

    for d in _HEADER_DIRS:
        if rctx.path(include_dir + "/" + d).exists:
            rctx.symlink(include_dir + "/" + d, "include/" + d)

    has_cuda = rctx.path(lib_dir + "/libtorch_cuda.so").exists
    has_gloo = rctx.path(include_dir + "/gloo/algorithm.h").exists
    shim_includes = ""
    if has_gloo:
        rctx.symlink(include_dir + "/gloo", "include/gloo")
        context = "torch/csrc/distributed/autograd/context/context.h"
        if not rctx.path(include_dir + "/" + context).exists:
            rctx.symlink(Label("//third_party/libtorch:shims/" + context), "shims/" + context)
            shim_includes = '"shims",'
    libs = ["torch", "torch_cpu", "c10"]
    if has_gloo and rctx.path(lib_dir + "/libgloo.so").exists:
        libs.append("gloo")
    cuda_includes = ""
    cudart = None
    has_nccl = False
    if has_cuda:
        libs += ["torch_cuda", "c10_cuda"]
        cuda_home = rctx.os.environ.get("CUDA_HOME", "/usr/local/cuda").rstrip("/")
        if not rctx.path(cuda_home + "/include/cuda_runtime_api.h").exists:
            fail("ckptlab: %s has CUDA, but CUDA's headers are not at %s/include; set " %
                 (source, cuda_home) + "--repo_env=CUDA_HOME=/path/to/cuda")
        rctx.symlink(cuda_home + "/include", "cuda/include")
        cuda_includes = '"cuda/include",'
        cudart = _find_cudart(rctx, lib_dir, cuda_home, source)
        if rctx.path(include_dir + "/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp").exists:
            if rctx.path(cuda_home + "/include/nccl.h").exists:
                has_nccl = True
            elif rctx.path(include_dir + "/nccl.h").exists:
                rctx.symlink(include_dir + "/nccl.h", "include/nccl.h")
                has_nccl = True

    # --no-as-needed: libtorch.so registers operators from libtorch_cpu/cuda at load time,
    # and nothing references libtorch_cuda.so directly, so an as-needed link would drop it.
    linkopts = ["-L" + lib_dir, "-Wl,-rpath," + lib_dir, "-Wl,--push-state,--no-as-needed"]
    linkopts += ["-l" + lib for lib in libs]
    linkopts += ["-Wl,--pop-state"]
    if cudart:
        # The CUDA-only code calls the CUDA runtime itself (ATen's CUDAEvent is inline), and
        # the linker resolves a program's symbols only against the libraries it is given, not
        # against libtorch_cuda.so's own dependencies ("DSO missing from command line").
        linkopts += [cudart, "-Wl,-rpath," + cudart.rpartition("/")[0]]

    rctx.file("BUILD", """# Generated by //third_party/libtorch:libtorch.bzl from {source}.
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "shims/**/*.h"] +
                {cuda_hdrs}),
    includes = [
        "include",
        "include/torch/csrc/api/include",
        {cuda_includes}
        {shim_includes}
    ],
    defines = [
        "CKPT_HAS_CUDA={has_cuda_int}",
        "CKPT_HAS_GLOO={has_gloo_int}",
        "CKPT_HAS_NCCL={has_nccl_int}",
    ],
    linkopts = {linkopts},
)
""".format(
        source = source,
        cuda_hdrs = '["cuda/include/**"]' if has_cuda else "[]",
        cuda_includes = cuda_includes,
        shim_includes = shim_includes,
        has_cuda_int = 1 if has_cuda else 0,
        has_gloo_int = 1 if has_gloo else 0,
        has_nccl_int = 1 if has_nccl else 0,
        linkopts = repr(linkopts),
    ))
    rctx.file("cuda.bzl", """# Generated: whether the LibTorch in use ({source}) has CUDA.
LIBTORCH_HAS_CUDA = {has_cuda}
LIBTORCH_SOURCE = "{source}"
""".format(source = source, has_cuda = has_cuda))

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["LIBTORCH_HOME", "CUDA_HOME"],
    local = True,
)
