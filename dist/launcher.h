// What both builds of dist/ share: how an MPI launcher shows itself in the environment, and the
// helpers behind check_same and fingerprint. Internal to dist/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ag::dist {

// True when an MPI launcher (Open MPI's mpirun, or a PMI-based one such as srun or MPICH's
// mpiexec) started this process.
bool launched_by_mpi();
// The number of processes the launcher started, or 1 when there is none.
int launcher_world_size();

namespace detail {
// Whether a second thread may call MPI while the main thread computes (MPI gave at least
// MPI_THREAD_SERIALIZED): DataParallel then reduces during backward.
bool background_communication();
std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t hash = 14695981039346656037ull);
// "`what` differs between ranks: rank 0 has 'a', rank r has 'b'; ...", naming the first rank
// that differs from rank 0 and the first line where it does, from every rank's text in rank
// order.
std::string describe_difference(const std::string& what, const std::vector<std::string>& texts);
}  // namespace detail

}  // namespace ag::dist
