#!/usr/bin/env bash
# Runs the distributed/ test program under mpirun with 2, 3 and 4 processes (oversubscribed on a
# small machine). Skipped (77) without mpirun or in a build without MPI.
# Usage: mpi_test.sh TEST_PROGRAM HAVE_MPI
set -euo pipefail
program=$1
if [ "$2" != true ] || ! command -v mpirun > /dev/null; then
  echo "skipped: this build has no MPI, or mpirun is not installed"
  exit 77
fi
export AG_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers often forbid cross-memory attach
mpi=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
for n in 2 3 4; do
  echo "=== $n processes"
  # No colours: mpirun gives the processes a terminal, and the escapes would reach the test log.
  timeout 240 "${mpi[@]}" -np "$n" "$program" --gtest_brief=1 --gtest_color=no
done
