#!/usr/bin/env bash
# The programs' command lines never lose a run:
#   - an abbreviated option (--step for --steps) is refused with status 2 in every program,
#     naming the option and the ones it is close to; so is a bare word no option takes (with the
#     quotes it likely lacks), a word that holds one of Boost's message placeholders ('%value%',
#     on which Boost's own message never ends) and a bad AG_NUM_THREADS, before anything is written;
#   - --help shows defaults as typed (0.0002) and control characters escaped ("\n");
#   - minigpt train refuses an --out that holds a run unless --resume or --overwrite is given,
#     leaving every file as it was;
#   - --resume takes the model from the training state: model options may be left out, and one
#     that conflicts is refused, both values named, before anything else is printed; so is a
#     corpus other than the run's, unless --new-corpus;
#   - sample given the training state says so; explore says when it cut the prompt; counts of
#     one are singular;
#   - --precision takes fp32, bf16 or auto; bf16 where the CPU cannot run it is refused;
#   - first_gradients, attention_graph and second_order refuse a bad --eps, --seed, --out or size;
#   - experiments, attention_by_hand and minimal_attention refuse a --lang other than en or zh.
# Usage: cli_test.sh MINIGPT SEQ2SEQ EXPERIMENTS ATTENTION_GRAPH FIRST_GRADIENTS ATTENTION_BY_HAND \
#          MINIMAL_ATTENTION SECOND_ORDER
set -euo pipefail
minigpt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "$1"; [ ! -f "$dir/out" ] || cat "$dir/out"; [ ! -f "$dir/err" ] || cat "$dir/err"; exit 1; }

# expect STATUS COMMAND...: COMMAND exits with STATUS; its output is in $dir/out and $dir/err.
expect() {
  local want=$1 code=0
  shift
  "$@" > "$dir/out" 2> "$dir/err" || code=$?
  [ $code -eq "$want" ] || fail "$*: exit status $code, expected $want"
}
has() { grep -qF -- "$2" "$dir/$1" || fail "expected '$2' in the $1 of the last command"; }
hasnt() { ! grep -qF -- "$2" "$dir/$1" || fail "did not expect '$2' in the $1 of the last command"; }

# 1. Abbreviations, in every program and subcommand.
# The message begins as a refusal of the same subcommand does ("minigpt train: ...").
expect 2 "$minigpt" train --step 10 --out "$dir/never"
has err "minigpt train: unrecognised option '--step'"
has err "did you mean --steps?"
[ ! -e "$dir/never" ] || fail "the refused run created its directory"
for sub in sample eval explore; do
  expect 2 "$minigpt" $sub --checkpoint "$dir/none" --check "$dir/none"
  has err "minigpt $sub: unrecognised option '--check'"
  has err "did you mean --checkpoint?"
done
expect 2 "$2" --step 5 --out "$dir/never"
has err "did you mean --steps?"
expect 2 "$3" shapes --ste 5 --out "$dir/never"
has err "did you mean --steps?"
# A command after a list option is taken for one of its values: the refusal says where it goes.
expect 2 "$3" --distances 2 4 long-range --out "$dir/never"
has err "the argument ('long-range') for option '--distances' is invalid (the command goes first: experiments long-range [options])"
expect 2 "$3" --corpus "$dir/none" baselines --out "$dir/never"
has err "no command given (the command goes first: experiments baselines [options])"
expect 2 "$3" long-range shapes --out "$dir/never"
hasnt err "the command goes first"
[ ! -e "$dir/never" ] || fail "the refused run created its directory"
# The positional COMMAND is no option to suggest.
expect 2 "$3" shapes --comman x --out "$dir/never"
has err "unrecognised option '--comman'"
hasnt err "--command"
expect 2 "$4" --token 3 --out "$dir/never"
has err "did you mean --tokens?"
expect 2 "$5" --ep 1e-3
has err "did you mean --eps?"
expect 2 "$6" --hel
has err "did you mean --help?"
expect 2 "$7" --seq 3
has err "did you mean --seq-len?"
expect 2 "$8" --se 3
has err "did you mean --seed?"
[ ! -e "$dir/never" ] || fail "a refused run created its directory"
echo "abbreviations refused in all eight programs"

