#!/usr/bin/env bash
# What the sweep's end-to-end tests share (testing/sweep_cli_test.sh and
# testing/sweep_hostile_test.sh): the binary, a private scratch folder, failures counted, the wait
# for rows, a run under a file size limit and the bad-input check. Under Bazel the binary is in
# the runfiles and $TEST_TMPDIR is private to the test; under CMake's ctest, $SWEEP names the
# binary. Sourced, not run.
set -euo pipefail
# On the CPU wherever it runs (a GPU host's ctest too): the checks below are the CPU's bytes.
sweep=("${SWEEP:-$TEST_SRCDIR/ckptlab/experiments/sweep}" --device=cpu)
# The sweep with the flags given, on the CPU where the mode uses a device: --list and
# --report_only run nothing on one and refuse --device like every flag they do not use.
run_sweep() {
  case " $* " in
    *" --list "* | *" --report_only "*) "${sweep[0]}" "$@" ;;
    *) "${sweep[@]}" "$@" ;;
  esac
}
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Sets torch_python to a Python that imports torch (python3 first on PATH may be another
# interpreter), or to "".
find_torch_python() {
  torch_python=""
  local p
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' >/dev/null 2>&1; then
      torch_python=$p
      return
    fi
  done
}

# Waits until the results.csv $1 holds $2 rows, or a minute has passed.
wait_rows() {
  for _ in $(seq 1 600); do
    [[ -f "$1" && $(wc -l <"$1") -gt $2 ]] && break
    sleep 0.1
  done
}

# The sweep with the flags $2... under a file size limit of $1 KiB, which stands in for a full
# disk (the same failed write(2)); its stdout and stderr go to $tmp/limit.out through a pipe,
# which the limit does not cover, and its exit status to $limit_rc.
under_limit() {
  set +e
  (
    trap '' XFSZ
    ulimit -f "$1"
    shift
    "${sweep[@]}" "$@" 2>&1
  ) | cat >"$tmp/limit.out"
  limit_rc=${PIPESTATUS[0]}
  set -e
}

# Bad input: exit status 2, a one-line message naming the value, nothing written.
check_bad() {
  local expect="$1"
  shift
  local out="$tmp/bad"
  rm -rf "$out"
  set +e
  run_sweep "$@" --out="$out" >/dev/null 2>"$tmp/bad.stderr"
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$*: exit $rc, expected 2"
  grep -q -- "$expect" "$tmp/bad.stderr" || fail "$*: stderr lacks '$expect': $(cat "$tmp/bad.stderr")"
  [[ $(wc -l <"$tmp/bad.stderr") -eq 1 ]] || fail "$*: more than one line: $(cat "$tmp/bad.stderr")"
  # No control character but the line's end, C1 (UTF-8 0xc2 0x80..0x9f) included.
  if LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]\|\xc2[\x80-\x9f]' "$tmp/bad.stderr"; then
    fail "$*: a control character reached stderr: $(od -c "$tmp/bad.stderr" | head -3)"
  fi
  [[ ! -e "$out" ]] || fail "$*: wrote $out"
}

# The verdict: exit 1 naming the count of failed checks, else a line naming the test $1.
finish() {
  if ((failures)); then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "$1: all checks passed"
}
