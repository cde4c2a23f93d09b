#!/usr/bin/env bash
# scripts/tour walks the chapter in Chinese: every section from 1 to 11 and the notes' self-test,
# in order, each with what it shows and what it does not; the programs it runs print Chinese
# labels (no English label of theirs is left); everything it writes is in its output folder; a
# bad command line is refused with status 2. Run with --quick (each experiment a few steps: the
# structure is checked, not the figures). Skipped (77) without the Chinese corpus it trains on.
# Usage: tour_test.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
root=$1
build=$2
[ -f /usr/share/games/fortunes/tang300 ] || { echo "no fortunes-zh corpus: the tour's section 5 cannot train"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
cd "$dir"
code=0
ATTOGRAD_BUILD_DIR=$build "$root/scripts/tour" --steps 30 --quick > out.txt 2>&1 || code=$?
[ "$code" = 0 ] || { tail -30 out.txt; fail "the tour exited with status $code"; }

# The sections, in the chapter's order.
order=$(grep -o '^════ \(第 [0-9]* 节\|笔记的自测题\)' out.txt | sed 's/^════ //' | tr '\n' ',')
[ "$order" = "第 1 节,第 2 节,第 3 节,第 4 节,第 5 节,第 6 节,第 7 节,第 8 节,第 9 节,第 10 节,笔记的自测题,第 11 节," ] ||
  fail "sections in the order '$order'"
[ "$(grep -c '^说明了什么：' out.txt)" = 12 ] || fail "not every section says what it shows"
[ "$(grep -c '^没有说明什么：' out.txt)" = 12 ] || fail "not every section says what it does not show"
# The programs' own labels, in Chinese: none of their English labels is printed.
for english in 'check:' 'the text gives' 'Training a 1 + 1' 'Part 1:' 'weights, masked' 'trained with causal mask' \
  'sample,' 'Q1\.' '^text:' 'the trained head' 'causal self-attention' 'Against ag::' 'failed$' 'rows of P sum'; do
  if grep -q -- "$english" out.txt; then fail "English label left: $(grep -m1 -- "$english" out.txt)"; fi
done
grep -q '^题 2\. d_k = 8' out.txt || fail "no self-test answers"
grep -q '^P = 每行做 softmax' out.txt || fail "no trace"
grep -q '^0 项核对不一致$' out.txt || fail "attention_by_hand or minimal_attention reported a failed check"
# Written: only tour-out/ (and this test's own out.txt).
[ "$(ls -A | sort | tr '\n' ' ')" = "out.txt tour-out " ] || fail "wrote outside tour-out: $(ls -A)"

# Bad command lines.
for words in "12" "0" "--steps 0" "--steps" "--steps 1x" "all" "--lang en"; do
  code=0
  # shellcheck disable=SC2086
  ATTOGRAD_BUILD_DIR=$build "$root/scripts/tour" $words > bad.txt 2>&1 || code=$?
  [ "$code" = 2 ] || fail "'$words': status $code, expected 2"
  grep -q '^tour: ' bad.txt || fail "'$words' refused without a reason"
done
echo "tour: 12 sections in order, each with what it shows and does not, Chinese labels only, 7 refusals"
