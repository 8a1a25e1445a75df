#!/usr/bin/env bash
# Builds third_party/cmake_bundle/: the C++ dependencies of the CMake build (Abseil,
# GoogleTest/GoogleMock, RapidCheck, Google Benchmark) copied from this machine's Debian
# packages, headers, libraries and CMake package files, in /usr's layout. The CMake configs
# Debian ships are relocatable, so `cmake -DCMAKE_PREFIX_PATH=<bundle>` finds them wherever the
# bundle lands: on a GPU host that has LibTorch but none of these libraries and no network.
#
#   tools/make_cmake_bundle.sh            # -> third_party/cmake_bundle (ignored by git)
#   tools/make_cmake_bundle.sh /some/dir
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-third_party/cmake_bundle}"
packages=(libabsl-dev libabsl20220623 libgtest-dev libgmock-dev librapidcheck-dev
          libbenchmark-dev libbenchmark1debian)

# Installs the Debian packages if missing; --version is answered by the client, which leaves no
# Bazel server behind (`version` started one, idle for hours after CI).
tools/bazel --version >/dev/null 2>&1 || true
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | grep -q '^ii' || {
    echo "make_cmake_bundle: Debian package $pkg is not installed" >&2
    exit 1
  }
done

rm -rf "$out.tmp"
mkdir -p "$out.tmp"
# Every file of the packages under /usr/include and /usr/lib, symlinks kept as symlinks.
dpkg -L "${packages[@]}" | grep -E '^/usr/(include|lib)/' | while read -r path; do
  if [[ -f "$path" || -L "$path" ]]; then
    mkdir -p "$out.tmp/$(dirname "${path#/usr/}")"
    cp -P "$path" "$out.tmp/${path#/usr/}"
  fi
done
rm -rf "$out"
mv "$out.tmp" "$out"
printf 'Built from Debian packages on %s:\n' "$(date -u +%Y-%m-%d)" >"$out/PACKAGES"
dpkg-query -W -f='  ${Package} ${Version}\n' "${packages[@]}" >>"$out/PACKAGES"
# What a host needs to link and load these libraries, read off them: the newest versioned
# libstdc++ and glibc symbols the shared ones use (the static ones, built by the same GCC, need
# no more). tools/gpu/run.sh checks the host against it before it spends minutes compiling.
newest() { grep -ohE "$1_[0-9.]+" | sort -uV | tail -1; }
shared=$(find "$out/lib" -name '*.so.*' -type f)
{
  echo "glibcxx=$(objdump -T $shared | newest GLIBCXX)"
  echo "glibc=$(objdump -T $shared | newest GLIBC)"
} >"$out/REQUIRES"
echo "make_cmake_bundle: $(du -sh "$out" | cut -f1) in $out ($(find "$out" -type f | wc -l) files)"
