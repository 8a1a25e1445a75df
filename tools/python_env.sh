#!/usr/bin/env bash
# Makes DIR the virtual environment of PyPI's torch, transformers and torchaudio that ckptlab's
# second route is tested on (docs/build.md), or finds it ready:
#
#   tools/python_env.sh DIR          # then DIR/bin/python
#
# Every package is pinned in tools/requirements-pypi.txt with the sha256 of its files, installed
# with --require-hashes --no-deps (nothing resolved, nothing else fetched), and `pip check` must
# then find every package's requirements met. DIR is made anew when it holds an environment this
# script made from other requirements (its marker file names their digest); it is ready, in a
# second, when the digest is the same. A DIR that exists and is not
# such an environment is refused, and nothing in it touched. The interpreter is $PYTHON, else
# the first python3 on PATH that has pip and venv (Debian's own refuses pip: python3-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "tools/python_env.sh: $*" >&2
  exit 2
}
(($# == 1)) || die "usage: tools/python_env.sh DIR (the environment's folder)"
dir=$1
requirements=tools/requirements-pypi.txt
marker_name=.ckptlab-requirements
digest=$(sha256sum "$requirements" | cut -c1-64)
python=${PYTHON:-python3}

if [[ -L "$dir" ]]; then
  die "$dir is a link; accepted: a folder this script makes or made"
fi
if [[ -e "$dir" ]]; then
  [[ -f "$dir/$marker_name" && ! -L "$dir/$marker_name" ]] ||
    die "$dir exists and is no environment this script made (no $marker_name); accepted: a new folder"
  if [[ "$(cat "$dir/$marker_name")" == "$digest" && -x "$dir/bin/python" ]]; then
    echo "tools/python_env.sh: $dir is ready ($("$dir/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
    exit 0
  fi
  echo "tools/python_env.sh: $dir was made from other requirements: made anew" >&2
  rm -rf -- "$dir"
fi
"$python" -m venv "$dir" || die "$python -m venv $dir failed (above)"
echo "made by tools/python_env.sh; the requirements' digest follows when they are installed" >"$dir/$marker_name"
start=$SECONDS
"$dir/bin/python" -m pip install --quiet --no-deps --require-hashes --only-binary=:all: \
  -r "$requirements" || die "pip could not install $requirements into $dir (above)"
"$dir/bin/python" -m pip check --disable-pip-version-check ||
  die "$requirements leaves the requirements above unmet: pin them there"
echo "$digest" >"$dir/$marker_name"
echo "tools/python_env.sh: $dir made in $((SECONDS - start)) s" \
  "($("$dir/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
