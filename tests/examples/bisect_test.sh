#!/usr/bin/env bash
# minigpt train --trace and minigpt bisect (autograd/debug/trace.h), on real runs of two steps:
#   1. the same settings twice (2 threads) give identical traces: every op's output and gradient
#      and the weights after each update, byte for byte;
#   2. two processes under mpirun give the trace of one process with --grad-accum 2 (the ranks'
#      files read as one), byte for byte (skipped without MPI);
#   3. 1 and 2 threads are not byte-identical (docs/distributed.md, "Same threads"): bisect names
#      the first op that differs, in step 1's forward pass, by a rounding error;
#   4. the fast and the reference kernels run other ops: bisect says where they part and
#      compares the weights after each update; bf16 against fp32 where the CPU has bf16;
#   5. bad input is refused with status 2: one trace, a file that is not a trace, a --trace
#      whose directory does not exist, that is a symbolic link, the corpus, or one of the files
#      the run writes in --out (nothing written).
# Usage: bisect_test.sh MINIGPT HAVE_MPI
set -euo pipefail
minigpt=$1
have_mpi=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
for i in $(seq 1 80); do printf 'the cat sat on the mat; a dog lay on the log. %d\n' "$i"; done > "$dir/corpus.txt"
model=("$minigpt" train --corpus "$dir/corpus.txt" --batch 4 --block 16 --layers 2 --heads 2 --embd 32
  --eval-interval 10 --eval-batches 3 --sample-tokens 5 --dropout 0.1)
train=("${model[@]}" --steps 2)
# bisect A B EXPECTED_STATUS: runs minigpt bisect, its output in $dir/bisect.log.
bisect() {
  local code=0
  "$minigpt" bisect "$1" "$2" > "$dir/bisect.log" 2>&1 || code=$?
  [ "$code" -eq "$3" ] || { cat "$dir/bisect.log"; fail "bisect $(basename "$1") $(basename "$2"): status $code, expected $3"; }
}

# 1. The same settings twice.
AG_NUM_THREADS=2 "${train[@]}" --out "$dir/a" --trace "$dir/two.trace" > "$dir/a.log"
grep -q "trace: every op's values of every step written to $dir/two.trace" "$dir/a.log" || fail "train did not say where the trace goes"
AG_NUM_THREADS=2 "${train[@]}" --out "$dir/b" --trace "$dir/two_again.trace" > /dev/null
bisect "$dir/two.trace" "$dir/two_again.trace" 0
grep -Eq "^identical: [0-9]+ entries, byte for byte$" "$dir/bisect.log" || { cat "$dir/bisect.log"; fail "not identical"; }
echo "2 threads, twice: $(tail -1 "$dir/bisect.log")"