# 1b. A bare word no option takes is refused, naming it, in every program; after a value that is
# text it is shown quoted with it. Nothing is created.
for cmd in "$minigpt train" "$minigpt sample" "$minigpt eval" "$minigpt explore" "$2" "$4" "$5" "$6" "$7" "$8"; do
  # shellcheck disable=SC2086
  expect 2 $cmd stray
  has err "unexpected word 'stray' on the command line: every word must be an option (--name) or the value that follows one"
done
expect 2 "$minigpt" sample --checkpoint "$dir/none" --prompt You are
has err "minigpt sample: unexpected word 'are' on the command line"
has err 'a value with spaces needs quotes: --prompt "You are"'
expect 2 "$minigpt" explore --checkpoint "$dir/none" --prompt Hello big world
has err 'a value with spaces needs quotes: --prompt "Hello big world"'
expect 2 "$minigpt" train --steps 3 stray --out "$dir/never"
hasnt err "needs quotes"  # a number is no text cut at a space
expect 2 "$3" shapes stray --out "$dir/never"
has err "too many positional options"
[ ! -e "$dir/never" ] || fail "a run refused for a stray word created its directory"
# A word holding one of Boost's message placeholders is refused and shown as typed: Boost's own
# message for it never ends (it fills "%value%" with '%value%', and looks again).
for cmd in "$minigpt train" "$2" "$3 shapes" "$5"; do
  # shellcheck disable=SC2086
  expect 2 timeout 20 $cmd '--x%option%='
  has err "the argument for option '--x%option%' should follow immediately after the equal sign"
done
expect 2 timeout 20 "$minigpt" train --steps '%value%' --out "$dir/never"
has err "the argument ('%value%') for option '--steps' is invalid"
expect 2 timeout 20 "$minigpt" train --steps '%canonical_option%%option%' --out "$dir/never"
has err "the argument ('%canonical_option%%option%') for option '--steps' is invalid"
expect 2 timeout 20 "$2" --stps '%value%'
has err "unrecognised option '--stps'; did you mean --steps?"
[ ! -e "$dir/never" ] || fail "a run refused for a placeholder in a word created its directory"
# An environment setting the library reads is checked as an option is: status 2, nothing written.
for threads in 0 -1 10000 abc ""; do
  expect 2 env AG_NUM_THREADS="$threads" "$minigpt" train --out "$dir/never" --steps 1
  has err "minigpt: AG_NUM_THREADS: expected a whole number from 1 to 1024, got \"$threads\""
  expect 2 env AG_NUM_THREADS="$threads" "$2" --out "$dir/never" --steps 1
  has err "seq2seq: AG_NUM_THREADS: expected"
  expect 2 env AG_NUM_THREADS="$threads" "$3" shapes --out "$dir/never"
  has err "experiments: AG_NUM_THREADS: expected"
done
[ ! -e "$dir/never" ] || fail "a run refused for AG_NUM_THREADS created its directory"
echo "stray words and bad AG_NUM_THREADS refused before anything is written"

# 2. --help: defaults as typed, nothing raw.
for cmd in "$minigpt train" "$minigpt sample" "$minigpt eval" "$minigpt explore" "$2" "$3" "$4" "$5" "$6" "$7" "$8"; do
  expect 0 $cmd --help
  if grep -q '00000000\|99999999' "$dir/out"; then fail "$cmd --help prints a default with its binary noise"; fi
  # No control character but the newlines that end the lines.
  if tr -d '\n' < "$dir/out" | LC_ALL=C grep -q '[[:cntrl:]]'; then fail "$cmd --help prints a control character"; fi
done
expect 0 "$minigpt" train --help
has out "--min-lr arg (=0.0002)"
has out "--weight-decay arg (=0.1)"
expect 0 "$minigpt" sample --help
has out '--prompt arg (="\n")'
expect 0 "$5" --help
has out "--eps arg (=1e-06)"
echo "--help: defaults as typed"

