#!/usr/bin/env bash
# Builds and tests ckptlab against the LibTorch 2.x of newer Debian releases, on this Debian 12
# machine whose own LibTorch is 1.13 and CPU-only. Everything else here builds against 1.13, so
# without this the 2.x branches of core/run/torch_compat.h/.cc (the CPU allocator interface, the
# autocast functions, the CUDA allocator's statistics) and every link against a CUDA LibTorch
# would first be tried on a GPU host (torch 2.11), in a device session with a 30-minute budget.
#
# For each Debian suite named (default: trixie+cuda, LibTorch 2.6 built with CUDA; and sid, the
# newest LibTorch Debian packages, CPU-only, 2.14 when this was written):
#   1. a minimal root of the suite, made with debootstrap (tools/debian_root.sh) from the Debian
#      archive this machine's apt sources name (the one network these machines have), with its
#      g++, CMake, ninja, libtorch-dev, Abseil, GoogleTest, RapidCheck and Google Benchmark;
#   2. with "+cuda": in it, contrib's CUDA build of the same LibTorch (libtorch-cuda-dev) in
#      place of libtorch-dev, non-free's CUDA toolkit (LibTorch's CMake config needs nvcc),
#      Bazel, PyTorch over that LibTorch and gnuplot. The one dependency these machines cannot
#      fetch is cuDNN (Debian's nvidia-cudnn downloads it from NVIDIA as it installs); a package
#      of that name takes its place, holding a stub libcudnn whose every function aborts.
#      Nothing here calls cuDNN: there is no GPU;
#   3. in it, with the sources mounted read-only: the CMake build (CMakeLists.txt, the GPU host's
#      route) and ctest, so every test runs against that LibTorch. With "+cuda" this is the GPU
#      host's route rehearsed (tools/gpu/rehearse.sh) with the C++ bundle made on this machine,
#      as a GPU session makes it: every target built, every test run but the sweep command
#      line's two end-to-end tests (CI's bare root runs them: their flags, folders and hostile
#      input are the same code whatever the LibTorch), and CMake must say CUDA 1 and NCCL 1
#      (LibTorch's CMake config found the toolkit, the NCCL route is on);
#   4. with "+cuda": Bazel against that CUDA LibTorch: every target analysed, @libtorch found with
#      CUDA (CKPT_HAS_CUDA=1), and device_test built and run, which fails unless the build links
#      LibTorch's CUDA library. Step 3 compiles every source with the same defines and warnings:
#      what only the Bazel route can get wrong (its repository rule, its link) costs a minute
#      here, not a second build;
#   5. in it, tools/check_cuda_compile.sh against the same LibTorch version's CUDA headers
#      (contrib's libtorch-cuda-dev where the suite has it for that version, else the c10/cuda
#      that libtorch-dev ships) and this machine's CUDA toolkit headers: the CUDA-only code's
#      2.x branches compile.
# Sid moves: when Debian packages a newer LibTorch, this builds against it, and a failure names
# the version. A suite whose root cannot be made (mirror unreachable, sid uninstallable for a
# day, too little disk) is skipped and said so; a build, test or compile failure is a failure,
# and so is a "+cuda" suite without a CUDA build of its LibTorch.
#
# Needs root (debootstrap, chroot, a private mount namespace) and about 2 GB of disk per suite
# (13 GB with +cuda) under $CKPT_ROOTS_DIR (default /var/tmp). Roots are made afresh and removed
# after; CKPT_KEEP_ROOTS=1 keeps them, and a kept root is upgraded and reused while this script
# and tools/debian_root.sh, which say what makes and fills it, are unchanged (else it is made
# afresh). A kept root's builds start from nothing all the same. The logs stay there:
# ckptlab-root-<suite>.log (debootstrap), ckptlab-check-<suite>.log (the rest).
#
# --prepare does steps 1 and 2 and the packages step 4 needs, nothing else, and keeps the roots:
# a later run without it finds them made. Making trixie+cuda's waits on the network and the
# disk for much of its time, so CI (.ci/run) prepares it while the bare root's build runs, and
# its later check starts at the build.
# A prepared root is removed by that later run, as any root, unless CKPT_KEEP_ROOTS.
#
# Exit status: 0 every suite that could be made built and passed (with --prepare: was made);
# 1 something failed; 2 nothing ran (not root, or no suite's root could be made).
#
#   tools/check_libtorch_versions.sh            # trixie+cuda and sid
#   tools/check_libtorch_versions.sh trixie     # trixie's CPU LibTorch, CMake and ctest only
#   tools/check_libtorch_versions.sh --prepare trixie+cuda   # the root and its packages only
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=tools/debian_root.sh
source tools/debian_root.sh

