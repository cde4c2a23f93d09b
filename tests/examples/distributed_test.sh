#!/usr/bin/env bash
# Data-parallel training under mpirun (docs/distributed.md):
#   1. N = 1 to 4 processes write the same bytes (train_log.csv, both checkpoints) as one
#      process with --grad-accum N; seq2seq prints the same loss and weights;
#   2. a rank killed mid-run brings the whole run down within seconds, naming the rank; the last
#      checkpoint is intact, and --resume from it ends exactly where an unbroken run ends; the
#      same after SIGTERM, which every rank answers at the end of the same step;
#   3. a run resumed with another N equals one process that changes --grad-accum at that step,
#      and says so once; resumed by one process with --grad-accum left out, it sums N
#      micro-batches a step as before;
#   4. ranks started with other options or another corpus are refused before anything is written.
# Skipped (77) without mpirun or in a build without MPI. One thread per process.
# Usage: distributed_test.sh MINIGPT SEQ2SEQ HAVE_MPI
# Single quotes that keep $ for later are meant: wait_until's conditions, and the ranks' own sh.
# shellcheck disable=SC2016
set -euo pipefail
minigpt=$1
seq2seq=$2
have_mpi=$3
if [ "$have_mpi" != true ] || ! command -v mpirun > /dev/null; then
  echo "skipped: this build has no MPI, or mpirun is not installed"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export AG_NUM_THREADS=1
# Open MPI refuses to run as root unless told, and may not have the cores it is asked for.
mpi=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
# Containers often forbid the cross-memory attach Open MPI's shared-memory transport tries first.
export OMPI_MCA_btl_vader_single_copy_mechanism=none

fail() {
  echo "FAIL: $*"
  exit 1
}
same_run() {  # same_run DIR_A DIR_B: the files a run writes are byte for byte the same
  for f in train_log.csv minigpt.safetensors minigpt.train.safetensors; do
    cmp "$1/$f" "$2/$f" || fail "$f of $(basename "$1") and $(basename "$2") differ"
  done
}

for i in $(seq 1 80); do printf 'the cat sat on the mat; a dog lay on the log. %d\n' "$i"; done > "$dir/corpus.txt"
train=("$minigpt" train --corpus "$dir/corpus.txt" --batch 4 --block 16 --layers 2 --heads 2 --embd 32
  --eval-interval 10 --eval-batches 3 --sample-tokens 5)

# 1. Equality, 20 steps, dropout on (its masks are keyed by micro-batch). N = 1 is a plain run
# under mpirun; N = 4 is twice as many processes as a 2-core machine has cores.
for n in 1 2 3 4; do
  "${train[@]}" --steps 20 --dropout 0.1 --grad-accum $n --out "$dir/accum$n" > "$dir/accum$n.log"
  "${mpi[@]}" -np $n "${train[@]}" --steps 20 --dropout 0.1 --out "$dir/mpi$n" > "$dir/mpi$n.log" 2>&1 ||
    { cat "$dir/mpi$n.log"; fail "mpirun -np $n failed"; }
  same_run "$dir/accum$n" "$dir/mpi$n"
  [ "$n" -eq 1 ] || grep -q "data-parallel: $n processes" "$dir/mpi$n.log" || fail "mpirun -np $n did not say it ran data-parallel"
  [ "$(grep -c '^final validation loss' "$dir/mpi$n.log")" -eq 1 ] || fail "more than rank 0 printed the summary"
  echo "N = $n: train_log.csv and both checkpoints equal to --grad-accum $n, byte for byte ($(($(wc -l < "$dir/mpi$n/train_log.csv") - 1)) steps, last: $(tail -1 "$dir/mpi$n/train_log.csv"))"
done
# Equal, and still a different run from one process with one micro-batch of 4.
"${train[@]}" --steps 20 --dropout 0.1 --out "$dir/single" > /dev/null
cmp -s "$dir/single/train_log.csv" "$dir/mpi2/train_log.csv" && fail "two processes logged what one micro-batch logs"

s2s=("$seq2seq" --steps 25 --batch 16 --d-model 32 --layers 1 --held-out 40)
"${s2s[@]}" --grad-accum 3 --out "$dir/s2s_accum" > "$dir/s2s_accum.log"
"${mpi[@]}" -np 3 "${s2s[@]}" --out "$dir/s2s_mpi" > "$dir/s2s_mpi.log" 2>&1 || { cat "$dir/s2s_mpi.log"; fail "seq2seq under mpirun failed"; }
a=$(grep "^last step's loss" "$dir/s2s_accum.log") && b=$(grep "^last step's loss" "$dir/s2s_mpi.log") ||
  fail "seq2seq printed no last loss"