# 3. A finished run, tiny: one file, one layer, one head, so the counts say so.
for i in $(seq 1 40); do printf 'the cat sat on the mat.\n'; done > "$dir/corpus.txt"
model=(--block 16 --layers 1 --heads 1 --embd 16 --dropout 0.1)
rest=(--corpus "$dir/corpus.txt" --out "$dir/run" --eval-interval 4 --eval-batches 1 --batch 2 --sample-tokens 5)
expect 0 "$minigpt" train "${rest[@]}" "${model[@]}" --steps 4
has out "corpus: 1 file,"
has out "model: 1 layer, 1 head,"
has out "wrote 1 attention map,"
snapshot() { (cd "$1" && find . -type f ! -name minigpt.lock -exec sha256sum {} + | sort); }
before=$(snapshot "$dir/run")

# 4. The run is kept: the same command again is refused, and every file is as it was.
expect 2 "$minigpt" train "${rest[@]}" "${model[@]}" --steps 4
has err "--out $dir/run holds a run ("
has err "pass --resume to continue it or --overwrite to replace it"
[ "$(snapshot "$dir/run")" = "$before" ] || fail "the refused run changed $dir/run"
expect 2 "$minigpt" train "${rest[@]}" --steps 4 --resume --overwrite
has err "--resume and --overwrite exclude each other"
[ "$(snapshot "$dir/run")" = "$before" ] || fail "the refused run changed $dir/run"

# 5. --resume without the model options continues with the model of the run.
expect 0 "$minigpt" train "${rest[@]}" --steps 6 --resume
has out "resuming from step 4 of $dir/run/minigpt.train.safetensors"
has out "model: 1 layer, 1 head, n_embd 16, block 16:"
[ "$(wc -l < "$dir/run/train_log.csv")" -eq 7 ] || fail "the resumed log does not have 6 steps"
# and a model option that contradicts it is refused, with both values, before anything else.
after=$(snapshot "$dir/run")
for conflict in "--layers 2:--layers 2 conflicts with the run being resumed:was trained with --layers 1" \
  "--embd 32:--embd 32 conflicts:was trained with --embd 16" \
  "--dropout 0.2:--dropout 0.2 conflicts:was trained with --dropout 0.1"; do
  IFS=: read -r given first second <<< "$conflict"
  # shellcheck disable=SC2086
  expect 2 "$minigpt" train "${rest[@]}" --steps 8 --resume $given
  has err "$first"
  has err "$second"
  [ ! -s "$dir/out" ] || fail "--resume $given printed before refusing: $(cat "$dir/out")"
  [ "$(snapshot "$dir/run")" = "$after" ] || fail "the refused resume changed $dir/run"
