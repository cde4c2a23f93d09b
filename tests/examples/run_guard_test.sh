#!/usr/bin/env bash
# A running `minigpt train` guards its directory and its data:
#   - a second run on the same directory is refused, naming it and the first run's pid;
#   - SIGTERM ends it within 2 s with status 130 and a checkpoint of its last complete step, in
#     the middle of a long step, of an evaluation, or of the final sample alike;
#   - a write that fails (here: a file-size limit) stops it with an error naming the file, and
#     the checkpoint left behind resumes;
#   - weights that are no longer finite stop it before the checkpoint that would hold them;
# and seq2seq also ends within 2 s of SIGTERM.
# Usage: run_guard_test.sh MINIGPT SEQ2SEQ
set -euo pipefail
minigpt=$1
seq2seq=$2
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT

for i in $(seq 1 300); do printf 'the cat sat on the mat; a dog lay on the log.\n'; done > "$dir/corpus.txt"
tiny=(--corpus "$dir/corpus.txt" --batch 4 --block 16 --layers 1 --heads 2 --embd 16 --warmup 0)
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }
# wait_for COND: polls COND every 10 ms for up to 60 s.
wait_for() {
  local i
  for i in $(seq 1 6000); do eval "$1" && return 0; sleep 0.01; done
  echo "timed out waiting for: $1"
  exit 1
}
# stop_within_2s PID LOG: SIGTERM to PID, which must exit with 130 within 2 s; sets ms to the time.
stop_within_2s() {
  local pid=$1 log=$2 start end code=0
  start=$(date +%s%N)
  kill -TERM "$pid"
  wait "$pid" || code=$?
  end=$(date +%s%N)
  ms=$(((end - start) / 1000000))
  [ $code -eq 130 ] || { echo "exit status $code after SIGTERM, expected 130"; cat "$log"; exit 1; }
  [ $ms -le 2000 ] || { echo "took $ms ms to stop after SIGTERM"; cat "$log"; exit 1; }
}
# resumes DIR STEP: the training state in DIR is at STEP (a resumed run says so).
resumes() {
  "$minigpt" train "${tiny[@]}" --out "$1" --steps "$2" --eval-interval 1000 --sample-tokens 1 --resume \
    > "$dir/resume.log" 2>&1 || { echo "resume of $1 failed"; cat "$dir/resume.log"; exit 1; }
  grep -q "resuming from step $2 of" "$dir/resume.log" || { echo "$1 is not at step $2"; cat "$dir/resume.log"; exit 1; }
}

# 1. The lock: while one run trains, a second on its directory is refused at once.
"$minigpt" train "${tiny[@]}" --out "$dir/a" --steps 1000000 --eval-interval 1000000 > "$dir/a.log" 2>&1 &
a=$!
pids+=("$a")
wait_for '[ "$(lines "$dir/a/train_log.csv")" -ge 3 ]'
code=0
timeout 20 "$minigpt" train "${tiny[@]}" --out "$dir/a" --steps 10 > /dev/null 2> "$dir/err" || code=$?
[ $code -eq 2 ] || { echo "the second run on one directory: status $code, expected 2"; cat "$dir/err"; exit 1; }
grep -qF "$dir/a is in use by another run (pid $a), which holds $dir/a/minigpt.lock" "$dir/err" ||
  { echo "unclear lock error: $(cat "$dir/err")"; exit 1; }
kill -0 "$a" || { echo "the first run died"; exit 1; }

# 2a. SIGTERM between two short steps.
stop_within_2s "$a" "$dir/a.log"
done_steps=$(($(lines "$dir/a/train_log.csv") - 1))
grep -q "interrupted at step $done_steps: saved" "$dir/a.log" || { echo "no checkpoint message"; cat "$dir/a.log"; exit 1; }
resumes "$dir/a" "$done_steps"
echo "lock: second run refused; SIGTERM between steps: stopped in $ms ms at step $done_steps"

# 2b. In the middle of a long step (about 3 s each here, of many ops, on a small model whose
# checkpoint is quick to write): the step is dropped, the
# checkpoint is the previous step's. Step 1's line in the log means step 2 has begun: SIGTERM
# reaches it at once, seconds before that step could end.
big=(--corpus "$dir/corpus.txt" --batch 32 --block 512 --layers 4 --heads 4 --embd 128 --warmup 0)
"$minigpt" train "${big[@]}" --out "$dir/b" --steps 50 --eval-interval 1000 > "$dir/b.log" 2>&1 &
b=$!
pids+=("$b")
wait_for '[ "$(lines "$dir/b/train_log.csv")" -ge 2 ]'
stop_within_2s "$b" "$dir/b.log"
done_steps=$(($(lines "$dir/b/train_log.csv") - 1))
grep -q "interrupted at step $done_steps: saved" "$dir/b.log" || { echo "no checkpoint message"; cat "$dir/b.log"; exit 1; }
"$minigpt" train "${big[@]}" --out "$dir/b" --steps "$done_steps" --eval-batches 1 --sample-tokens 1 --resume \
  > "$dir/resume.log" 2>&1
grep -q "resuming from step $done_steps of" "$dir/resume.log" || { echo "long step: bad checkpoint"; cat "$dir/resume.log"; exit 1; }
echo "SIGTERM in a long step: stopped in $ms ms, checkpoint at step $done_steps"

