// Run by thread_limit_test.sh: starts the pool from AG_NUM_THREADS, runs one parallel_for over
// every index, and prints how many threads the pool has; exits 1 if any index was visited other
// than once.
#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "runtime/parallel.h"

int main() {
  std::vector<int> visits(1 << 20, 0);  // before the pool: its threads may leave no address space
  int threads = ag::get_num_threads();
  ag::parallel_for(static_cast<std::int64_t>(visits.size()), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) ++visits[static_cast<std::size_t>(i)];
  });
  for (int v : visits)
    if (v != 1) return 1;
  fmt::print("threads {}\n", threads);
  return 0;
}