roots="${CKPT_ROOTS_DIR:-/var/tmp}"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
prepare=0
if [[ "${1:-}" == --prepare ]]; then
  prepare=1
  shift
fi
suites=("$@")
((${#suites[@]})) || suites=(trixie+cuda sid)
packages=g++,cmake,ninja-build,libtorch-dev,libabsl-dev,libgtest-dev,libgmock-dev
packages+=,librapidcheck-dev,libbenchmark-dev,libopenblas0-pthread,libgloo-dev
# The registry these machines reach serves sid's Release file days after its Valid-Until (seen:
# "expired (invalid since 16d)"), which debootstrap accepts and apt refuses.
# Exported: the chroots inherit it.
export CKPT_APT_OPTIONS="-o Acquire::Check-Valid-Until=false"

say() { echo "check_libtorch_versions: $*"; }

if why=$(roots_unavailable); then
  say "skipped: $why" >&2
  exit 2
fi
for suite in "${suites[@]}"; do
  [[ "$suite" =~ ^[a-z][a-z0-9-]*(\+cuda)?$ ]] || {
    say "bad suite '$suite'; accepted: a Debian suite or codename (trixie, forky, sid, ...)," \
      "optionally with +cuda (trixie+cuda)" >&2
    exit 1
  }
done

# What runs inside a suite's root, as root, with the sources at /src (read-only), this
# machine's CUDA toolkit at /opt/host-cuda when it has one (not at /usr/local/cuda: a "+cuda"
# root has its own toolkit, which LibTorch's CMake config must find alone), and
# CKPT_CUDA_TORCH=1 for "+cuda".
read -r -d '' inner_script <<'INNER' || true
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
export CMAKE_GENERATOR=Ninja  # the root has ninja, not make (also for check_cuda_compile.sh)
cuda_torch=${CKPT_CUDA_TORCH:-0}  # 1: build and test against the CUDA LibTorch
status=0
cd /src || exit 1
apt-get update -qq $CKPT_APT_OPTIONS
installed_version() {
  dpkg-query -W -f='${db:Status-Abbrev} ${Version}\n' "$1" 2>/dev/null | awk '$1 == "ii" {print $2}'
}
# A kept "+cuda" root has libtorch-cuda-dev in place of libtorch-dev.
version=$(installed_version libtorch-cuda-dev)
[[ -n "$version" ]] || version=$(installed_version libtorch-dev)
# The CUDA build of this very upstream version (either may carry a binNMU suffix, +b1).
cuda_dev=$(apt-cache madison libtorch-cuda-dev 2>/dev/null | awk '{print $3}' |
  while read -r v; do [[ "${v%+b*}" == "${version%+b*}" ]] && echo "$v"; done | head -1)

# Unpacks the package $1 (NAME=VERSION) into the folder $2, without installing it. (apt
# downloads as the user _apt, so the download folder is writable for all.)
extract_deb() {
  rm -rf "$2" /tmp/deb && mkdir -m 777 /tmp/deb && (cd /tmp/deb && apt-get download -qq "$1") &&
    dpkg-deb -x /tmp/deb/*.deb "$2"
}

# Installs the package nvidia-cudnn holding a stub of the cuDNN library that the libraries under
# $1 need: under its soname and symbol version, each cuDNN function they import, aborting.
install_cudnn_stub() {
  local lib needs soname="" symbols=""
  while read -r lib; do
    needs=$(readelf -d "$lib" | sed -n 's/.*Shared library: \[\(libcudnn\.so[^]]*\)\].*/\1/p')
    [[ -n "$needs" ]] || continue
    soname=$needs
    symbols+=" $(nm -D --undefined-only "$lib" | awk '{print $2}' |
      sed -n "s/@$soname\$//p; /^cudnn[A-Za-z0-9_]*\$/p")"
  done < <(find "$1" -name 'lib*.so.*' -type f)
  [[ -n "$soname" ]] || { echo "no library of the CUDA LibTorch needs cuDNN"; return 1; }
  symbols=$(tr ' ' '\n' <<<"$symbols" | grep . | sort -u)
  local pkg=/tmp/cudnn-stub dir
  dir=$pkg/usr/lib/$(gcc -print-multiarch)
  rm -rf "$pkg" && mkdir -p "$dir" "$pkg/DEBIAN"
  {
    echo '#include <stdio.h>'
    echo '#include <stdlib.h>'
    echo "static void stub(const char* f) {"
    echo "  fprintf(stderr, \"stub $soname: %s called\\n\", f);"
    echo "  abort();"
    echo "}"
    for s in $symbols; do echo "void $s(void) { stub(\"$s\"); }"; done
  } >/tmp/cudnn_stub.c
  echo "$soname { global: *; };" >/tmp/cudnn_stub.map
  gcc -shared -fPIC -o "$dir/$soname" -Wl,-soname,"$soname" \
    -Wl,--version-script=/tmp/cudnn_stub.map /tmp/cudnn_stub.c || return 1
  # Above the archive's version, which the CUDA LibTorch may ask for (>= 9.0.0.312~); held, so
  # that upgrading a kept root does not bring the downloader back.
  local real
  real=$(apt-cache madison nvidia-cudnn | awk '{print $3}' | sort -V | tail -1)
  printf '%s\n' 'Package: nvidia-cudnn' "Version: ${real:-0}+ckptlab.stub" 'Architecture: amd64' \
    'Maintainer: ckptlab <ckptlab@localhost>' \
    "Description: stub $soname for checks without a GPU; every function aborts" \
    >"$pkg/DEBIAN/control"
  dpkg-deb --build "$pkg" /tmp/nvidia-cudnn-stub.deb >/dev/null &&
    dpkg -i /tmp/nvidia-cudnn-stub.deb >/dev/null && apt-mark hold nvidia-cudnn >/dev/null ||
    return 1
  echo "cudnn: stub $soname, $(grep -c . <<<"$symbols") functions"
}

# Installs libtorch-cuda-dev $1 and the CUDA toolkit, with the cuDNN stub.
install_cuda_torch() {
  # The libraries come in libtorch-cuda-<major.minor>, fetched alone for their cuDNN imports.
  local torch_pkg
  torch_pkg=$(apt-cache depends "libtorch-cuda-dev=$1" | grep -o 'libtorch-cuda-[0-9.]*$' | head -1)
  extract_deb "$torch_pkg=$1" /tmp/torch-deb && install_cudnn_stub /tmp/torch-deb || return 1
  # libgloo-cuda-dev: Gloo's headers for data parallel (core/dist/data_parallel); it replaces the
  # libgloo-dev the root was made with, which conflicts with the CUDA LibTorch's Gloo.
  # libnccl-dev: NCCL's nccl.h, for the NCCL route (the CUDA LibTorch links libnccl2 already).
  apt-get install -y -qq --no-install-recommends "libtorch-cuda-dev=$1" libgloo-cuda-dev \
    libnccl-dev nvidia-cuda-toolkit \
    >/tmp/install.log 2>&1 || { tail -20 /tmp/install.log; return 1; }
}

flavour=CPU
if [[ "$cuda_torch" == 1 ]]; then
  if [[ -z "$cuda_dev" ]]; then
    echo "== LibTorch $version: this suite's contrib has no CUDA build of it (libtorch-cuda-dev)"
    exit 1
  fi
  if [[ "$(installed_version libtorch-cuda-dev)" != "$cuda_dev" ]]; then
    echo "installing libtorch-cuda-dev $cuda_dev and the CUDA toolkit"
    install_cuda_torch "$cuda_dev" || { echo "could not install the CUDA LibTorch"; exit 1; }
  fi
  version=$cuda_dev
  flavour="CUDA $(nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
  # Bazel 4.2.3 and what the Bazel route needs besides the libraries (tools/bazel's list),
  # PyTorch over this very LibTorch for the Python tests (python3-torch-cuda, which conflicts
  # with the CPU python3-torch) with torchvision (real models for ckptlab.chain's tests; it
  # installs beside the CUDA build), and gnuplot for the rehearsal's check of
  # tools/gpu/publish.sh.
  apt-get install -y -qq --no-install-recommends bazel-bootstrap bazel-rules-java \
    bazel-platforms pkg-config python3-torch-cuda python3-torchvision gnuplot-nox \
    >/tmp/install.log 2>&1 ||
    { tail -20 /tmp/install.log; exit 1; }
fi
if [[ "${CKPT_PREPARE_ONLY:-0}" == 1 ]]; then
  echo "== LibTorch $version ($flavour): the root and its packages are ready"
  exit 0
fi
system="$(. /etc/os-release; echo "$PRETTY_NAME"), $(g++ --version | head -1)"
echo "== LibTorch $version ($flavour; $system)"

if [[ "$cuda_torch" != 1 ]]; then
  rm -rf /tmp/build  # a kept root's cache would keep what an earlier configure found
  cmake -S . -B /tmp/build >/tmp/configure.log 2>&1 || { cat /tmp/configure.log; exit 1; }
  grep "ckptlab:" /tmp/configure.log
  # -k 0: every file that fails is reported, not only the first.
  cmake --build /tmp/build -- -k 0 || status=1
  ctest --test-dir /tmp/build --output-on-failure -j "$(nproc)" || status=1
else
  # The GPU host's route against the CUDA LibTorch, with the bundle made outside (/opt/bundle):
  # every target built, every test run but those rehearse.sh --all leaves to other runs, and
  # CMake must find CUDA and NCCL.
  CKPT_BUNDLE=/opt/bundle CKPT_TORCH_CMAKE_DIR=/usr/lib/$(gcc -print-multiarch)/cmake/Torch \
    tools/gpu/rehearse.sh --all 2>&1 | tee /tmp/rehearsal.log
  ((PIPESTATUS[0] == 0)) || status=1

  # Bazel against the CUDA LibTorch. It wants $CUDA_HOME/include; Debian puts the toolkit's
  # headers in /usr/include, so a folder of links to them stands in. The sources are read-only:
  # no convenience symlinks (--symlink_prefix=/).
  # (And no Bazel outputs of a kept root's earlier run: the check builds from nothing.)
  # (The links are made in one process: a mkdir and an ln apiece cost seconds of CPU.)
  rm -rf /tmp/cuda-home /root/.cache/bazel && mkdir -p /tmp/cuda-home/include
  dpkg -L nvidia-cuda-dev libcub-dev libthrust-dev libcu++-dev 2>/dev/null | python3 -c '
import os, sys
for f in sys.stdin.read().splitlines():
    if f.startswith("/usr/include/") and os.path.isfile(f):
        link = "/tmp/cuda-home/include/" + f[len("/usr/include/"):]
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(f, link)'
  bazel_flags=(--repo_env=CUDA_HOME=/tmp/cuda-home --symlink_prefix=/ --test_summary=short)
  echo "bazel against the CUDA LibTorch: every target analysed; device_test built and run"
  bazel-4 build "${bazel_flags[@]}" --nobuild //... || status=1
  bazel-4 test "${bazel_flags[@]}" //testing:device_test || status=1
  output_base=$(bazel-4 info output_base 2>/dev/null)
  if grep -q 'LIBTORCH_HAS_CUDA = True' "$output_base/external/libtorch/cuda.bzl"; then
    echo "bazel: @libtorch has CUDA (CKPT_HAS_CUDA=1)"
  else
    echo "bazel: @libtorch does not see the CUDA LibTorch"
    status=1
  fi
  bazel-4 shutdown 2>/dev/null
fi

# The CUDA-only code against the CUDA headers of this very LibTorch version: those of the CUDA
# build (libtorch-cuda-dev of contrib, generated headers included) where the suite has it for
# this upstream version, else the c10/cuda of libtorch-dev.
export CUDA_HOME=/opt/host-cuda  # for check_cuda_compile.sh: this machine's toolkit
if [[ ! -f $CUDA_HOME/include/cuda_runtime_api.h ]]; then
  echo "cuda-headers: none (this machine has no CUDA toolkit headers): not compiled"
elif [[ "$cuda_torch" == 1 ]]; then
  echo "cuda-headers: libtorch-cuda-dev $cuda_dev (installed)"
  tools/check_cuda_compile.sh || status=1
elif [[ -n "$cuda_dev" ]] && extract_deb "libtorch-cuda-dev=$cuda_dev" /opt/libtorch-cuda; then
  echo "cuda-headers: libtorch-cuda-dev $cuda_dev"
  TORCH_INCLUDE=/opt/libtorch-cuda/usr/include tools/check_cuda_compile.sh || status=1
elif [[ -f /usr/include/c10/cuda/CUDACachingAllocator.h ]]; then
  echo "cuda-headers: libtorch-dev $version (no libtorch-cuda-dev for it)"
  tools/check_cuda_compile.sh || status=1
else
  echo "cuda-headers: none (no libtorch-cuda-dev $version, no c10/cuda): not compiled"
fi
exit "$status"
INNER

results=()
failed=0
ran=0
# What makes and fills the roots: a kept root made by other scripts is made afresh (make_root).
recipe=$(cat tools/check_libtorch_versions.sh tools/debian_root.sh | sha256sum | cut -d' ' -f1)
for name in "${suites[@]}"; do
  suite=${name%+cuda}
  cuda_torch=0
  [[ "$name" == "$suite" ]] || cuda_torch=1
  root="$roots/ckptlab-root-$name"
  log="$roots/ckptlab-root-$name.log"
  check_log="$roots/ckptlab-check-$name.log"
  started=$SECONDS
  # A root, its packages and builds: about 2 GB, 13 GB with +cuda (Bazel's outputs included).
  need_gb=3
  ((cuda_torch == 0)) || need_gb=14
  avail=$(free_gb "$roots")
  if [[ ! -d "$root" ]] && ((avail < need_gb)); then
    say "skipped $name: $avail GB free in $roots, and its root needs about $need_gb GB" >&2
    results+=("$name: skipped, $avail GB free in $roots (needs about $need_gb GB)")
    continue
  fi
  if ! CKPT_APT_OPTIONS="$CKPT_APT_OPTIONS" \
    make_root "$suite" "$root" "$log" "$packages" "$recipe"; then
    say "skipped $name: its root could not be made (last lines of $log):" >&2
    tail -5 "$log" >&2
    results+=("$name: skipped, no root")
    continue
  fi
  ran=$((ran + 1))
  cuda_mount=""
  if [[ -f "$cuda_home/include/cuda_runtime_api.h" ]]; then
    cuda_mount=$(readlink -f "$cuda_home")
  fi
  if ((prepare)); then
    say "installing $name's packages (the log: $roots/ckptlab-prepare-$name.log)"
    if in_root "$root" "$inner_script" "" CKPT_CUDA_TORCH="$cuda_torch" CKPT_PREPARE_ONLY=1 \
      CKPT_APT_OPTIONS="$CKPT_APT_OPTIONS" >"$roots/ckptlab-prepare-$name.log" 2>&1; then
      results+=("$name: prepared in $((SECONDS - started)) s")
    else
      failed=$((failed + 1))
      results+=("$name: FAILED to prepare; the output is in $roots/ckptlab-prepare-$name.log")
    fi
    continue  # kept, for the run that builds and tests
  fi
  if ((cuda_torch)); then
    # The C++ bundle the rehearsal builds from: this machine's, as a GPU session carries it.
    tools/make_cmake_bundle.sh "$root/opt/bundle" || {
      failed=$((failed + 1))
      results+=("$name: FAILED, no C++ bundle could be made here (tools/make_cmake_bundle.sh)")
      [[ "${CKPT_KEEP_ROOTS:-0}" == 1 ]] || rm -rf "$root"
      continue
    }
  fi
  say "building and testing in $name"
  set +e
  CKPT_ROOT_SRC=$repo in_root "$root" "$inner_script" "$cuda_mount" CKPT_CUDA_TORCH="$cuda_torch" \
    CKPT_APT_OPTIONS="$CKPT_APT_OPTIONS" 2>&1 | tee "$check_log"
  rc=${PIPESTATUS[0]}
  set -e
  version=$(sed -n 's/^== LibTorch \([^ ]*\) (\([^;]*\);.*/\1 (\2)/p' "$check_log")
  version=${version:-?}  # the run died before it said
  # (|| true: a log without the line, which is no error, must not end this script under -e.)
  summary=$(grep -oE '[0-9]+ tests? failed out of [0-9]+' "$check_log" | tail -1 || true)
  bazel=$(grep -oE '^Executed [0-9]+ out of [0-9]+ tests?: .*' "$check_log" | tail -1 || true)
  bazel=${bazel%.}
  bazel=${bazel:+ bazel: ${bazel#Executed };}
  if ((rc == 0)); then
    cuda=$(sed -n 's/^cuda-headers: //p' "$check_log" | tail -1)
    line="$name: LibTorch $version: built; ctest: ${summary:-no summary};$bazel"
    results+=("$line CUDA-only code against $cuda ($((SECONDS - started)) s)")
  else
    failed=$((failed + 1))
    line="$name: LibTorch $version: FAILED (exit $rc; ctest: ${summary:-no summary};$bazel)"
    results+=("$line the whole output is in $check_log")
  fi
  [[ "${CKPT_KEEP_ROOTS:-0}" == 1 ]] || rm -rf "$root"
done

for line in "${results[@]}"; do say "$line"; done
if ((failed)); then exit 1; fi
if ((ran == 0)); then
  say "skipped: no suite's root could be made"
  exit 2
fi
