#!/usr/bin/env bash
# The floors of core/ include only what their BUILD files say they may depend on:
#   core/base   Abseil and the C++ library: no LibTorch, no other floor;
#   core/plan   core/base: no LibTorch (planning builds and runs without it);
#   core/run    core/plan, core/base, LibTorch: never core/train or core/dist;
#   core/train  core/run and below: never core/dist;
# experiments/records includes nothing else of experiments/, experiments/output only the
# records; python/native (the Python package's C ABI) nothing of LibTorch; and no strategy
# plugin includes another.
# Bazel's visibility already refuses such a dependency between targets; this catches the
# include that needs no target (LibTorch's headers sit on the system include path).
# And a name that a source of core/, experiments/ or python/native keeps to itself (in an
# anonymous namespace, or static) is defined at namespace scope by no other of those sources:
# CMake compiles them in unity batches (CMakeLists.txt), where two such functions would clash
# or, as overloads, call each other's without a word from the compiler. Under Bazel the sources
# are in the runfiles; under CMake's ctest, $CKPT_SOURCE_ROOT names the checkout.
set -uo pipefail
root="${CKPT_SOURCE_ROOT:-$TEST_SRCDIR/ckptlab}"
failures=0
# Fails for each #include in the folder $1 that matches the extended regex $2 (what it names).
refuse() {
  local floor=$1 pattern=$2 what=$3 hits
  [[ -d "$root/$floor" ]] || {
    echo "FAIL: no folder $root/$floor" >&2
    failures=$((failures + 1))
    return
  }
  hits=$(grep -nHE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" \
    "$root/$floor"/*.h "$root/$floor"/*.cc 2>/dev/null)
  if [[ -n "$hits" ]]; then
    echo "FAIL: $floor includes $what:" >&2
    echo "${hits//$root\//}" >&2
    failures=$((failures + 1))
  fi
}
libtorch='ATen/|c10/|torch/|caffe2/'
refuse core/base "$libtorch|core/(plan|run|train|dist)/" "LibTorch or a floor above it"
refuse core/plan "$libtorch|core/(run|train|dist)/" "LibTorch or a floor above it"
refuse core/run "core/(train|dist)/" "a floor above it"
refuse core/train "core/dist/" "core/dist"
# python/native: a library any Python process loads beside its own torch, so none of LibTorch.
refuse python/native "$libtorch|core/(run|train|dist)/|experiments/|models/" \
  "LibTorch or what needs it"
# experiments/: the records below what a run writes, both below the sweep's own files.
refuse experiments/records "experiments/([a-z_]+\.h|output/)" "the rest of experiments/"
refuse experiments/output "experiments/[a-z_]+\.h" "the sweep's own files"
# A strategy plugin (strategies/<id>.cc) includes the libraries plugins share, never another
# plugin; only plan_file.cc, the `plan` plugin, includes its own header.
hits=$(grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"strategies/' "$root"/strategies/*.cc |
  grep -vE '"strategies/(plan_builders|chain_solver)\.h"' |
  grep -vE '^[^:]*/(plan_file|plan_builders|chain_solver)\.cc:')
if [[ -n "$hits" ]]; then
  echo "FAIL: a strategy plugin includes another's file:" >&2
  echo "${hits//$root\//}" >&2
  failures=$((failures + 1))
fi
# Prints "name file internal|public" for each function or variable a library source of core/
# or experiments/ (programs apart) defines at namespace scope; clang-format leaves those lines
# unindented, and an anonymous namespace's end is its "}  // namespace" line.
namespace_scope_names() {
  local f
  for f in "$root"/core/*/*.cc "$root"/experiments/*.cc "$root"/experiments/*/*.cc \
    "$root"/python/native/*.cc; do
    [[ $f == *_main.cc ]] && continue
    awk -v file="${f#"$root"/}" '
      /^namespace \{/ { anonymous = 1; next }
      /^\}  \/\/ namespace$/ { anonymous = 0; next }
      /^[A-Za-z]/ && !/^(namespace|using|class|struct|enum|union|template|typedef)( |$)/ {
        line = $0
        sub(/ *(=|\{|\[).*$/, "", line)  # an initializer, a body, an array bound
        if (match(line, /[A-Za-z_][A-Za-z0-9_:]*\(/)) name = substr(line, RSTART, RLENGTH - 1)
        else { n = split(line, word, /[ *&]+/); name = word[n] }
        if (name == "" || name ~ /::/) next  # a member defined out of its class
        print name, file, (anonymous || /^static /) ? "internal" : "public"
      }' "$f"
  done
}
names=$(namespace_scope_names)
(($(wc -l <<<"$names") > 100)) || {
  echo "FAIL: found only $(wc -l <<<"$names") namespace-scope names in core/ and experiments/" >&2
  failures=$((failures + 1))
}
shared=$(awk '
  !seen[$1, $2]++ { files[$1] = files[$1] " " $2; count[$1]++ }
  $3 == "internal" { own[$1] = 1 }
  END { for (name in count) if (count[name] > 1 && own[name]) print name ":" files[name] }
' <<<"$names")
if [[ -n "$shared" ]]; then
  echo "FAIL: names kept to one source are defined in another (rename one):" >&2
  echo "$shared" >&2
  failures=$((failures + 1))
fi
# Each floor has sources (a glob that matched nothing would pass everything above).
for floor in base plan run train dist; do
  n=$(find "$root/core/$floor" -maxdepth 1 \( -name '*.h' -o -name '*.cc' \) | wc -l)
  ((n > 0)) || {
    echo "FAIL: core/$floor has no sources here" >&2
    failures=$((failures + 1))
  }
done
((failures == 0)) && echo "the floors of core include only what lies below them;" \
  "names kept to one source are unique among the unity-built ones"
exit $((failures > 0))
