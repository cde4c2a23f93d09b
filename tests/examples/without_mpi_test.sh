#!/usr/bin/env bash
# A build without MPI started by an MPI launcher as one of several processes must refuse to
# start (each process would train alone, all writing the same files), and run as ever when
# started alone. The launcher is imitated by its environment variable. Skipped (77) in a build
# with MPI, where tests/examples/distributed_test.sh runs the real thing.
# Usage: without_mpi_test.sh MINIGPT SEQ2SEQ HAVE_MPI
set -euo pipefail
minigpt=$1
seq2seq=$2
if [ "$3" = true ]; then
  echo "skipped: this build has MPI"
  exit 77
fi
for program in "$minigpt train --steps 1" "$seq2seq --steps 1"; do
  code=0
  out=$(OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 $program 2>&1) || code=$?
  [ "$code" -eq 2 ] || { echo "$out"; echo "FAIL: $program as one of 2 processes: exit $code, expected 2"; exit 1; }
  grep -q "started as one of 2 MPI processes, but this build of attograd has no MPI" <<< "$out" ||
    { echo "$out"; echo "FAIL: $program: no clear refusal"; exit 1; }
  echo "$(basename "${program%% *}"): refused: $(head -1 <<< "$out" | cut -c1-140)"
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
OMPI_COMM_WORLD_SIZE=1 "$minigpt" train --steps 2 --batch 2 --block 8 --layers 1 --heads 1 --embd 8 --eval-interval 2 \
  --eval-batches 1 --sample-tokens 2 --out "$dir/one" > /dev/null
echo "one process under a launcher: trained"
