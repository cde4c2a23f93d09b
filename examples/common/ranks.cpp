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
