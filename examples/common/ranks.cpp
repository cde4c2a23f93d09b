#include "ranks.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "preflight.h"

namespace ag::examples {

std::string rank_prefix() {
  if (dist::world_size() == 1) return "";
  return fmt::format("rank {} of {}: ", dist::rank(), dist::world_size());
}

void check_grad_accum(std::int64_t grad_accum) {
  if (grad_accum < 1 || grad_accum > kMaxMicroBatches)
    refuse("--grad-accum must be from 1 to {}, got {}", kMaxMicroBatches, grad_accum);
  const std::int64_t n = dist::world_size();
  if (n > 1 && grad_accum != 1)
    refuse("--grad-accum {} under mpirun with {} processes: each process is one micro-batch of the step; to sum {} "
           "per step, run mpirun -np {} (or one process with --grad-accum {})",
           grad_accum, n, grad_accum * n, grad_accum * n, grad_accum * n);
}

void checks_on_every_rank(const std::string& program, const std::function<void()>& checks) {
  if (dist::world_size() == 1) {
    checks();
    return;
  }
  std::string refusal;
  try {
    checks();
  } catch (const Refused& e) {
    refusal = e.what();
  }
  std::vector<double> refused = dist::all_gather(refusal.empty() ? 0.0 : 1.0);
  auto first = std::find(refused.begin(), refused.end(), 1.0);
  if (first == refused.end()) return;
  if (first - refused.begin() == dist::rank()) fmt::print(stderr, "{}: {}{}\n", program, rank_prefix(), refusal);
  throw AgreedExit{2};
}

int finish_rank(int code) {
  if (dist::world_size() > 1 && code != 0 && code != 130) {
    std::fflush(stdout);
    dist::abort(code);
  }
  return code;
}

}  // namespace ag::examples