[ "$a" = "$b" ] || fail "seq2seq: '$a' with --grad-accum 3, '$b' with mpirun -np 3"
echo "seq2seq, N = 3: $b (the same with --grad-accum 3)"

# 2. Kill rank 1 with SIGKILL once a few checkpoints are written.
steps=400
"${train[@]}" --steps $steps --checkpoint-interval 5 --out "$dir/straight" --grad-accum 2 > /dev/null
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }
# wait_until LAUNCHER LOG WHAT CONDITION: returns once CONDITION (a shell test) holds. It waits
# for what the run has done, not for a length of time, so a slow or busy machine only makes it
# wait longer. It fails naming WHAT, with mpirun's LOG, if mpirun exits first, or after 120 s.
wait_until() {
  local launcher=$1 log=$2 what=$3 condition=$4 deadline=$((SECONDS + 120))
  while :; do
    kill -0 "$launcher" 2> /dev/null || { cat "$log"; fail "mpirun exited before $what"; }
    eval "$condition" && return 0
    [ "$SECONDS" -lt "$deadline" ] || { cat "$log"; fail "no $what after 120 s"; }
    sleep 0.05
  done
}
# Put before a command under mpirun, with a PREFIX: each rank writes its pid to PREFIX.rankN.pid,
# N its rank, then becomes the command (exec keeps the pid). The test can then signal rank 1
# itself, without guessing which of mpirun's processes it is.
pid_file=(sh -c 'echo $$ > "$0.rank$OMPI_COMM_WORLD_RANK.pid" && exec "$@"')
"${mpi[@]}" -np 2 "${pid_file[@]}" "$dir/killed" "${train[@]}" --steps $steps --checkpoint-interval 5 --out "$dir/killed" \
  > "$dir/killed.log" 2>&1 &
launcher=$!
# The pid file is written before the trainer starts, and 30 logged steps need both ranks: by
# then the pid in it is rank 1's trainer, mid-run.
wait_until $launcher "$dir/killed.log" "pid file of rank 1" '[ -s "$dir/killed.rank1.pid" ]'
wait_until $launcher "$dir/killed.log" "30 steps in killed/train_log.csv" '[ "$(lines "$dir/killed/train_log.csv")" -gt 30 ]'
victim=$(< "$dir/killed.rank1.pid")
killed_at=$(date +%s%N)
kill -KILL "$victim" || { cat "$dir/killed.log"; fail "rank 1 (pid $victim) could not be killed"; }
code=0
wait $launcher || code=$?
took_ms=$((($(date +%s%N) - killed_at) / 1000000))
[ "$code" -ne 0 ] || fail "mpirun exited 0 after rank 1 was killed"
echo "killed rank 1 (pid $victim) after step $(($(lines "$dir/killed/train_log.csv") - 1)): mpirun exited $code after $took_ms ms"
[ "$took_ms" -lt 10000 ] || fail "the other rank took $took_ms ms to stop"
grep -Eq "rank 1|\[\[[0-9]+,1\],1\]" "$dir/killed.log" || { cat "$dir/killed.log"; fail "the error does not name rank 1"; }
grep -E "rank 1|exited on signal" "$dir/killed.log" | head -2 | sed 's/^/  /'
"${mpi[@]}" -np 2 "${train[@]}" --steps $steps --checkpoint-interval 5 --out "$dir/killed" --resume > "$dir/resumed.log" 2>&1 ||
  { cat "$dir/resumed.log"; fail "--resume after the kill failed"; }
grep -q "resuming from step" "$dir/resumed.log" || fail "the resumed run did not say where it resumed"
same_run "$dir/straight" "$dir/killed"
echo "resumed with the same N: train_log.csv and checkpoints equal to the run that was never killed"

# A stop request (SIGTERM to mpirun, which passes it on) is answered by all ranks at the end of a
# step: rank 0 saves that step, and --resume ends where the unbroken run ends.
long=3000  # mpirun passes the signal on a second after it gets it: long enough not to finish first
"${train[@]}" --steps $long --checkpoint-interval 50 --out "$dir/straight_long" --grad-accum 2 > /dev/null
"${mpi[@]}" -np 2 "${train[@]}" --steps $long --checkpoint-interval 50 --out "$dir/stopped" > "$dir/stopped.log" 2>&1 &
launcher=$!
wait_until $launcher "$dir/stopped.log" "30 steps in stopped/train_log.csv" '[ "$(lines "$dir/stopped/train_log.csv")" -gt 30 ]'
kill -TERM $launcher
wait $launcher || true
grep -q "interrupted at step" "$dir/stopped.log" || { cat "$dir/stopped.log"; fail "SIGTERM: no 'interrupted at step' from rank 0"; }
echo "SIGTERM to mpirun: $(grep -m1 'interrupted at step' "$dir/stopped.log")"
"${mpi[@]}" -np 2 "${train[@]}" --steps $long --checkpoint-interval 50 --out "$dir/stopped" --resume > /dev/null 2>&1 ||
  fail "--resume after SIGTERM failed"
