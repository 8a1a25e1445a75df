#!/usr/bin/env bash
# Builds and tests ckptlab against the LibTorch 2.x of newer Debian releases, on this Debian 12
# machine whose own LibTorch is 1.13. Everything else here builds against 1.13, so without this
# the 2.x branches of core/torch_compat.h (the CPU allocator interface, the autocast functions,
# the CUDA allocator's statistics) would first compile and run on a GPU host (torch 2.11), in a
# device session with a 30-minute budget.
#
# For each Debian suite named (default: trixie, LibTorch 2.6; and sid, the newest LibTorch Debian
# packages, 2.14 when this was written):
#   1. a minimal root of the suite, made with debootstrap from Debian's package registry (the
#      one network these machines have), with its g++, CMake, ninja, libtorch-dev, Abseil,
#      GoogleTest, RapidCheck and Google Benchmark;
#   2. in it, with the sources mounted read-only: the CMake build (CMakeLists.txt, the GPU host's
#      route) and ctest, so every test runs against that LibTorch;
#   3. in it, tools/check_cuda_compile.sh against the same LibTorch version's CUDA headers
#      (contrib's libtorch-cuda-dev where the suite has it for that version, else the c10/cuda
#      that libtorch-dev ships) and this machine's CUDA toolkit headers: the CUDA-only code's
#      2.x branches compile.
# Sid moves: when Debian packages a newer LibTorch, this builds against it, and a failure names
# the version. A suite whose root cannot be made (mirror unreachable, sid uninstallable for a
# day) is skipped and said so; a build, test or compile failure is a failure.
#
# Needs root (debootstrap, chroot, a private mount namespace) and about 2 GB of disk per suite
# under $CKPT_ROOTS_DIR (default /var/tmp). Roots are made afresh (2.5-3 minutes each) and
# removed after; CKPT_KEEP_ROOTS=1 keeps them, and a kept root is upgraded and reused. The logs
# stay there: ckptlab-root-<suite>.log (debootstrap), ckptlab-check-<suite>.log (the rest).
#
# Exit status: 0 every suite that could be made built and passed; 1 something failed; 2 nothing
# ran (not root, or no suite's root could be made).
#
#   tools/check_libtorch_versions.sh            # trixie and sid: 8 + 9 minutes on 2 cores
#   tools/check_libtorch_versions.sh trixie
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

