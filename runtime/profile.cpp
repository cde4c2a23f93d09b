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

}  // namespace

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
