#!/usr/bin/env bash
# Running the documented commands leaves the checkout clean. Each program runs, with tiny sizes
# and its default output place, from a fresh empty working directory: afterwards that directory
# holds its output directory and nothing else (or nothing at all for the programs that write no
# file), nothing else in the scratch area has changed, and the source tree's `git status` is what
# it was. The source tree also tracks no file that .gitignore ignores, that is, no generated file.
# Without git, or when the source is not a git checkout (a tarball), the git checks are skipped.
# Usage: clean_checkout_test.sh SOURCE_ROOT MINIGPT SEQ2SEQ EXPERIMENTS ATTENTION_GRAPH \
#          FIRST_GRADIENTS ATTENTION_BY_HAND HELLO FIRST_TRANSFORMER MINIMAL_ATTENTION SECOND_ORDER
set -euo pipefail
# The programs run from other directories: make their paths absolute.
absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
src=$1 minigpt=$(absolute "$2") seq2seq=$(absolute "$3") experiments=$(absolute "$4")
attention_graph=$(absolute "$5") first_gradients=$(absolute "$6") attention_by_hand=$(absolute "$7") hello=$(absolute "$8")
first_transformer=$(absolute "$9") minimal_attention=$(absolute "${10}") second_order=$(absolute "${11}")
scratch=$(mktemp -d) logs=$(mktemp -d)
trap 'rm -rf "$scratch" "$logs"' EXIT

in_git=0
if command -v git > /dev/null && git -C "$src" rev-parse --show-toplevel > /dev/null 2>&1 &&
  [ "$(git -C "$src" rev-parse --show-toplevel)" = "$(cd "$src" && pwd -P)" ]; then
  in_git=1
fi
# Ignored entries too (--ignored): a program writing seq2seq-out/ into the source tree must show.
# Directories are listed collapsed, so the build tree's own changes do not.
source_status() { if [ $in_git = 1 ]; then git -C "$src" status --porcelain --ignored; fi; }
source_before=$(source_status)
if [ $in_git = 1 ]; then
  tracked_ignored=$(git -C "$src" ls-files -i -c --exclude-standard)
  [ -z "$tracked_ignored" ] || { echo "generated files are tracked although ignored:"; echo "$tracked_ignored"; exit 1; }
fi

for i in $(seq 1 60); do printf 'the cat sat on the mat, and the dog sat on the log.\n'; done > "$scratch/corpus.txt"
# Everything in the scratch area but the working directory `$1`: size, type and path.
others() { find "$scratch" -mindepth 1 -path "$1" -prune -o -printf '%y %s %p\n' | sort; }

runs=0
# run EXPECTED COMMAND...: EXPECTED is the one entry the working directory may hold afterwards, a
# non-empty directory ("-" when the program writes no file).
run() {
  local expected=$1
  shift
  runs=$((runs + 1))
  local work="$scratch/work$runs"
  mkdir "$work"
  local before
  before=$(others "$work")
  (cd "$work" && "$@") > "$logs/log" 2>&1 || { echo "failed: $*"; cat "$logs/log"; exit 1; }
  local found
  found=$(ls -A "$work")
  if [ "$expected" = - ]; then
    [ -z "$found" ] || { echo "$*: wrote into its working directory although it writes no file: $found"; exit 1; }
  else
    [ "$found" = "$expected" ] || { echo "$*: the working directory holds '$found', expected only $expected/"; exit 1; }
    [ -d "$work/$expected" ] && [ -n "$(ls -A "$work/$expected")" ] ||
      { echo "$*: $expected is not a directory with files in it"; exit 1; }
  fi
  [ "$(others "$work")" = "$before" ] || { echo "$*: wrote outside its working directory"; exit 1; }
  [ "$(source_status)" = "$source_before" ] || {
    echo "$*: changed the source tree:"
    diff <(echo "$source_before") <(source_status) || true
    exit 1
  }
}

tiny=(--corpus "$scratch/corpus.txt" --warmup 2 --eval-interval 2 --eval-batches 1 --batch 2 --block 16 --layers 1
  --heads 2 --embd 8 --sample-tokens 5)
run minigpt-out "$minigpt" train "${tiny[@]}" --steps 4
trained="$scratch/work$runs/minigpt-out"
# --resume continues in the run's own directory, so it runs there: only minigpt-out may change.
(cd "$scratch/work$runs" && "$minigpt" train "${tiny[@]}" --steps 6 --resume) > "$logs/log" 2>&1 ||
  { echo "failed: minigpt train --resume"; cat "$logs/log"; exit 1; }
[ "$(ls -A "$scratch/work$runs")" = minigpt-out ] || { echo "minigpt train --resume wrote beside minigpt-out"; exit 1; }
ckpt="$trained/minigpt.safetensors"
run - "$minigpt" sample --checkpoint "$ckpt" --prompt "the " --tokens 5
run - "$minigpt" eval --checkpoint "$ckpt" --file "$scratch/corpus.txt"
run - "$minigpt" eval --checkpoint "$ckpt" --text "the cat sat on the mat, and the dog" --dtype f64
run minigpt-out "$minigpt" explore --checkpoint "$ckpt" --prompt "the cat sat on the mat"
[ -f "$scratch/work$runs/minigpt-out/attention.html" ] || { echo "explore did not write minigpt-out/attention.html"; exit 1; }

run seq2seq-out "$seq2seq" --min-len 3 --max-len 4 --steps 3 --batch 4 --d-model 8 --heads 2 --layers 1 --held-out 5
for command in scaling baselines; do  # the experiments that draw
  run experiments-out "$experiments" "$command" --steps 2 --batch 2 --corpus-chars 30000
done
run experiments-out "$experiments" shapes --steps 2 --batch 2
run experiments-out "$experiments" bottleneck --steps 2 --batch 2
run experiments-out "$experiments" long-range --steps 2 --batch 2 --distances 2
run attention-graph-out "$attention_graph" --tokens 3
run - "$first_gradients"
run - "$attention_by_hand"
run - "$hello"
run - "$first_transformer"
run - "$minimal_attention"
run - "$second_order"
echo "clean checkout: $runs commands, each writing only into its own output directory$([ $in_git = 1 ] &&
  echo ', git status unchanged')"