mirror="${CKPT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
roots="${CKPT_ROOTS_DIR:-/var/tmp}"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
suites=("$@")
((${#suites[@]})) || suites=(trixie sid)
packages=g++,cmake,ninja-build,libtorch-dev,libabsl-dev,libgtest-dev,libgmock-dev
packages+=,librapidcheck-dev,libbenchmark-dev,libopenblas0-pthread
# The registry these machines reach serves sid's Release file days after its Valid-Until (seen:
# "expired (invalid since 16d)"), which debootstrap accepts and apt refuses.
# Exported: the chroots inherit it.
export CKPT_APT_OPTIONS="-o Acquire::Check-Valid-Until=false"

say() { echo "check_libtorch_versions: $*"; }

if ((EUID != 0)); then
  say "skipped: needs root (debootstrap, chroot, mount namespace)" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null; then
  say "skipped: no debootstrap (apt-get install debootstrap; tools/bazel installs it)" >&2
  exit 2
fi
for suite in "${suites[@]}"; do
  [[ "$suite" =~ ^[a-z][a-z0-9-]*$ ]] || {
    say "bad suite name '$suite' (a Debian suite or codename: trixie, forky, sid, ...)" >&2
    exit 1
  }
done

# What runs inside a suite's root, as root, with the sources at /src (read-only) and this
# machine's CUDA headers at /usr/local/cuda when it has them.
read -r -d '' inner_script <<'INNER' || true
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
export CMAKE_GENERATOR=Ninja  # the root has ninja, not make (also for check_cuda_compile.sh)
status=0
cd /src
version=$(dpkg-query -W -f='${Version}' libtorch-dev)
echo "== LibTorch $version ($(. /etc/os-release; echo "$PRETTY_NAME"), $(g++ --version | head -1))"
cmake -S . -B /tmp/build >/tmp/configure.log 2>&1 || { cat /tmp/configure.log; exit 1; }
grep "ckptlab:" /tmp/configure.log
# -k 0: every file that fails is reported, not only the first.
cmake --build /tmp/build -- -k 0 || status=1
if [[ -x /tmp/build/spec_test ]]; then
  ctest --test-dir /tmp/build --output-on-failure -j "$(nproc)" || status=1
fi
# The CUDA-only code against the CUDA headers of this very LibTorch version: those of the CUDA
# build (libtorch-cuda-dev of contrib, generated headers included) where the suite has it for
# this upstream version (it may carry a binNMU suffix, +b1), else the c10/cuda of libtorch-dev.
if [[ ! -f /usr/local/cuda/include/cuda_runtime_api.h ]]; then
  echo "cuda-headers: none (no CUDA toolkit headers at /usr/local/cuda): not compiled"
else
  apt-get update -qq $CKPT_APT_OPTIONS
  cuda_dev=$(apt-cache madison libtorch-cuda-dev 2>/dev/null | awk '{print $3}' |
    while read -r v; do [[ "${v%+b*}" == "${version%+b*}" ]] && echo "$v"; done | head -1)
  rm -rf /opt/libtorch-cuda /tmp/libtorch-cuda-dev_*.deb
  if [[ -n "$cuda_dev" ]] && (cd /tmp && apt-get download -qq "libtorch-cuda-dev=$cuda_dev"); then
    dpkg-deb -x /tmp/libtorch-cuda-dev_*.deb /opt/libtorch-cuda
    echo "cuda-headers: libtorch-cuda-dev $cuda_dev"
    TORCH_INCLUDE=/opt/libtorch-cuda/usr/include tools/check_cuda_compile.sh || status=1
  elif [[ -f /usr/include/c10/cuda/CUDACachingAllocator.h ]]; then
    echo "cuda-headers: libtorch-dev $version (no libtorch-cuda-dev for it)"
    tools/check_cuda_compile.sh || status=1
  else
    echo "cuda-headers: none (no libtorch-cuda-dev $version, no c10/cuda): not compiled"
  fi
fi
exit "$status"
INNER

# Makes (or, kept from a run before, upgrades) the root of a suite. Its log goes to $3.
make_root() {
  local suite=$1 root=$2 log=$3
  if [[ -x "$root/usr/bin/cmake" && -d "$root/usr/include/torch/csrc/api/include/torch" ]]; then
    say "upgrading the kept root $root"
    chroot "$root" bash -c 'apt-get update -qq $CKPT_APT_OPTIONS &&
      DEBIAN_FRONTEND=noninteractive apt-get -y -qq dist-upgrade' >"$log" 2>&1
  else
    rm -rf "$root"
    say "making a $suite root in $root (debootstrap, about 3 minutes)"
    debootstrap --variant=minbase --components=main,contrib --include="$packages" \
      "$suite" "$root" "$mirror" >"$log" 2>&1
  fi
}

results=()
failed=0
ran=0
for suite in "${suites[@]}"; do
  root="$roots/ckptlab-root-$suite"
  log="$roots/ckptlab-root-$suite.log"
  started=$SECONDS
  if ! make_root "$suite" "$root" "$log"; then
    say "skipped $suite: its root could not be made (last lines of $log):" >&2
    tail -5 "$log" >&2
    results+=("$suite: skipped, no root")
    continue
  fi
  ran=$((ran + 1))
  mkdir -p "$root/src" "$root/usr/local/cuda"
  cuda_mount=""
  if [[ -f "$cuda_home/include/cuda_runtime_api.h" ]]; then
    cuda_mount=$(readlink -f "$cuda_home")
  fi
  say "building and testing in $suite"
  set +e
  # The mounts live in a private namespace: they end with it, also when this is interrupted.
  unshare -m --propagation private bash -c '
    set -e
    root=$1 repo=$2 cuda=$3
    mount --bind "$repo" "$root/src"
    mount -o remount,bind,ro "$root/src"
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    [[ -z "$cuda" ]] || mount -o bind,ro "$cuda" "$root/usr/local/cuda"
    exec chroot "$root" /bin/bash -c "$4"' _ "$root" "$repo" "$cuda_mount" "$inner_script" \
    2>&1 | tee "$roots/ckptlab-check-$suite.log"
  rc=${PIPESTATUS[0]}
  set -e
  version=$(sed -n 's/^== LibTorch \([^ ]*\) .*/\1/p' "$roots/ckptlab-check-$suite.log")
  version=${version:-?}  # the run died before it said
  summary=$(grep -oE '[0-9]+ tests? failed out of [0-9]+' "$roots/ckptlab-check-$suite.log" |
    tail -1)
  if ((rc == 0)); then
    cuda=$(sed -n 's/^cuda-headers: //p' "$roots/ckptlab-check-$suite.log" | tail -1)
    line="$suite: LibTorch $version: built; ctest: ${summary:-no summary};"
    results+=("$line CUDA-only code against $cuda ($((SECONDS - started)) s)")
  else
    failed=$((failed + 1))
    line="$suite: LibTorch $version: FAILED (exit $rc; ctest: ${summary:-no summary});"
    results+=("$line the whole output is in $roots/ckptlab-check-$suite.log")
  fi
  [[ "${CKPT_KEEP_ROOTS:-0}" == 1 ]] || rm -rf "$root"
done

for line in "${results[@]}"; do say "$line"; done
if ((failed)); then exit 1; fi
if ((ran == 0)); then
  say "skipped: no suite's root could be made"
  exit 2
fi
