#!/usr/bin/env bash
# Durability of `minigpt train`: a run stopped by SIGINT, by SIGTERM or killed outright, then
# resumed with --resume, logs exactly the same loss at every step as a run that never stopped,
# whether the resumed command repeats every option or gives only --corpus, --out and --resume
# (the training state records the rest). One thread, so the arithmetic is the same from run to run.
# Usage: resume_test.sh MINIGPT
set -euo pipefail
minigpt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export AG_NUM_THREADS=1

for i in $(seq 1 60); do printf 'the cat sat on the mat; a dog lay on the log.\n'; done > "$dir/corpus.txt"
steps=400
# Dropout on, so the dropout generators' state has to survive the restart as well.
train=("$minigpt" train --corpus "$dir/corpus.txt" --steps $steps --eval-interval 100 --eval-batches 2
  --checkpoint-interval 30 --batch 8 --block 16 --layers 2 --heads 2 --embd 32 --dropout 0.1 --sample-tokens 10
  --prompt "a dog sat")
"${train[@]}" --out "$dir/straight" > "$dir/straight.log"

lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }

# Starts a run in the background and stops it with `signal` once its log has passed `after`
# steps; checks it stopped before the end.
interrupt() {
  local out=$1 signal=$2 after=$3
  shift 3
  "${train[@]}" --out "$out" "$@" > "$out.log" 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null && [ "$(lines "$out/train_log.csv")" -le "$after" ]; do
    sleep 0.01
  done
  kill "-$signal" $pid 2>/dev/null || true
  local code=0
  wait $pid || code=$?
  local done_steps=$(($(lines "$out/train_log.csv") - 1))
  if [ "$done_steps" -ge $steps ]; then
    echo "the run finished before $signal reached it; make the run longer"
    exit 1
  fi
  echo "$signal after step $done_steps: exit code $code"
  case $signal in
    INT | TERM)
      [ $code -eq 130 ] || { echo "expected exit code 130 after SIG$signal"; cat "$out.log"; exit 1; }
      grep -q "interrupted at step $done_steps: saved" "$out.log" ||
        { echo "no 'interrupted at step $done_steps' line"; cat "$out.log"; exit 1; }
      ;;
    KILL) [ $code -eq 137 ] || { echo "expected exit code 137 after SIGKILL"; exit 1; } ;;
  esac
}

# Ctrl-C, then SIGTERM on the resumed run, then resume to the end.
interrupt "$dir/stopped" INT 60
interrupt "$dir/stopped" TERM 170 --resume
"${train[@]}" --out "$dir/stopped" --resume > "$dir/stopped-final.log"
# Killed outright after a few checkpoints: the resumed run starts from the last one and the log
# loses the steps after it. Resumed with no option but the corpus and the directory: none of the
# defaults it would otherwise take (--steps 1200, --batch 16, --eval-interval 200, ...) applies.
interrupt "$dir/killed" KILL 130
[ -s "$dir/killed/minigpt.train.safetensors" ]
"$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/killed" --resume > "$dir/killed-final.log"
# A checkpoint the kill cut short leaves its temporary file behind; the resumed run removes it.
if ls -A "$dir/killed" | grep -q '\.tmp-'; then echo "a temporary file was left: $(ls -A "$dir/killed")"; exit 1; fi
grep -q "resuming from step [1-9]" "$dir/killed-final.log" || { echo "the killed run did not resume"; exit 1; }
if grep -q "^note:" "$dir/killed-final.log"; then
  echo "a resume that repeats no option was told an option changed:"
  grep "^note:" "$dir/killed-final.log"
  exit 1
fi

for run in stopped killed; do
  if ! cmp -s "$dir/straight/train_log.csv" "$dir/$run/train_log.csv"; then
    echo "the $run run's losses differ from the uninterrupted run's:"
    diff "$dir/straight/train_log.csv" "$dir/$run/train_log.csv" | head -n 10
    exit 1
  fi
  # The attention maps of --prompt and the sample of --sample-tokens, as the run began.
  cmp -s "$dir/straight/attention_layer1_head1.png" "$dir/$run/attention_layer1_head1.png" ||
    { echo "the $run run's attention map differs from the uninterrupted run's"; exit 1; }
