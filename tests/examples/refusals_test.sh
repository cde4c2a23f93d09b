#!/usr/bin/env bash
# Every run that cannot succeed is refused before it starts: within seconds, with status 2, a
# message naming the option or the file, and its output directory exactly as it was (the same
# names, sizes and checksums; a directory that did not exist is not created).
# Usage: refusals_test.sh MINIGPT SEQ2SEQ
set -euo pipefail
minigpt=$1
seq2seq=$2
dir=$(mktemp -d)
trap 'chmod -R u+w "$dir" 2>/dev/null; rm -rf "$dir"' EXIT

for i in $(seq 1 40); do printf 'the cat sat on the mat. 床前明月光，疑是地上霜。\n'; done > "$dir/corpus.txt"
printf 'abcdefghij\n' > "$dir/short.txt"
: > "$dir/empty.txt"
printf 'caf\xc3\n' > "$dir/bad-utf8.txt"
# A small run's options; args_with sets `args` to them with the given ones replaced or added.
declare -A small=([--corpus]="$dir/corpus.txt" [--steps]=4 [--eval-interval]=4 [--eval-batches]=1 [--batch]=2
  [--block]=16 [--layers]=1 [--heads]=2 [--embd]=16 [--sample-tokens]=5 [--out]="$dir/run")
