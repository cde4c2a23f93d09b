#!/usr/bin/env bash
# No good run is lost to a bad step. A run that diverges stops with status 1 and a message
# naming the step and what went wrong, before anything it cannot use again is written: the last
# good checkpoint and training state stay byte for byte, and eval and --resume use them.
#   1. --lr 1e300 on the 21st step of a healthy run: the update sends the weights to infinity
#      (caught by the validation loss of the last step, or, with --checkpoint-interval 1, by the
#      weights themselves before the checkpoint);
#   2. --lr 1e10 from the start: the weights stay finite (about 1e10) but their next forward
#      overflows; the checkpoint after step 1 is refused too;
#      what such a run leaves behind is refused naming the one flag that can reuse it, --overwrite;
#      an --overwrite that fails so puts back the run it was replacing;
#   3. eval exits 1, not 0, when a checkpoint's loss on the text is not finite;
#   4. seq2seq stops on a loss that is not finite.
# A negative second moment in a training state is refused on load (tests/io/training_state_test).
# Usage: divergence_test.sh MINIGPT SEQ2SEQ
set -euo pipefail
minigpt=$1
seq2seq=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

for i in $(seq 1 300); do printf 'the cat sat on the mat; a dog lay on the log.\n'; done > "$dir/corpus.txt"
tiny=(--corpus "$dir/corpus.txt" --batch 4 --block 16 --layers 1 --heads 2 --embd 16 --warmup 0 --sample-tokens 1)
text="the cat sat on the mat; a dog lay on the log."
# diverges OUT_LOG EXPECTED ARGS...: minigpt train ARGS exits 1 with EXPECTED on stderr.
diverges() {
  local expected=$1 code=0
  shift
  "$minigpt" train "${tiny[@]}" "$@" > "$dir/out" 2> "$dir/err" || code=$?
  [ $code -eq 1 ] || { cat "$dir/out" "$dir/err"; fail "status $code, expected 1, for: $*"; }
  grep -Eq "$expected" "$dir/err" || fail "for: $*: expected /$expected/, got: $(cat "$dir/err")"
  sed 's/^/  /' "$dir/err"
}
# eval_ok FILE: eval of the checkpoint FILE succeeds with a finite loss.
eval_ok() {
  "$minigpt" eval --checkpoint "$1" --text "$text" > "$dir/eval" 2>&1 || { cat "$dir/eval"; fail "eval of $1 failed"; }
  grep -Eq "^loss: [0-9.]+$" "$dir/eval" || fail "eval of $1: $(grep loss "$dir/eval")"
}

# 1. A healthy run of 20 steps, then one bad step.
"$minigpt" train "${tiny[@]}" --out "$dir/h" --steps 20 --eval-interval 10 > /dev/null
(cd "$dir/h" && sha256sum minigpt.safetensors minigpt.train.safetensors > "$dir/sums")
cp "$dir/h/train_log.csv" "$dir/log20"
bad_lr=(--lr 1e300 --weight-decay 0 --min-lr 0 --precision fp32)
diverges "the validation loss after step 21 is -?nan: training diverged \(a smaller --lr may help\); .*/h/minigpt.train.safetensors keeps step 20$" \
  --out "$dir/h" --resume --steps 21 "${bad_lr[@]}"
(cd "$dir/h" && sha256sum --quiet -c "$dir/sums") || fail "the step-20 checkpoint changed"
diverges "after step 21, '[^']+' holds -?(inf|nan) at element [0-9]+ \([0-9]+ bad values in it\): training diverged .*keeps step 20$" \
  --out "$dir/h" --resume --steps 25 --checkpoint-interval 1 "${bad_lr[@]}"
(cd "$dir/h" && sha256sum --quiet -c "$dir/sums") || fail "the step-20 checkpoint changed (--checkpoint-interval 1)"
if grep -qi nan "$dir/h/train_log.csv"; then fail "a NaN was logged"; fi
eval_ok "$dir/h/minigpt.safetensors"
"$minigpt" train "${tiny[@]}" --out "$dir/h" --resume --steps 22 --eval-interval 10 > "$dir/out" 2>&1 ||
  { cat "$dir/out"; fail "--resume after the diverged steps failed"; }
grep -q "resuming from step 20 of" "$dir/out" || fail "the resume did not start from step 20: $(head -3 "$dir/out")"
echo "a bad 21st step: the step-20 checkpoint stays as it was, evaluates and resumes"

# 2. Weights finite but too large: no checkpoint of them, whichever check sees it first.
diverges "the weights after step 1 are finite, but their loss on held-out text is -?nan: training diverged .*no checkpoint was written$" \
  --out "$dir/k" --steps 40 --lr 1e10 --weight-decay 0 --checkpoint-interval 1
[ ! -e "$dir/k/minigpt.safetensors" ] && [ ! -e "$dir/k/minigpt.train.safetensors" ] ||
  fail "--lr 1e10 left a checkpoint"
diverges "the loss of step 2 is -?nan: training diverged .*no checkpoint was written$" \
  --out "$dir/k2" --steps 40 --lr 1e10 --weight-decay 0 --checkpoint-interval 5