done
# The same values given again are no conflict.
expect 0 "$minigpt" train "${rest[@]}" "${model[@]}" --steps 7 --resume
has out "resuming from step 6"
# --norm: the run above is LayerNorm; asking to resume it with RMSNorm is a conflict too.
after=$(snapshot "$dir/run")
expect 2 "$minigpt" train "${rest[@]}" --steps 8 --resume --norm rms
has err "--norm rms conflicts with the run being resumed"
has err "was trained with --norm layer"
[ "$(snapshot "$dir/run")" = "$after" ] || fail "the refused --norm resume changed $dir/run"
# Another text with the same characters: the vocabulary matches, the text does not. Refused,
# naming both, unless --new-corpus says to continue on it (and --new-corpus alone is refused).
for i in $(seq 1 40); do printf 'the mat sat on the cat.\n'; done > "$dir/other.txt"
after=$(snapshot "$dir/run")
expect 2 "$minigpt" train "${rest[@]}" --steps 8 --resume --corpus "$dir/other.txt"
has err "--corpus is not the text the run being resumed trained on (fingerprint "
has err ", 960 characters in its training state, fingerprint "
has err "pass --new-corpus to continue on this one"
[ "$(snapshot "$dir/run")" = "$after" ] || fail "the refused resume on another corpus changed $dir/run"
expect 2 "$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/never" --steps 4 --new-corpus
has err "--new-corpus is for --resume"
expect 0 "$minigpt" train "${rest[@]}" --steps 8 --resume --corpus "$dir/other.txt" --new-corpus
has out "(--new-corpus: not the text the run trained on until now, which had fingerprint "
has out "resuming from step 7"
# A training option the state records that this version does not read is refused, by name (the
# state's options edited with Python's standard library: a JSON header, the data after it).
cp -r "$dir/run" "$dir/odd"
rm -f "$dir/odd/minigpt.lock"
/usr/bin/python3 - "$dir/odd/minigpt.train.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
blob = open(path, "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
options = json.loads(header["__metadata__"]["options"])
options["label-smoothing"] = "0.1"
header["__metadata__"]["options"] = json.dumps(options)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
PY
expect 2 "$minigpt" train --corpus "$dir/other.txt" --out "$dir/odd" --steps 9 --resume --new-corpus
has err "its training options record \"label-smoothing\" (0.1), which this version does not read (it reads "
# A damaged log does not stop a resume, but its gap is said: a step missing, a line of garbage.
for damage in "3d:line 3 is step 3 where step 2 belongs; it keeps steps 1 to 1 and is missing steps 2 to 8" \
  "5s/.*/garbage/:line 5 is no step's line; it keeps steps 1 to 3 and is missing steps 4 to 8"; do
  IFS=: read -r edit message <<< "$damage"
  rm -rf "$dir/gap"
  cp -r "$dir/run" "$dir/gap"
  rm -f "$dir/gap/minigpt.lock"
  sed -i "$edit" "$dir/gap/train_log.csv"
  expect 0 "$minigpt" train --corpus "$dir/other.txt" --out "$dir/gap" --steps 9 --resume --new-corpus
  has err "$dir/gap/train_log.csv: $message"
done
fresh=(--corpus "$dir/corpus.txt" --eval-interval 4 --eval-batches 1 --batch 2 --sample-tokens 5)
expect 2 "$minigpt" train "${fresh[@]}" --steps 2 --norm batch --out "$dir/never"
has err "--norm must be layer or rms, got 'batch'"
[ ! -e "$dir/never" ] || fail "a refused --norm run created its directory"
# A new run with RMSNorm trains, says so, and its checkpoint samples.
expect 0 "$minigpt" train "${fresh[@]}" --steps 3 --warmup 0 --norm rms --layers 1 --heads 1 --embd 16 --block 16 \
  --out "$dir/rms"
has out "model: 1 layer, 1 head, n_embd 16, block 16, RMSNorm:"
expect 0 "$minigpt" sample --checkpoint "$dir/rms/minigpt.safetensors" --tokens 5
# --mlp: the same for SwiGLU. The LayerNorm run above has GELU MLPs: resuming it with SwiGLU is a
# conflict; a new LLaMA-shaped run trains, says so, resumes, and its checkpoint samples.
after=$(snapshot "$dir/run")
expect 2 "$minigpt" train "${rest[@]}" --steps 8 --resume --mlp swiglu
has err "--mlp swiglu conflicts with the run being resumed"
has err "was trained with --mlp gelu"
[ "$(snapshot "$dir/run")" = "$after" ] || fail "the refused --mlp resume changed $dir/run"
expect 2 "$minigpt" train "${fresh[@]}" --steps 2 --mlp relu --out "$dir/never"
has err "--mlp must be gelu or swiglu, got 'relu'"
[ ! -e "$dir/never" ] || fail "a refused --mlp run created its directory"
expect 0 "$minigpt" train "${fresh[@]}" --steps 3 --warmup 0 --norm rms --mlp swiglu --layers 1 --heads 1 --embd 16 \
  --block 16 --out "$dir/llama"
has out "model: 1 layer, 1 head, n_embd 16, block 16, RMSNorm, SwiGLU:"
expect 0 "$minigpt" train "${fresh[@]}" --steps 4 --resume --out "$dir/llama"
has out "resuming from step 3"
has out "SwiGLU"
expect 0 "$minigpt" sample --checkpoint "$dir/llama/minigpt.safetensors" --tokens 5

# 6. --overwrite replaces the run.
expect 0 "$minigpt" train "${rest[@]}" --steps 2 --warmup 0 --overwrite --layers 2 --heads 2 --embd 16 --block 16
has out "model: 2 layers, 2 heads,"
[ "$(wc -l < "$dir/run/train_log.csv")" -eq 3 ] || fail "--overwrite did not start a new log"

# 7. sample given the training state says what to pass instead; explore says it cut the prompt.
expect 2 "$minigpt" sample --checkpoint "$dir/run/minigpt.train.safetensors"
has err "--checkpoint $dir/run/minigpt.train.safetensors is the training state minigpt train keeps for --resume"
has err "--checkpoint $dir/run/minigpt.safetensors"
expect 0 "$minigpt" explore --checkpoint "$dir/run/minigpt.safetensors" --prompt "the cat sat on the mat. the cat" \
  --out "$dir/page.html"
has out "note: --prompt has 31 characters, more than the model's context of 16; the page shows the first 16"
has out "over 16 characters"
expect 0 "$minigpt" explore --checkpoint "$dir/run/minigpt.safetensors" --prompt "t" --out "$dir/page.html"
hasnt out "note:"
has out "2 layers x 2 heads over 1 character;"
echo "cli: runs kept, resumed with their model, conflicts refused with both values"

# 4. Options that a command would ignore are refused, naming the commands they are for; values
# out of range name the range.
expect 2 "$3" positions --corpus "$dir/corpus.txt" --out "$dir/never"
has err "positions does not read text: --corpus and --corpus-chars are for"
expect 2 "$3" shapes --corpus-chars 1000 --out "$dir/never"
has err "shapes does not read text"
expect 2 "$3" bottleneck --distances 4 --out "$dir/never"
has err "--distances and --every-position are for long-range, not bottleneck"
expect 2 "$3" long-range --distances 2 64 --out "$dir/never"
has err "--distances: 64 is not between 1 and 63"
expect 2 "$3" heads --corpus "$dir/none.txt" --out "$dir/never"
has err "$dir/none.txt"
expect 2 "$7" --heads 0
has err "--heads must be between 1 and 64, got 0"
[ ! -e "$dir/never" ] || fail "a refused run created its directory"
echo "cli: options a command does not use and values out of range refused"

# 5. --precision: an unknown value is refused in every program that takes it; bf16 where it
# cannot run is refused before any work, naming the reason; either way nothing is written.
expect 2 "$minigpt" train --precision fp16 --out "$dir/never"
has err "--precision must be fp32, bf16 or auto, got 'fp16'"
expect 2 "$2" --precision half --out "$dir/never"
has err "--precision must be fp32, bf16 or auto, got 'half'"
code=0
ONEDNN_MAX_CPU_ISA=AVX2 "$minigpt" train --precision bf16 --out "$dir/never" > "$dir/out" 2> "$dir/err" || code=$?
[ $code -eq 2 ] || fail "--precision bf16 without a bf16 unit: exit status $code, expected 2"
has err "--precision bf16: "
has err "(use fp32 or auto)"
code=0
ONEDNN_MAX_CPU_ISA=AVX2 "$2" --precision bf16 --out "$dir/never" > "$dir/out" 2> "$dir/err" || code=$?
[ $code -eq 2 ] || fail "seq2seq --precision bf16 without a bf16 unit: exit status $code, expected 2"
[ ! -e "$dir/never" ] || fail "a refused run created its directory"
echo "cli: --precision checked in minigpt and seq2seq"

# 6. The small programs: a value that would print NaN as a pass, crash, or ask for more memory
# than there is is refused with status 2, naming the option; nothing is written.
for eps in 0 -1e-6 nan inf; do
  expect 2 "$5" --eps "$eps"
  has err "--eps must be a positive finite number, got"
done
for program in "$4" "$5" "$8"; do
  expect 2 "$program" --seed -1
  has err "--seed must be an integer from 0 to 18446744073709551615, got '-1'"
done
printf 'x' > "$dir/a-file"
expect 2 "$4" --out "$dir/a-file/graph"
has err "--out $dir/a-file/graph: '$dir/a-file' is a regular file"
expect 2 "$4" --out ''
has err "--out: the directory name is empty"
expect 2 "$4" --tokens 100000 --out "$dir/never"
has err "--tokens must be between 1 and 1024, got 100000"
[ ! -e "$dir/never" ] || fail "a refused run created its directory"
echo "cli: first_gradients, attention_graph and second_order check their options"

# --lang takes en or zh, in every program that prints labels in both.
expect 2 "$3" shapes --lang fr --out "$dir/never"
has err "--lang must be en or zh, got 'fr'"
expect 2 "$6" --lang EN
has err "--lang must be en or zh, got 'EN'"
expect 2 "$7" --lang ''
has err "--lang must be en or zh, got ''"
[ ! -e "$dir/never" ] || fail "a refused run created its directory"
echo "cli: --lang refused unless en or zh"