args_with() {
  declare -A o
  local k
  for k in "${!small[@]}"; do o[$k]=${small[$k]}; done
  args=()
  while [ $# -gt 0 ]; do
    if [ "$1" = --resume ]; then args+=(--resume); shift; else o[$1]=$2; shift 2; fi
  done
  for k in "${!o[@]}"; do args+=("$k" "${o[$k]}"); done
}
# A finished run, whose directory the refused runs below must leave alone.
args_with
"$minigpt" train "${args[@]}" > /dev/null

snapshot() { (cd "$1" && find . -printf '%p %s %y\n' | sort && find . -type f -exec md5sum {} + | sort); }
before=$(snapshot "$dir/run")

# refused WHAT MESSAGE COMMAND...: COMMAND fails with status 2 within 20 s, prints MESSAGE, and
# changes nothing in $dir/run (nor creates $dir/new).
refused() {
  local what=$1 message=$2
  shift 2
  local code=0 start=$SECONDS
  timeout 20 "$@" > "$dir/out" 2> "$dir/err" || code=$?
  [ $code -eq 2 ] || { echo "$what: exit status $code, expected 2 (refused)"; cat "$dir/out" "$dir/err"; exit 1; }
  [ $((SECONDS - start)) -le 10 ] || { echo "$what: took $((SECONDS - start)) s to refuse"; exit 1; }
  grep -qF -- "$message" "$dir/err" || { echo "$what: expected '$message', got: $(cat "$dir/err")"; exit 1; }
  [ "$(snapshot "$dir/run")" = "$before" ] || { echo "$what: the output directory changed"; exit 1; }
  [ ! -e "$dir/new" ] || { echo "$what: created the output directory"; exit 1; }
  count=$((count + 1))
}
count=0
train() {
  args_with "${@:3}"
  refused "$1" "$2" "$minigpt" train "${args[@]}"
}
fresh() { train "$1" "$2" --out "$dir/new" "${@:3}"; }

# Options: ranges, finiteness, combinations.
for opt in --steps --batch --block --layers --heads --embd --eval-interval --eval-batches --checkpoint-interval; do
  train "$opt 0" "$opt must be positive, got 0" "$opt" 0
done
train "--warmup -1" "--warmup must be at least 0, got -1" --warmup -1
train "--sample-tokens -1" "--sample-tokens must be at least 0, got -1" --sample-tokens -1
train "--embd 15 --heads 2" "--embd 15 must be a multiple of --heads 2" --embd 15
for v in nan inf -0.1 1; do train "--dropout $v" "--dropout must be in [0, 1), got" --dropout $v; done
for v in nan inf -inf 0 -1; do train "--lr $v" "--lr must be a positive finite number, got" --lr $v; done
for v in nan -1 inf; do train "--weight-decay $v" "--weight-decay must be a finite number >= 0" --weight-decay $v; done
train "--lr 10 --weight-decay 0.5" "times --weight-decay 0.5 is 5" --lr 10 --weight-decay 0.5
# The schedule over every step: a negative floor, a floor above the peak, a warm-up past the end.
for v in -1 nan 0.01; do train "--min-lr $v" "--min-lr must be a finite number from 0 to --lr (0.002)" --min-lr $v; done
train "--warmup 5" "--warmup 5 is longer than the run (--steps 4)" --warmup 5
train "--seed -1" "--seed must be an integer from 0 to 18446744073709551615, got '-1'" --seed -1
train "--steps 1e3" "the argument ('1e3') for option '--steps' is invalid" --steps 1e3
train "--kernels NAIVE" "--kernels must be fast, reference or naive, got 'NAIVE'" --kernels NAIVE
train "--kernels naive --precision bf16" "--precision bf16: the naive kernels compute in fp32 and f64 only" \
  --kernels naive --precision bf16

# Sizes too large for the machine, before anything is allocated: the issue's --embd overflows
# int64 and is reported as such; a merely huge model gets its sizes.
fresh "--embd 1537228672809129301" "more than int64 can count" --embd 1537228672809129301 --heads 1
# 100 blocks of 12 C^2 + 13 C, embeddings (24 + 16) C and the final norm's 2 C, at C = 65536.
fresh "--embd 65536 --layers 100" "parameters: 5,154,048,704,512; with their gradients and AdamW moments: 75.0 TiB" \
  --embd 65536 --layers 100 --heads 1
fresh "--batch 4000000000000" "too large for this machine" --batch 4000000000000
fresh "--steps 4000000000000000000" "the loss history of --steps 4000000000000000000" --steps 4000000000000000000 \
  --warmup 0

# The corpus: missing, a directory, a device, empty, not UTF-8, too short for a window in
# either split; the prompt's characters must be in its vocabulary.
fresh "missing corpus" "--corpus $dir/missing.txt: no such file" --corpus "$dir/missing.txt"
fresh "corpus is a directory" "--corpus $dir: it is a directory" --corpus "$dir"
fresh "corpus is a device" "--corpus /dev/zero: it is a device" --corpus /dev/zero
fresh "empty corpus" "--corpus $dir/empty.txt: the file is empty" --corpus "$dir/empty.txt"
fresh "corpus not UTF-8" "--corpus $dir/bad-utf8.txt: not valid UTF-8" --corpus "$dir/bad-utf8.txt"
fresh "corpus too short" "its training split (the first 90%) has 9, fewer than --block + 1 = 17" \
  --corpus "$dir/short.txt"
# 40 lines of 37 characters: 1480, of which the last 148 are held out.
fresh "validation split too short" "its validation split (the last 10%) has 148, fewer than --block + 1 = 201" \
  --block 200
fresh "unknown prompt character" "--prompt: CharTokenizer: character 'x' (U+0078) at byte offset 0 is not in the vocabulary" \
  --prompt xyz

# The output directory: empty name, a file in its place, a directory where a file goes, under
# a file; --resume without a checkpoint, or past the end.
fresh "--out ''" "--out: the directory name is empty" --out ''
train "--out is a file" "--out $dir/corpus.txt: it exists and is a regular file, not a directory" \
  --out "$dir/corpus.txt"
train "--out under a file" "'$dir/corpus.txt' is a regular file, so the directory cannot be created" \
  --out "$dir/corpus.txt/sub"
mv "$dir/run/loss.png" "$dir/loss.png" && mkdir "$dir/run/loss.png"
before=$(snapshot "$dir/run")
train "a directory in place of loss.png" "'$dir/run/loss.png' is in the way: it is a directory"
rmdir "$dir/run/loss.png" && mv "$dir/loss.png" "$dir/run/loss.png"
before=$(snapshot "$dir/run")
fresh "--resume without a checkpoint" "--resume $dir/new/minigpt.train.safetensors: no such file" --resume
train "--resume past --steps" "is at step 4, past --steps 2; pass --steps 4 or more" --resume --steps 2 --warmup 0
# Places this user may not write in or read: as root, which may write anywhere, the runs are
# made as nobody (when setpriv can, and nobody can reach the program).
as_user=()
[ "$(id -u)" -ne 0 ] || as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ ${#as_user[@]} -eq 0 ] || (chmod 755 "$dir" && "${as_user[@]}" "$minigpt" --help > /dev/null 2>&1); then
  chmod a-w "$dir/run"
  before=$(snapshot "$dir/run")
  args_with
  refused "read-only --out" "--out $dir/run: cannot write in the directory '$dir/run'" "${as_user[@]}" "$minigpt" train "${args[@]}"
  args_with --out "$dir/run/sub"
  refused "--out under a read-only directory" "--out $dir/run/sub: cannot write in its parent '$dir/run'" \
    "${as_user[@]}" "$minigpt" train "${args[@]}"
  chmod u+w "$dir/run"
  cp "$dir/corpus.txt" "$dir/secret.txt" && chmod 600 "$dir/secret.txt"
  [ ${#as_user[@]} -gt 0 ] || chmod 000 "$dir/secret.txt"
  args_with --corpus "$dir/secret.txt" --out "$dir/new"
  refused "unreadable corpus" "--corpus $dir/secret.txt: cannot open it for reading: Permission denied" \
    "${as_user[@]}" "$minigpt" train "${args[@]}"
else
  echo "(not checked: an unwritable directory and an unreadable corpus, for want of another user)"
fi

# sample, eval and explore: the same rules, before the checkpoint is even read.
ckpt="$dir/run/minigpt.safetensors"
refused "sample --tokens -1" "--tokens (the number of tokens to sample) must be at least 0, got -1" "$minigpt" sample --checkpoint "$ckpt" --tokens -1
for v in nan -1 -inf; do
  refused "sample --temperature $v" "--temperature must be >= 0" "$minigpt" sample --checkpoint "$ckpt" --temperature $v
done
refused "sample --top-k -1" "--top-k must be at least 0" "$minigpt" sample --checkpoint "$ckpt" --top-k -1
refused "sample --tokens huge" "--tokens 9000000000000000000: a sample of 9000000000000000000 tokens would need" "$minigpt" sample \
  --checkpoint "$ckpt" --tokens 9000000000000000000
refused "sample --prompt ''" "--prompt is empty" "$minigpt" sample --checkpoint "$ckpt" --prompt ''
refused "sample unknown character" "--prompt: CharTokenizer: character 'z'" "$minigpt" sample --checkpoint "$ckpt" --prompt z
refused "sample checkpoint is a directory" "--checkpoint $dir/run: it is a directory" "$minigpt" sample --checkpoint "$dir/run"
# A file that is not a model (here a text file) is a refusal too, naming --checkpoint, in every
# subcommand that reads one.
refused "sample of a text file" "--checkpoint $dir/corpus.txt: " "$minigpt" sample --checkpoint "$dir/corpus.txt"
refused "eval of a text file" "--checkpoint $dir/corpus.txt: " "$minigpt" eval --checkpoint "$dir/corpus.txt" --text "the"
refused "explore of a text file" "--checkpoint $dir/corpus.txt: " "$minigpt" explore --checkpoint "$dir/corpus.txt" \
  --prompt "the" --out "$dir/new"
refused "eval --text too short" "--text: the text has 3 characters; it needs at least block_size + 1 = 17" \
  "$minigpt" eval --checkpoint "$ckpt" --text "the"
refused "eval --file missing" "--file $dir/none.txt: no such file" "$minigpt" eval --checkpoint "$ckpt" --file "$dir/none.txt"
refused "eval --dtype f16" "--dtype must be f32 or f64, got 'f16'" "$minigpt" eval --checkpoint "$ckpt" --text abc --dtype f16
refused "eval --text and --file" "give exactly one of --text and --file" "$minigpt" eval --checkpoint "$ckpt"
refused "explore --out is a file" "it exists and is a regular file, not a directory" \
  "$minigpt" explore --checkpoint "$ckpt" --prompt "the" --out "$dir/corpus.txt"
mkdir -p "$dir/page/attention.html"
refused "explore: a directory in place of attention.html" "'$dir/page/attention.html' is in the way: it is a directory" \
  "$minigpt" explore --checkpoint "$ckpt" --prompt "the" --out "$dir/page"

# seq2seq: --layers 0 has no cross-attention to see the source with; --steps 0 is the untrained
# baseline, and runs.
s2s() { refused "seq2seq $1" "$2" "$seq2seq" --out "$dir/new" "${@:3}"; }
s2s "--layers 0" "--layers must be at least 1, got 0" --layers 0
s2s "--steps -1" "--steps must be at least 0" --steps -1
s2s "--d-model 64 --heads 3" "--d-model 64 must be a multiple of --heads 3" --heads 3
s2s "--lr nan" "--lr must be a positive finite number, got nan" --lr nan
s2s "--min-accuracy 2" "--min-accuracy must be a fraction from 0 to 1" --min-accuracy 2
s2s "--d-model huge" "too large for this machine" --d-model 4000000 --heads 1
s2s "--max-len huge" "--max-len must be at most 4096" --max-len 100000
refused "seq2seq --out is a file" "it exists and is a regular file, not a directory" "$seq2seq" --out "$dir/corpus.txt"
"$seq2seq" --steps 0 --held-out 20 --out "$dir/untrained" > "$dir/out"
grep -q "the untrained model" "$dir/out" && grep -q "held-out exact-sequence accuracy" "$dir/out" ||
  { echo "seq2seq --steps 0 did not evaluate the untrained model"; cat "$dir/out"; exit 1; }

echo "refusals: $count bad runs refused within seconds, each leaving its output directory as it was"
