#!/usr/bin/env bash
# When the system refuses worker threads, the pool must start with those it got and say so: not
# hang (the old pool waited for ever on workers it had already destroyed) and not crash.
# Threads are refused by a process limit (ulimit -u), which binds only users other than root: as
# root, the program runs as `nobody`, from a copy readable by that user.
set -euo pipefail
prog=$1 lib=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out err=$work/err
run=("$prog")
if [ "$(id -u)" -eq 0 ]; then
  command -v setpriv >/dev/null || { echo "SKIP: needs setpriv to run as another user"; exit 77; }
  mkdir "$work/tests" && cp "$prog" "$work/tests/" && cp "$lib" "$work/"  # the program finds the library at ../
  chmod -R a+rX "$work"
  run=(setpriv --reuid=nobody --regid=nogroup --clear-groups "$work/tests/$(basename "$prog")")
fi
# LeakSanitizer checks at exit from a thread of its own, which this limit refuses once the pool
# has taken every thread it could; leaks are checked by the rest of the suite.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0"
status=0
(ulimit -u 16 && AG_NUM_THREADS=64 timeout 60 "${run[@]}" >"$out" 2>"$err") || status=$?
if [ "$status" -eq 124 ]; then
  echo "FAIL: the program hung when threads were refused"; cat "$err"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "FAIL: exit status $status"; cat "$out" "$err"
  exit 1
fi
threads=$(sed -n 's/^threads //p' "$out")
if [ -z "$threads" ] || [ "$threads" -ge 64 ] || [ "$threads" -lt 1 ]; then
  echo "FAIL: expected fewer than 64 threads, got '$threads'"; cat "$out" "$err"
  exit 1
fi
grep -q "could start only $threads of the 64 threads asked for" "$err" || {
  echo "FAIL: no warning on stderr"; cat "$err"
  exit 1
}
echo "ok: 64 threads asked for under ulimit -u 16; the pool started with $threads and said so"