done
sample_of() { sed -n '/^sample /,/^final validation loss/p' "$1"; }
[ "$(sample_of "$dir/straight.log")" = "$(sample_of "$dir/killed-final.log")" ] ||
  { echo "the killed run's sample differs from the uninterrupted run's"; exit 1; }
[ "$(wc -l < "$dir/straight/train_log.csv")" -eq $((steps + 1)) ] || { echo "the log does not have $steps steps"; exit 1; }

# A resume that cannot work says why, exits non-zero and leaves the checkpoint as it was: a model
# file in place of the training state, and a training state whose step is not a number.
expect_refusal() {
  local what=$1 message=$2
  local before
  before=$(md5sum < "$dir/straight/minigpt.train.safetensors")
  if "${train[@]}" --out "$dir/straight" --resume > /dev/null 2> "$dir/err"; then
    echo "resume accepted $what"
    exit 1
  fi
  grep -qF "$message" "$dir/err" || { echo "unclear error for $what: $(cat "$dir/err")"; exit 1; }
  [ "$(md5sum < "$dir/straight/minigpt.train.safetensors")" = "$before" ] || { echo "$what was changed"; exit 1; }
}
cp "$dir/straight/minigpt.train.safetensors" "$dir/state.bak"
cp "$dir/straight/minigpt.safetensors" "$dir/straight/minigpt.train.safetensors"
expect_refusal "a model file" 'not a training checkpoint (format "attograd-gpt")'
# damaged OLD NEW: the training state with the header's text OLD replaced by NEW, of the same
# length so that the header stays well-formed.
damaged() {
  /usr/bin/python3 - "$dir/state.bak" "$dir/straight/minigpt.train.safetensors" "$1" "$2" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
old, new = sys.argv[3].encode(), sys.argv[4].encode()
assert old in data and len(old) == len(new), "no " + sys.argv[3] + " in the header"
open(sys.argv[2], "wb").write(data.replace(old, new, 1))
PY
}
damaged '"step":"400"' '"step":"4x0"'
expect_refusal "a bad step" 'step "4x0" is not a non-negative integer'
# A recorded option that is not a value of it, and one out of its range: the file's fault.
damaged '\"batch\":\"8\"' '\"batch\":\"x\"'
expect_refusal "a bad recorded option" 'its --batch x is not a value of it'
damaged '\"batch\":\"8\"' '\"batch\":\"0\"'
expect_refusal "a recorded batch of 0" 'its --batch 0 is out of the option'"'"'s range'
cp "$dir/state.bak" "$dir/straight/minigpt.train.safetensors"
# An option given that differs from the recorded one is this run's, and says so.
cp -r "$dir/straight" "$dir/changed"
"$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/changed" --resume --batch 4 --steps 401 > "$dir/changed.log"
grep -qF "note: --batch 4 differs from the run being resumed, which had 8; this run uses 4" "$dir/changed.log" ||
  { echo "no note for a changed --batch:"; cat "$dir/changed.log"; exit 1; }
# A training state from before the options were recorded: its options entry removed (the header
# rewritten with its new length). The resume says it takes the options given.
rm -rf "$dir/old" && cp -r "$dir/straight" "$dir/old"
/usr/bin/python3 - "$dir/old/minigpt.train.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
del header["__metadata__"]["options"]
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
"${train[@]}" --out "$dir/old" --resume > "$dir/old.log"
grep -qF "minigpt.train.safetensors does not record the training options (an older file); using those given, or their defaults" "$dir/old.log" ||
  { echo "no note for a training state without options:"; cat "$dir/old.log"; exit 1; }
if "$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/other" --checkpoint-interval 0 > /dev/null 2> "$dir/err"; then
  echo "--checkpoint-interval 0 accepted"
  exit 1
fi
grep -q -- "--checkpoint-interval must be positive, got 0" "$dir/err" || { echo "unclear error: $(cat "$dir/err")"; exit 1; }
echo "resume: all $steps losses bit-identical after SIGINT, SIGTERM and SIGKILL; bad states refused"