# 2c. In the middle of an evaluation (100000 batches): cut short, the step logged without its
# validation loss, and the checkpoint is that step's. Step 5 is a tenth of 50 steps, so the
# progress bar prints (and flushes) a line for it after the step and before its evaluation: once
# that line is in the log, the evaluation has begun.
"$minigpt" train "${tiny[@]}" --out "$dir/c" --steps 50 --eval-interval 5 --eval-batches 100000 > "$dir/c.log" 2>&1 &
c=$!
pids+=("$c")
wait_for 'grep -q "] *5/50 " "$dir/c.log"'
stop_within_2s "$c" "$dir/c.log"
grep -q "interrupted at step 5: saved" "$dir/c.log" && grep -q "cut its evaluation short" "$dir/c.log" ||
  { echo "evaluation: unexpected stop"; cat "$dir/c.log"; exit 1; }
[ "$(tail -n 1 "$dir/c/train_log.csv" | cut -d, -f1,4)" = "5," ] || { echo "step 5 logged wrongly"; exit 1; }
resumes "$dir/c" 5
echo "SIGTERM in an evaluation: stopped in $ms ms, checkpoint at step 5"

# 2d. In the final sample (a million characters): the checkpoint is complete; what is left is skipped.
# The last attention map is written just before the sample: SIGTERM from then on is answered in
# the sample, at its next op (its first, if it has not begun).
"$minigpt" train "${tiny[@]}" --out "$dir/d" --steps 3 --eval-interval 3 --eval-batches 1 --sample-tokens 1000000 \
  > "$dir/d.log" 2>&1 &
d=$!
pids+=("$d")
wait_for '[ -e "$dir/d/attention_layer0_head1.png" ]'
stop_within_2s "$d" "$dir/d.log"
grep -q "after training: .* holds step 3, complete" "$dir/d.log" || { echo "sample: unexpected stop"; cat "$dir/d.log"; exit 1; }
resumes "$dir/d" 3
echo "SIGTERM in the final sample: stopped in $ms ms"

# 3. A failed write stops the run: the log's first (128 KiB hold about 2800 lines, and the
# checkpoints of about 75 KiB every 20 steps fit), then a checkpoint's (every 5 steps, over 40 KiB).
# ulimit -f counts 1024-byte blocks; SIGXFSZ is ignored so that the write returns an error
# instead of killing the process.
run_limited() {
  local out=$1
  shift
  (
    ulimit -f "$1"
    trap '' XFSZ
    exec "$minigpt" train "${tiny[@]}" --out "$out" --steps 100000 "${@:2}"
  ) > /dev/null 2> "$dir/err"
}
code=0
run_limited "$dir/e" 128 --eval-interval 100000 --checkpoint-interval 20 || code=$?
[ $code -eq 1 ] || { echo "a failing log write: status $code, expected 1"; cat "$dir/err"; exit 1; }
grep -q "cannot write '$dir/e/train_log.csv': File too large" "$dir/err" || { echo "unclear: $(cat "$dir/err")"; exit 1; }
# The last checkpoint is of the last multiple of 20 among the complete lines, and resumes.
logged=$(grep -c '^[0-9]*,[^,]*,[^,]*,$' "$dir/e/train_log.csv")
resumes "$dir/e" $((logged / 20 * 20))
code=0
run_limited "$dir/f" 40 --eval-interval 100000 --checkpoint-interval 5 || code=$?
[ $code -eq 1 ] || { echo "a failing checkpoint write: status $code, expected 1"; cat "$dir/err"; exit 1; }
grep -q "cannot write '$dir/f/minigpt.train.safetensors': File too large" "$dir/err" ||
  { echo "unclear: $(cat "$dir/err")"; exit 1; }
if ls -A "$dir/f" | grep -q '\.tmp'; then echo "a partial checkpoint was left behind: $(ls -A "$dir/f")"; exit 1; fi
echo "failed writes: the log's and a checkpoint's stop the run with status 1"

# A run whose weights stop being finite (--lr 1e300 sends them to infinity in one update) stops
# before the checkpoint that would hold them, and logs and saves no NaN (more cases in
# divergence_test.sh).
code=0
"$minigpt" train "${tiny[@]}" --out "$dir/g" --steps 50 --lr 1e300 --weight-decay 0 --min-lr 0 --checkpoint-interval 1 \
  > /dev/null 2> "$dir/err" || code=$?
[ $code -eq 1 ] || { echo "a diverged run: status $code, expected 1"; cat "$dir/err"; exit 1; }
grep -q "after step 1, '[^']*' holds -*\(inf\|nan\) at element .*: training diverged (a smaller --lr may help); no checkpoint was written" "$dir/err" ||
  { echo "unclear: $(cat "$dir/err")"; exit 1; }
if grep -qi nan "$dir/g/train_log.csv"; then echo "a NaN loss was logged"; exit 1; fi
[ ! -e "$dir/g/minigpt.train.safetensors" ] || { echo "a diverged run saved a training state"; exit 1; }
echo "a diverged run stops before its first checkpoint"

# 4. seq2seq, once the progress line of its first step is in the log: training is under way.
"$seq2seq" --steps 100000 --out "$dir/s" > "$dir/s.log" 2>&1 &
s=$!
pids+=("$s")
wait_for 'grep -q "] *1/100000 " "$dir/s.log"'
stop_within_2s "$s" "$dir/s.log"
grep -q "interrupted by SIGTERM" "$dir/s.log" || { echo "seq2seq: no message"; cat "$dir/s.log"; exit 1; }
echo "seq2seq: stopped in $ms ms"
