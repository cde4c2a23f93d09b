// The kernel switch (kernels.h), its reader for the router (route.h), and the reference
// kernels' call counts (kernel_ops.h) with the tests' hook on them (call_counts.h).
#include "kernels.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <stdexcept>

#include "../autograd/context.h"
#include "../kernels/naive_calls.h"
#include "../runtime/error.h"
#include "call_counts.h"
#include "kernel_ops.h"
#include "route.h"

namespace ag {

namespace {
#define AG_KERNEL_OP_NAME(id, name, family) name,
constexpr const char* kOpNames[] = {AG_KERNEL_OPS(AG_KERNEL_OP_NAME)};
#undef AG_KERNEL_OP_NAME
#define AG_KERNEL_OP_FAMILY(id, name, family) profile::Family::family,
constexpr profile::Family kOpFamilies[] = {AG_KERNEL_OPS(AG_KERNEL_OP_FAMILY)};
#undef AG_KERNEL_OP_FAMILY
static_assert(std::size(kOpNames) <= 32, "ThreadContext::reference_ops has one bit per op");
static_assert(static_cast<int>(Kernels::Fast) == 0, "a new thread's ThreadContext::kernels, 0, is Fast");
static_assert(static_cast<int>(Kernels::Naive) == detail::kNaiveKernels, "current_backend (autograd/context.cpp)");

std::array<std::atomic<std::int64_t>, std::size(kOpNames)> g_calls{};  // by KernelOp, while counting
// Whether a testing::CountCalls exists: one at a time (call_counts.h).
std::atomic<bool> g_counter_alive{false};
}  // namespace

Kernels kernels() { return static_cast<Kernels>(detail::thread_context().kernels); }
void set_kernels(Kernels k) { detail::thread_context().kernels = static_cast<std::uint8_t>(k); }

const char* kernel_op_name(KernelOp op) { return kOpNames[static_cast<int>(op)]; }
profile::Family kernel_op_family(KernelOp op) { return kOpFamilies[static_cast<int>(op)]; }

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
  detail::thread_context().reference_ops = bits;
}

bool use_reference(KernelOp op) {
  const detail::ThreadContext& context = detail::thread_context();
  return static_cast<Kernels>(context.kernels) == Kernels::Reference ||
         (context.reference_ops >> static_cast<int>(op) & 1u) != 0;
}

const char* kernels_name(Kernels k) {
  switch (k) {
    case Kernels::Fast: return "fast";
    case Kernels::Reference: return "reference";
    case Kernels::Naive: return "naive";
  }
  return "unknown";
}

Kernels parse_kernels(std::string_view name) {
  for (Kernels k : {Kernels::Fast, Kernels::Reference, Kernels::Naive})
    if (name == kernels_name(k)) return k;
  throw_invalid("kernels", "unknown kernels '{}': expected 'fast', 'reference' or 'naive'", name);
}

namespace detail {

std::atomic<bool> g_count_reference_calls{false};

void add_reference_call(KernelOp op) { g_calls[static_cast<std::size_t>(op)].fetch_add(1, std::memory_order_relaxed); }

}  // namespace detail

namespace testing {

CountCalls::CountCalls() {
  if (g_counter_alive.exchange(true))
    throw std::logic_error("CountCalls: another one is alive; the counts are the whole process's, one at a time");
  reset();
  backends::naive::set_counting(true);
  detail::g_count_reference_calls.store(true, std::memory_order_relaxed);
}

CountCalls::~CountCalls() {
  detail::g_count_reference_calls.store(false, std::memory_order_relaxed);
  backends::naive::set_counting(false);
  g_counter_alive.store(false);
}

std::map<std::string, std::int64_t> CountCalls::reference() const {
  std::map<std::string, std::int64_t> counts;
  for (std::size_t i = 0; i < g_calls.size(); ++i)
    if (std::int64_t n = g_calls[i].load(std::memory_order_relaxed)) counts[kOpNames[i]] = n;
  return counts;
}

std::int64_t CountCalls::naive() const { return backends::naive::calls(); }

void CountCalls::reset() {
  for (std::atomic<std::int64_t>& n : g_calls) n.store(0, std::memory_order_relaxed);
  backends::naive::reset_calls();
}

}  // namespace testing
}  // namespace ag