echo "weights of 1e10: refused before any checkpoint"
# What is left (the log and the lock) holds nothing to resume: the refusals name the one flag
# that works, and it does.
refused() {
  local expected=$1 code=0
  shift
  "$minigpt" train "${tiny[@]}" "$@" > "$dir/out" 2> "$dir/err" || code=$?
  [ $code -eq 2 ] || { cat "$dir/out" "$dir/err"; fail "status $code, expected 2, for: $*"; }
  grep -qF -e "$expected" "$dir/err" || fail "for: $*: expected '$expected', got: $(cat "$dir/err")"
}
refused "holds a run that saved no training state (train_log.csv), so there is nothing to --resume; pass --overwrite to replace it" \
  --out "$dir/k" --steps 5
refused "--resume: $dir/k holds a run that saved no training state (it stopped before its first checkpoint); pass --overwrite instead" \
  --out "$dir/k" --steps 5 --resume
"$minigpt" train "${tiny[@]}" --out "$dir/k" --steps 5 --overwrite > /dev/null || fail "--overwrite after a failed first run"
echo "the --out of a run that saved nothing: the refusals name --overwrite, which works"

# 2b. --overwrite puts the run it was replacing back when the new run ends before its first
# checkpoint (here it diverges at step 2): every file as it was, no folder left; a new run that
# checkpoints replaces it for good. A folder a killed --overwrite left is named by the refusal.
"$minigpt" train "${tiny[@]}" --out "$dir/o" --steps 10 --eval-interval 5 > /dev/null
sums() { (cd "$1" && find . -type f ! -name minigpt.lock -exec sha256sum {} + | sort); }
before=$(sums "$dir/o")
diverges "the loss of step 2 is -?nan: training diverged" \
  --out "$dir/o" --overwrite --steps 40 --lr 1e10 --weight-decay 0 --checkpoint-interval 5
grep -q "the new run saved nothing; the run it was replacing is back in $dir/o" "$dir/err" ||
  fail "--overwrite: no word of the old run: $(cat "$dir/err")"
[ "$(sums "$dir/o")" = "$before" ] || fail "a failed --overwrite changed the run it was replacing"
if ls -a "$dir/o" | grep -q "^\.replaced-"; then fail "a failed --overwrite left its folder"; fi
"$minigpt" train "${tiny[@]}" --out "$dir/o" --overwrite --steps 6 --eval-interval 3 > /dev/null ||
  fail "--overwrite with a healthy run failed"
[ "$(sums "$dir/o")" != "$before" ] || fail "--overwrite did not replace the run"
if ls -a "$dir/o" | grep -q "^\.replaced-"; then fail "--overwrite left the replaced run's folder"; fi
grep -q "^6," "$dir/o/train_log.csv" && ! grep -q "^7," "$dir/o/train_log.csv" || fail "the new log is not the new run's"
# As a killed --overwrite leaves it: the old run in its folder, the new run's log beside it.
mkdir "$dir/o/.replaced-Ab12Cd"
mv "$dir/o/minigpt.safetensors" "$dir/o/minigpt.train.safetensors" "$dir/o/.replaced-Ab12Cd/"
refused "the run an --overwrite was replacing when it stopped is in $dir/o/.replaced-Ab12Cd: move its files back into $dir/o to keep it" \
  --out "$dir/o" --steps 5
echo "--overwrite: a failed new run puts the old one back; a killed one is named"

# 3. A checkpoint whose weights are finite but whose loss is not: the healthy one with every
# float32 scaled to 1e30 (Python's standard library edits the safetensors file in place).
cp "$dir/h/minigpt.safetensors" "$dir/huge.safetensors"
/usr/bin/python3 - "$dir/huge.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] != "F32":
            continue
        begin, end = entry["data_offsets"]
        f.seek(8 + n + begin)
        values = struct.unpack(f"<{(end - begin) // 4}f", f.read(end - begin))
        f.seek(8 + n + begin)
        f.write(struct.pack(f"<{len(values)}f", *[1e30 if v >= 0 else -1e30 for v in values]))
PY
code=0
"$minigpt" eval --checkpoint "$dir/huge.safetensors" --text "$text" > "$dir/out" 2> "$dir/err" || code=$?
[ $code -eq 1 ] || { cat "$dir/out" "$dir/err"; fail "eval of a checkpoint whose loss is not finite: status $code"; }
grep -Eq "the loss is -?(nan|inf): the model's outputs on this text are not finite" "$dir/err" ||
  fail "eval: unclear: $(cat "$dir/err")"
echo "eval: a loss that is not finite is status 1: $(cat "$dir/err")"

# 4. seq2seq.
code=0
"$seq2seq" --steps 30 --lr 1e30 --out "$dir/s" > "$dir/out" 2> "$dir/err" || code=$?
[ $code -eq 1 ] || { cat "$dir/out" "$dir/err"; fail "seq2seq --lr 1e30: status $code, expected 1"; }
grep -Eq "(the loss of step [0-9]+ is -?nan|after the last step, '[^']+' holds -?(inf|nan)).*: training diverged \(a smaller --lr may help\)" "$dir/err" ||
  fail "seq2seq: unclear: $(cat "$dir/err")"
echo "seq2seq: $(cat "$dir/err")"
