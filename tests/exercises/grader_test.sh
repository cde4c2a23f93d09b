#!/usr/bin/env bash
# The workbook's grader, tested three ways (exercises/README.md):
#   1. every reference solution passes every check (status 0), in both languages;
#   2. every untouched stub is reported as not attempted, with its file named: status 3, no
#      crash, and nothing reported as failed;
#   3. every deliberately wrong answer (exercises/wrong/) fails, at the check its comment names;
# and the command line refuses what it does not know with status 2.
# Usage: grader_test.sh WORKBOOK WORKBOOK_SOLUTIONS WORKBOOK_WRONG
set -euo pipefail
yours=$1
solutions=$2
wrong=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() {
  echo "FAIL: $*"
  cat "$out"
  exit 1
}
# run EXPECTED_STATUS PROGRAM ARGS...: the output in $out.
run() {
  local expected=$1 code=0
  shift
  "$@" > "$out" 2>&1 || code=$?
  [ "$code" -eq "$expected" ] || fail "$(basename "$1") ${*:2}: status $code, expected $expected"
}

count=$("$solutions" --list | grep -c '^ *[0-9][0-9]*  ')
[ "$count" -ge 5 ] || fail "--list shows $count exercises"

# 1. The solutions.
for lang in en zh; do
  run 0 "$solutions" all --lang "$lang"
  [ "$(grep -c 'FAIL\|失败' "$out")" -eq 0 ] || fail "a solution failed a check ($lang)"
done
grep -q "^  *1  passed  " <(run 0 "$solutions" all; cat "$out") || fail "no progress table"
echo "solutions: all $count exercises pass, in English and in Chinese"

# 2. The stubs.
for n in $(seq 1 "$count"); do
  run 3 "$yours" "$n"
  grep -q "not attempted: .* is not written yet (its stub still throws NotWritten); edit exercises/yours/$(printf %02d "$n")_" "$out" ||
    fail "stub $n was not reported as not attempted"
  run 3 "$yours" "$n" --lang zh
  grep -q "未作答" "$out" || fail "stub $n: no Chinese not-attempted line"
done
run 3 "$yours" all
[ "$(grep -c 'not attempted  ' "$out")" -eq "$count" ] || fail "the progress table does not list every stub as not attempted"
echo "stubs: all $count reported as not attempted (status 3)"

# 3. The wrong answers: each caught by the check its own comment names.
for file in $(dirname "$0")/../../exercises/wrong/*.cpp; do
  n=$((10#$(basename "$file" | cut -c1-2)))
  # The header comment, its lines joined: "Caught by N.check" may be cut by a line break.
  expected=$(sed -n '/^\/\//p' "$file" | sed 's|^// *||' | tr '\n' ' ' | grep -o 'Caught by [0-9]*\.[a-z0-9-]*' |
    head -1 | cut -d' ' -f3 || true)
  [ -n "$expected" ] || fail "$(basename "$file") names no check that catches it"
  run 1 "$wrong" "$n"
  grep -q "^  FAIL  .* \[$expected\]$" "$out" || fail "wrong answer $n was not caught by $expected"
  grep -q "^        hint: " "$out" || fail "wrong answer $n: no hint"
done
echo "wrong answers: each caught by the check it names"

# The command line.
for words in "" "0" "99" "2x" "1 2" "1 --lang fr" "1 --lang" "--list 1" "1 --colour"; do
  # shellcheck disable=SC2086
  run 2 "$solutions" $words
  grep -q "^workbook: " "$out" || fail "'$words' refused without saying why"
done
echo "bad command lines refused with status 2"
