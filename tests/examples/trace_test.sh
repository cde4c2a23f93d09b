#!/usr/bin/env bash
# minigpt trace prints one head's computation in the chapter's order for a trained model and a
# fresh one. Checked here against what the chapter says each step must be, read from the
# printed numbers (not from the program's own summary): the twelve steps in order with their
# shapes; the masked scores −inf exactly above the diagonal and equal to S/√d_k elsewhere;
# each row of P summing to 1 and 0 after its own character; S/√d_k equal to S divided by the
# printed √d_k; and the program's check of P against the model's own attention op. Then the
# Chinese labels on a Chinese text, and bad input refused with status 2, naming the option.
# Usage: trace_test.sh MINIGPT
set -euo pipefail
minigpt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
for i in $(seq 1 40); do printf 'the cat sat on the mat. 猫坐在垫子上。\n'; done > "$dir/corpus.txt"
"$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/run" --steps 20 --eval-interval 20 --eval-batches 1 \
  --batch 4 --block 16 --layers 2 --heads 3 --embd 12 --sample-tokens 5 > "$dir/train.log"
model="$dir/run/minigpt.safetensors"

"$minigpt" trace --checkpoint "$model" --text "the cat sat" --layer 1 --head 2 > "$dir/en.txt" ||
  fail "trace exited with status $?"
# The steps in the chapter's order, twice (trained, fresh), with their shapes: T = 11, D = 12, d_k = 4.
expected='X:[11, 12] W_Q:[12, 4] W_K:[12, 4] W_V:[12, 4] Q:[11, 4] K:[11, 4] V:[11, 4] S:[11, 11] S/:[11, 11] masked:[11, 11] P:[11, 11] O:[11, 4]'
got=$(awk '/^(X|W_Q|W_K|W_V|Q|K|V|S|masked|P|O)[ :=]|^S \/ / {
    name = $1; sub(/:$/, "", name); if ($0 ~ /^S \//) name = "S/"
    if (match($0, /\[[0-9, ]*\]$/)) printf "%s:%s ", name, substr($0, RSTART, RLENGTH) }' "$dir/en.txt")
[ "$got" = "$expected $expected " ] || fail "steps and shapes: got '$got'"
grep -q "^==== the trained head" "$dir/en.txt" || fail "no trained head"
grep -q "^==== a fresh head of the same shape (--seed 1)" "$dir/en.txt" || fail "no fresh head"

# One printed [T, T] block by its title's first word: the rows, without the label and the header.
block() { awk -v t="$1" 'index($0, t) == 1 { on = 1; getline; next } on && NF == 0 { exit } on' "$2"; }
for which in 1 2; do
  # The first (trained) or second (fresh) occurrence of each block.
  nth() { awk -v n="$which" -v t="$1" 'index($0, t) == 1 { k++ } k == n' "$dir/en.txt" > "$dir/part"; block "$1" "$dir/part"; }
  scaled=$(nth "S / √d_k")
  masked=$(nth "masked:")
  weights=$(nth "P = ")
  root=$(awk -v n="$which" '/^S \/ √d_k \(√d_k = √4 = / { k++; if (k == n) { sub(/.*= /, ""); sub(/\).*/, ""); print } }' "$dir/en.txt")
  [ "$root" = "2.000" ] || fail "√d_k printed as '$root'"
  # masked: −inf exactly where j > i, and S/√d_k's value elsewhere.
  paste -d'|' <(echo "$scaled") <(echo "$masked") | awk -F'|' '{
      split($1, a, " "); split($2, b, " "); i = NR
      for (j = 1; j <= 11; j++) {
        if (j > i && b[j + 1] != "-inf") { print "row " i ", key " j ": " b[j + 1] " where −inf belongs"; bad = 1 }
        if (j <= i && b[j + 1] != a[j + 1]) { print "row " i ", key " j ": masked " b[j + 1] " != scaled " a[j + 1]; bad = 1 }
      } }
      END { if (NR != 11) { print NR " rows"; bad = 1 }; exit bad }' || fail "the masked scores (head $which)"
  # P: every row sums to 1 (to the printed 3 decimals), 0 after its own character, row 0 is 1.
  echo "$weights" | awk '{
      s = 0; for (j = 2; j <= NF; j++) { s += $j; if (j - 1 > NR && $j != "0.000") { print "row " NR " reads a later key: " $j; bad = 1 } }
      if (s < 0.994 || s > 1.006) { print "row " NR " sums to " s; bad = 1 } }
      NR == 1 && $2 != "1.000" { print "the first character does not read itself with weight 1: " $2; bad = 1 }
      END { exit bad }' || fail "the weights (head $which)"
done
# S/√d_k is S divided by 2, entry by entry, to the printed precision.
paste -d'|' <(block "S = Q Kᵀ" "$dir/en.txt") <(block "S / √d_k" "$dir/en.txt") | awk -F'|' '{
    split($1, a, " "); split($2, b, " ")
    for (j = 2; j <= 12; j++) if ((a[j] / 2 - b[j]) > 0.0015 || (b[j] - a[j] / 2) > 0.0015) { print "row " NR ": " a[j] "/2 != " b[j]; bad = 1 } }
    END { exit bad }' || fail "S / √d_k"
[ "$(grep -c '^P against the weights the model.s own attention op computes: max |difference| ' "$dir/en.txt")" = 2 ] ||
  fail "no check against the model's own weights"

# Chinese labels, Chinese text; each character is a row label.
"$minigpt" trace --checkpoint "$model" --text "猫坐在垫子上。" --lang zh > "$dir/zh.txt" || fail "zh trace: status $?"
grep -q "^P = 每行做 softmax" "$dir/zh.txt" || fail "no Chinese label for P"
grep -q "^==== 训练后的头" "$dir/zh.txt" || fail "no Chinese title"
[ "$(grep -c '^ *猫 ' "$dir/zh.txt")" -ge 8 ] || fail "the character 猫 does not label the rows"
if grep -q "the trained head\|rows of P sum" "$dir/zh.txt"; then fail "English left in the Chinese trace"; fi

# Bad input: status 2, the option named.
refused() {
  local message=$1 code=0
  shift
  "$minigpt" trace "$@" > "$dir/out" 2>&1 || code=$?
  [ "$code" = 2 ] || { cat "$dir/out"; fail "'$*': status $code, expected 2"; }
  grep -qF -- "$message" "$dir/out" || { cat "$dir/out"; fail "'$*' refused without '$message'"; }
}
refused "--text" --checkpoint "$model" --text "the dog"
refused "--text is empty" --checkpoint "$model" --text ""
refused "--text has 17 characters" --checkpoint "$model" --text "the cat sat on th"
refused "--layer 2 is out of range" --checkpoint "$model" --text "the" --layer 2
refused "--head -1 is out of range" --checkpoint "$model" --text "the" --head -1
refused "--lang must be en or zh" --checkpoint "$model" --text "the" --lang fr
refused "--show must be from 1 to 64" --checkpoint "$model" --text "the" --show 0
refused "--checkpoint" --checkpoint "$dir/missing.safetensors" --text "the"
refused "training state" --checkpoint "$dir/run/minigpt.train.safetensors" --text "the"
refused "--checkpoint" --checkpoint "$dir/corpus.txt" --text "the"
refused "--text" --checkpoint "$model"
echo "trace: 12 steps with their shapes for both heads, masks and weights as the chapter says, zh labels, 11 refusals"
