// dist.h in a build without MPI: a world of one process, where every collective is the identity.
#include <cstdlib>

#include <fmt/format.h>

#include "dist.h"
#include "launch.h"

namespace ag::dist {

bool built_with_mpi() { return false; }

Environment::Environment(int&, char**&) {
  if (launcher_world_size() > 1)
    throw std::runtime_error(fmt::format(
        "started as one of {} MPI processes, but this build of attograd has no MPI (it was configured without "
        "Boost.MPI and Open MPI): each process would train alone. Install libboost-mpi1.81-dev, libopenmpi-dev and "
        "openmpi-bin (scripts/setup.sh does) and rebuild",
        launcher_world_size()));
}
Environment::~Environment() = default;

int rank() { return 0; }
int world_size() { return 1; }
void broadcast(const std::vector<Tensor>&, int) {}
void sum_in_rank_order(void*, std::int64_t, DType) {}
void sum_in_rank_order(std::vector<double>&) {}
std::vector<double> all_gather(double value) { return {value}; }
std::vector<std::uint64_t> all_gather(std::uint64_t value) { return {value}; }
bool any(bool value) { return value; }
void check_same(const std::string&, const std::string&) {}
void check_in_sync(const std::string&, const std::vector<Tensor>&) {}
std::int64_t bytes_sent() { return 0; }
void abort(int code) { std::exit(code); }
bool detail::background_communication() { return false; }

}  // namespace ag::dist