same_run "$dir/straight_long" "$dir/stopped"
echo "resumed after SIGTERM: equal to the run that was never stopped"

# 3. Two processes for 10 steps, then three: the same as one process changing --grad-accum.
"${mpi[@]}" -np 2 "${train[@]}" --steps 10 --out "$dir/grow" > /dev/null 2>&1 || fail "mpirun -np 2 (10 steps) failed"
"${mpi[@]}" -np 3 "${train[@]}" --steps 20 --out "$dir/grow" --resume > "$dir/grow.log" 2>&1 || fail "resume with -np 3 failed"
note="note: 3 processes differ from the run being resumed, which summed 2 micro-batches a step; the remaining steps sum 3"
[ "$(grep -cF "$note" "$dir/grow.log")" -eq 1 ] || { cat "$dir/grow.log"; fail "not one note of the new micro-batch count"; }
"${train[@]}" --steps 10 --grad-accum 2 --out "$dir/grow_ref" > /dev/null
"${train[@]}" --steps 20 --grad-accum 3 --out "$dir/grow_ref" --resume > /dev/null
same_run "$dir/grow_ref" "$dir/grow"
echo "resumed with N = 3 after N = 2: equal to --grad-accum 2 then --grad-accum 3"
# Two processes, then one with --grad-accum left out: the training state's two micro-batches a step.
"${mpi[@]}" -np 2 "${train[@]}" --steps 10 --out "$dir/shrink" > /dev/null 2>&1 || fail "mpirun -np 2 (10 steps) failed"
"${train[@]}" --steps 20 --out "$dir/shrink" --resume > "$dir/shrink.log"
! grep -q "^note:.*micro-batches" "$dir/shrink.log" || { cat "$dir/shrink.log"; fail "a note of a micro-batch count that did not change"; }
"${train[@]}" --steps 10 --grad-accum 2 --out "$dir/shrink_ref" > /dev/null
"${train[@]}" --steps 20 --grad-accum 2 --out "$dir/shrink_ref" --resume > /dev/null
same_run "$dir/shrink_ref" "$dir/shrink"
echo "resumed by one process after N = 2, --grad-accum left out: equal to --grad-accum 2 throughout"

# 4. Ranks that disagree are refused at the start, quickly, and nothing is written.
refused() {  # refused NAME EXPECTED -- ARGS FOR RANK 1...
  local name=$1 expected=$2
  shift 3
  code=0
  timeout 60 "${mpi[@]}" -np 1 "${train[@]}" --steps 5 --out "$dir/$name" : -np 1 "${train[@]}" --steps 5 --out "$dir/$name" "$@" \
    > "$dir/$name.log" 2>&1 || code=$?
  [ "$code" -ne 124 ] || fail "$name: mpirun hung"
  [ "$code" -eq 2 ] || { cat "$dir/$name.log"; fail "$name: exit code $code, expected 2"; }
  grep -q "$expected" "$dir/$name.log" || { cat "$dir/$name.log"; fail "$name: no '$expected' in the error"; }
  [ ! -e "$dir/$name" ] || fail "$name: the refused run wrote $dir/$name"
  echo "$name: refused: $(grep -m1 "$expected" "$dir/$name.log" | cut -c1-160)"
}
refused "other-model" "differs between ranks" -- --dropout 0.2
printf 'another text entirely, line %d\n' $(seq 1 80) > "$dir/other.txt"
refused "other-corpus" "differs between ranks" -- --corpus "$dir/other.txt"
refused "other-options" "differs between ranks" -- --lr 0.01
refused "bad-option-on-one-rank" "" -- --dropout 1.5
grep -q "rank 1 of 2: --dropout must be in \[0, 1), got 1.5" "$dir/bad-option-on-one-rank.log" ||
  { cat "$dir/bad-option-on-one-rank.log"; fail "the refusal on rank 1 does not name the rank"; }
echo "a run under mpirun with --grad-accum 2 is refused:"
code=0
"${mpi[@]}" -np 2 "${train[@]}" --steps 5 --grad-accum 2 --out "$dir/accum-and-mpi" > "$dir/accum-and-mpi.log" 2>&1 || code=$?
[ "$code" -eq 2 ] && grep -q "run mpirun -np 4" "$dir/accum-and-mpi.log" || { cat "$dir/accum-and-mpi.log"; fail "--grad-accum under mpirun"; }
echo "ok"
