#include "kernels.h"

#include <atomic>
#include <mutex>

#include "../autograd/error.h"

namespace ag {

namespace {
std::atomic<Kernels> g_kernels{Kernels::Fast};

std::mutex g_counts_mutex;
std::map<std::string, std::int64_t>& counts() {
  static std::map<std::string, std::int64_t> c;
  return c;
}
}  // namespace

Kernels kernels() { return g_kernels.load(std::memory_order_relaxed); }
void set_kernels(Kernels k) { g_kernels.store(k, std::memory_order_relaxed); }

const char* kernels_name(Kernels k) { return k == Kernels::Fast ? "fast" : "reference"; }

Kernels parse_kernels(std::string_view name) {
  if (name == "fast") return Kernels::Fast;
  if (name == "reference") return Kernels::Reference;
  throw_invalid("kernels", "unknown kernels '{}': expected 'fast' or 'reference'", name);
}

namespace reference {

std::map<std::string, std::int64_t> call_counts() {
  std::lock_guard lock(g_counts_mutex);
  return counts();
}

void reset_call_counts() {
  std::lock_guard lock(g_counts_mutex);
  counts().clear();
}

void count_call(const char* op) {
  std::lock_guard lock(g_counts_mutex);
  ++counts()[op];
}

}  // namespace reference
}  // namespace ag
