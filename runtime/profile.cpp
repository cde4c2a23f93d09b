// The step's time by family of work (profile.h): a stack of open scopes on the recording thread,
// the family on top charged for the time since the stack last changed.
#include "profile.h"

#include <algorithm>
#include <array>
#include <vector>

namespace ag::profile {

namespace detail {
std::atomic<bool> g_on{false};
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

struct Recorder {
  bool recording = false;  // true on the thread that called start(), until stop()
  Totals totals;
  std::vector<Family> open;  // the open scopes, innermost last
  Clock::time_point since;   // when the innermost scope was last charged
  Clock::time_point started;

  void charge(Clock::time_point now) {
    if (!open.empty()) totals.seconds[static_cast<int>(open.back())] += std::chrono::duration<double>(now - since).count();
    since = now;
  }
};

thread_local Recorder t_recorder;

struct Named {
  std::string_view prefix;
  Family family;
};

// By the start of the op's node name, so that "layer_norm_backward" goes with "layer_norm".
// Longer prefixes first where one starts another ("linear_gelu" is linear's: a product and
// the GELU around it, charged as elementwise outside the product).
constexpr Named kNamed[] = {
    {"matmul", Family::Products},
    {"linear", Family::Elementwise},
    {"gelu", Family::Elementwise},
    {"swiglu", Family::Elementwise},
    {"add", Family::Elementwise},
    {"sub", Family::Elementwise},
    {"mul", Family::Elementwise},
    {"div", Family::Elementwise},
    {"neg", Family::Elementwise},
    {"pow", Family::Elementwise},
    {"exp", Family::Elementwise},
    {"log_softmax", Family::Softmax},
    {"log", Family::Elementwise},
    {"sqrt", Family::Elementwise},
    {"tanh", Family::Elementwise},
    {"sigmoid", Family::Elementwise},
    {"relu", Family::Elementwise},
    {"erfc", Family::Elementwise},
    {"dropout", Family::Elementwise},
    {"masked_fill", Family::Elementwise},
    {"broadcast_to", Family::Elementwise},
    {"layer_norm", Family::Normalisation},
    {"rms_norm", Family::Normalisation},
    {"softmax", Family::Softmax},
    {"cross_entropy", Family::Softmax},
    {"scaled_dot_product_attention", Family::Softmax},
    {"attention", Family::Softmax},
};

}  // namespace

Family family_of(std::string_view op) {
  for (const Named& n : kNamed)
    if (op.starts_with(n.prefix)) return n.family;
  return Family::Reduction;  // sums, means, max, copies, embedding, and what is not named above
}

std::string_view name(Family f) {
  static constexpr std::array<std::string_view, kFamilies> kNames{
      "products", "elementwise", "normalisation", "softmax_attention", "rounding",
      "reductions_copies", "optimizer", "engine", "allocation", "pool"};
  return kNames[static_cast<std::size_t>(f)];
}

void start() {
  Recorder& r = t_recorder;
  r = Recorder{};
  r.open.reserve(32);
  r.recording = true;
  r.started = r.since = Clock::now();
  detail::g_on.store(true, std::memory_order_relaxed);
}

Totals stop() {
  Recorder& r = t_recorder;
  detail::g_on.store(false, std::memory_order_relaxed);
  if (!r.recording) return {};
  Clock::time_point now = Clock::now();
  r.charge(now);
  r.totals.wall = std::chrono::duration<double>(now - r.started).count();
  r.recording = false;
  r.open.clear();
  return r.totals;
}

void detail::enter(Family f) {
  Recorder& r = t_recorder;
  if (!r.recording) return;  // another thread (a worker), or not started here
  r.charge(Clock::now());
  r.open.push_back(f);
  ++r.totals.entries[static_cast<int>(f)];
}

void detail::leave() {
  Recorder& r = t_recorder;
  if (!r.recording || r.open.empty()) return;  // a scope opened before start()
  r.charge(Clock::now());
  r.open.pop_back();
}

}  // namespace ag::profile