# 2. Two processes against one accumulating two micro-batches.
export AG_NUM_THREADS=1
"${train[@]}" --grad-accum 2 --out "$dir/accum" --trace "$dir/accum.trace" > /dev/null
if [ "$have_mpi" = true ] && command -v mpirun > /dev/null; then
  mpi=(mpirun --oversubscribe)
  [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  "${mpi[@]}" -np 2 "${train[@]}" --out "$dir/mpi" --trace "$dir/mpi.trace" > "$dir/mpi.log" 2>&1 ||
    { cat "$dir/mpi.log"; fail "mpirun -np 2 failed"; }
  [ -s "$dir/mpi.trace.rank1" ] || fail "rank 1 wrote no mpi.trace.rank1"
  bisect "$dir/accum.trace" "$dir/mpi.trace" 0
  grep -q "^B: $dir/mpi.trace with 1 file of other ranks$" "$dir/bisect.log" || { cat "$dir/bisect.log"; fail "the rank file was not read"; }
  echo "mpirun -np 2 against --grad-accum 2: $(tail -1 "$dir/bisect.log")"
else
  echo "skipped: mpirun -np 2 against --grad-accum 2 (no MPI in this build)"
fi

# 3. 1 thread against 2: the first op that differs, a rounding error in step 1's forward pass.
"${train[@]}" --out "$dir/one" --trace "$dir/one.trace" > /dev/null
bisect "$dir/one.trace" "$dir/two.trace" 1
grep -q "^first difference, entry [0-9]*: step 1, micro-batch 0, forward: " "$dir/bisect.log" ||
  { cat "$dir/bisect.log"; fail "1 and 2 threads: no first difference in step 1's forward pass"; }
relative=$(sed -n 's/.*relative \([0-9.e+-]*\)).*/\1/p' "$dir/bisect.log")
awk -v r="$relative" 'BEGIN { exit !(r > 0 && r < 1e-5) }' || { cat "$dir/bisect.log"; fail "not a rounding error"; }
echo "1 thread against 2:"
sed 's/^/  /' "$dir/bisect.log"

# 4. The reference kernels: other ops, and weights equal to rounding.
"${train[@]}" --kernels reference --out "$dir/reference" --trace "$dir/reference.trace" > /dev/null
bisect "$dir/one.trace" "$dir/reference.trace" 1
grep -q "^the runs part at entry" "$dir/bisect.log" || { cat "$dir/bisect.log"; fail "fast and reference: no parting"; }
grep -q "^the weights after the updates first differ: after step 1's update: " "$dir/bisect.log" ||
  { cat "$dir/bisect.log"; fail "fast and reference: weights not compared"; }
echo "fast against reference kernels:"
sed 's/^/  /' "$dir/bisect.log"
if "${train[@]}" --precision bf16 --out "$dir/bf16" --trace "$dir/bf16.trace" > "$dir/bf16.log" 2>&1; then
  bisect "$dir/one.trace" "$dir/bf16.trace" 1
  echo "fp32 against bf16:"
  sed 's/^/  /' "$dir/bisect.log"
else
  grep -q "bf16" "$dir/bf16.log" || { cat "$dir/bf16.log"; fail "--precision bf16 failed without naming bf16"; }
  echo "skipped: fp32 against bf16 (this CPU has no bf16 unit: $(grep -m1 -o 'bf16.*' "$dir/bf16.log" | cut -c1-100))"
fi

# 5. Bad input.
code=0
"$minigpt" bisect "$dir/one.trace" > "$dir/bad.log" 2>&1 || code=$?
[ "$code" -eq 2 ] && grep -q "give two traces to compare, A and B; got 1" "$dir/bad.log" || { cat "$dir/bad.log"; fail "one trace"; }
code=0
"$minigpt" bisect "$dir/one.trace" "$dir/corpus.txt" > "$dir/bad.log" 2>&1 || code=$?
[ "$code" -eq 2 ] && grep -q "$dir/corpus.txt: not an op trace" "$dir/bad.log" || { cat "$dir/bad.log"; fail "a text file as a trace"; }
head -c 100000 "$dir/one.trace" > "$dir/cut.trace"
code=0
"$minigpt" bisect "$dir/one.trace" "$dir/cut.trace" > "$dir/bad.log" 2>&1 || code=$?
[ "$code" -eq 2 ] && grep -q "$dir/cut.trace: entry [0-9]* is not readable" "$dir/bad.log" || { cat "$dir/bad.log"; fail "a trace cut short"; }
code=0
"${train[@]}" --out "$dir/never" --trace "$dir/no/such/dir/t.trace" > "$dir/bad.log" 2>&1 || code=$?
[ "$code" -eq 2 ] && grep -q "its directory $dir/no/such/dir does not exist" "$dir/bad.log" || { cat "$dir/bad.log"; fail "--trace in no directory"; }
echo "kept" > "$dir/victim"
ln -s "$dir/victim" "$dir/link.trace"
code=0
"${train[@]}" --out "$dir/never" --trace "$dir/link.trace" > "$dir/bad.log" 2>&1 || code=$?
[ "$code" -eq 2 ] && grep -q "link.trace" "$dir/bad.log" || { cat "$dir/bad.log"; fail "--trace through a symbolic link"; }
[ "$(cat "$dir/victim")" = kept ] || fail "--trace wrote through a symbolic link"
[ ! -e "$dir/never" ] || fail "a refused --trace run created its --out"
# A trace named as a file the run reads or writes would truncate it before the first step: the
# corpus, and the checkpoint and log of the run being resumed (also named through "..").
corpus_sum=$(sha256sum < "$dir/corpus.txt")
code=0
"${train[@]}" --out "$dir/never" --trace "$dir/corpus.txt" > "$dir/bad.log" 2>&1 || code=$?
[ "$code" -eq 2 ] && grep -q "is the corpus the run reads" "$dir/bad.log" || { cat "$dir/bad.log"; fail "--trace on the corpus"; }
[ "$(sha256sum < "$dir/corpus.txt")" = "$corpus_sum" ] || fail "--trace on the corpus changed it"
for own in minigpt.safetensors minigpt.train.safetensors ../a/train_log.csv; do
  before=$(sha256sum "$dir/a/minigpt.safetensors" "$dir/a/minigpt.train.safetensors" "$dir/a/train_log.csv")
  code=0
  "${model[@]}" --steps 3 --resume --out "$dir/a" --trace "$dir/a/$own" > "$dir/bad.log" 2>&1 || code=$?
  [ "$code" -eq 2 ] && grep -q "is the run's own $(basename "$own") in --out" "$dir/bad.log" ||
    { cat "$dir/bad.log"; fail "--trace on the run's own $own"; }
  [ "$(sha256sum "$dir/a/minigpt.safetensors" "$dir/a/minigpt.train.safetensors" "$dir/a/train_log.csv")" = "$before" ] ||
    fail "--trace on the run's own $own changed the run"
done
[ ! -e "$dir/never" ] || fail "a refused --trace run created its --out"
echo "bad input refused: one trace, not a trace, a trace cut short, --trace in no directory, through a link, on the corpus or on the run's own files"
