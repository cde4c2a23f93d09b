#include "kernels.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>

#include "../autograd/error.h"

namespace ag {

namespace {
std::atomic<Kernels> g_kernels{Kernels::Fast};
std::atomic<std::uint32_t> g_reference_ops{0};  // bit i: KernelOp i runs its reference kernel

constexpr const char* kOpNames[] = {
    "linear",      "linear_gelu",   "gelu", "layer_norm", "embedding", "cross_entropy", "scaled_dot_product_attention",
    "adam_update", "clip_grad_norm"};

std::mutex g_counts_mutex;
std::map<std::string, std::int64_t>& counts() {
  static std::map<std::string, std::int64_t> c;
  return c;
}
}  // namespace

Kernels kernels() { return g_kernels.load(std::memory_order_relaxed); }
void set_kernels(Kernels k) { g_kernels.store(k, std::memory_order_relaxed); }

const char* kernel_op_name(KernelOp op) { return kOpNames[static_cast<int>(op)]; }

void set_reference_ops(const std::vector<std::string>& names) {
  std::uint32_t bits = 0;
  for (const std::string& name : names) {
    auto it = std::find(std::begin(kOpNames), std::end(kOpNames), name);
    if (it == std::end(kOpNames)) {
      std::string known;
      for (const char* n : kOpNames) known += known.empty() ? n : std::string(", ") + n;
      throw_invalid("kernels", "no op '{}' has a reference kernel to switch to; the ops are {}", name, known);
    }
    bits |= 1u << (it - std::begin(kOpNames));
  }
  g_reference_ops.store(bits, std::memory_order_relaxed);
}

bool use_reference(KernelOp op) {
  return kernels() == Kernels::Reference ||
         (g_reference_ops.load(std::memory_order_relaxed) >> static_cast<int>(op) & 1u) != 0;
}

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
