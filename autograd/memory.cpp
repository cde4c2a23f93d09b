// The live-object counters of memory.h. Atomic: a tensor or a node may be made or destroyed on
// any thread.
#include "memory.h"

#include <atomic>

#include "../runtime/allocator.h"

namespace ag {

namespace {
std::atomic<std::int64_t> g_live_storages{0};
std::atomic<std::int64_t> g_live_bytes{0};
std::atomic<std::int64_t> g_peak_bytes{0};
std::atomic<std::int64_t> g_live_tensors{0};
std::atomic<std::int64_t> g_live_nodes{0};
}  // namespace

MemoryStats memory_stats() {
  return {g_live_storages.load(), g_live_bytes.load(), g_peak_bytes.load(),
          g_live_tensors.load(), g_live_nodes.load(), cached_bytes()};
}

void reset_peak_bytes() { g_peak_bytes = g_live_bytes.load(); }

void detail::storage_allocated(std::size_t nbytes) {
  ++g_live_storages;
  auto live = g_live_bytes += static_cast<std::int64_t>(nbytes);
  auto peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
}

void detail::storage_freed(std::size_t nbytes) {
  --g_live_storages;
  g_live_bytes -= static_cast<std::int64_t>(nbytes);
}

void detail::tensor_created() { ++g_live_tensors; }
void detail::tensor_destroyed() { --g_live_tensors; }
void detail::node_created() { ++g_live_nodes; }
void detail::node_destroyed() { --g_live_nodes; }

}  // namespace ag
