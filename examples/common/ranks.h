// What the example programs do the same way under mpirun (docs/distributed.md): say which rank
// speaks, stop every rank when one refuses the run, and never leave a rank waiting for one that
// has gone.
#pragma once

#include <attograd/attograd.h>

#include <functional>
#include <string>

namespace ag::examples {

// "rank 1 of 2: " under mpirun, "" otherwise: the start of an error message.
std::string rank_prefix();

// Thrown on the ranks that stop because the ranks agreed to (another one refused the run and
// said why): the program exits with `code`, quietly.
struct AgreedExit {
  int code;
};

// The most micro-batches a step may have: a step that large is better a longer run.
constexpr std::int64_t kMaxMicroBatches = 1 << 16;
// --grad-accum: from 1 to kMaxMicroBatches, and 1 under mpirun, where each process is one
// micro-batch of the step (partial sums inside each process would change the order of the
// additions: docs/distributed.md). Refused otherwise, saying what to run instead.
void check_grad_accum(std::int64_t grad_accum);

// Runs `checks` (every rank its own options, input and, on rank 0, output). One process: a
// refusal propagates as it is. Under mpirun the ranks then agree: if any refused, the first
// that did prints "`program`: rank r of N: why" and every rank throws AgreedExit{2}, so none is
// left waiting in a collective for one that stopped.
void checks_on_every_rank(const std::string& program, const std::function<void()>& checks);

// The end of main under mpirun: exit status `code` on this rank. 0 and 130 (a stop all ranks
// agreed on) return; anything else ends every rank at once (MPI_Abort), since the others may
// be waiting for this one. One process: returns `code`.
int finish_rank(int code);

}  // namespace ag::examples
