// Several processes training one model: the process group mpirun starts, and the few
// collective operations data-parallel training needs (docs/distributed.md).
//
//   int main(int argc, char** argv) {
//     ag::dist::Environment mpi(argc, argv);   // a world of one without mpirun
//     ...
//     ag::dist::broadcast(model.parameters());  // every rank starts from rank 0's weights
//
// Every function below that says "collective" must be called by every process, in the same
// order; one rank that skips a call leaves the others waiting. Without mpirun, or in a build
// without MPI (meson -Dmpi=disabled), the world has one process and every collective returns
// at once with this process's own values.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../autograd/tensor.h"

namespace ag::dist {

// Whether this build of attograd can run on several processes (it found Boost.MPI and MPI).
bool built_with_mpi();

// Starts MPI when mpirun (or another MPI launcher) started this process, and stops it when it
// goes out of scope; otherwise does nothing. One per program, first thing in main. A
// process launched as one of several by a build without MPI is refused (std::runtime_error):
// each would train alone, all writing the same files.
class Environment {
 public:
  Environment(int& argc, char**& argv);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
};

// This process's place in the world: rank 0 .. world_size() - 1. Rank 0 is the one that writes
// files and prints progress.
int rank();
int world_size();
inline bool is_main_process() { return rank() == 0; }

// The ranks disagree about something that must be equal everywhere (the configuration, the
// corpus, the parameters). Thrown on every rank at once, with the same message, so each can
// stop cleanly: nobody is left waiting.
class Mismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --- collectives ---------------------------------------------------------------------------

// Copies every tensor's data from `root` into the same tensor on every other rank (in place:
// the same shapes and dtypes everywhere, checked first).
void broadcast(const std::vector<Tensor>& tensors, int root = 0);

// Replaces `values` (n elements of a floating dtype, the same n on every rank) on every rank
// by their sum over ranks, added in rank order: ((x_0 + x_1) + x_2) + ..., each element in its
// own dtype. MPI's own allreduce promises no order, and float addition is not associative, so
// this fixed order is what makes N processes equal one process summing N micro-batches
// (docs/distributed.md, "A fixed order"). Each rank sums 1/N of the elements and sends its
// part to the others: 2 (N - 1) / N of the buffer sent per rank.
void sum_in_rank_order(void* values, std::int64_t n, DType dtype);
// The same for doubles: per-batch losses, say.
void sum_in_rank_order(std::vector<double>& values);

// Every rank's value, in rank order.
std::vector<double> all_gather(double value);
std::vector<std::uint64_t> all_gather(std::uint64_t value);
// True on every rank if it is true on any.
bool any(bool value);

// Checks that `description` (text: one setting per line, say) is the same on every rank;
// otherwise throws Mismatch on every rank, naming `what`, the first rank that differs from
// rank 0 and the first line where they differ.
void check_same(const std::string& what, const std::string& description);

// A 64-bit fingerprint (FNV-1a) of the tensors' bytes: equal for bit-identical tensors.
std::uint64_t fingerprint(const std::vector<Tensor>& tensors);
std::uint64_t fingerprint(const std::string& bytes);
// Throws Mismatch on every rank when the tensors' fingerprints are not the same everywhere,
// naming `what` and the ranks that differ from rank 0.
void check_in_sync(const std::string& what, const std::vector<Tensor>& tensors);

// Bytes this process has sent to other ranks in sum_in_rank_order since it started: what
// DataParallel's statistics count (the gradients, and anything else summed that way, such as
// a loss). The collectives (broadcast, all_gather, any,
// the checks) are not counted; how many bytes they send is up to MPI's algorithms.
std::int64_t bytes_sent();

// Stops every process of the world at once with exit status `code` (MPI_Abort); after a failure
// on one rank, so that the others do not wait for it. Just exits in a world of one.
[[noreturn]] void abort(int code);

}  // namespace ag::dist
