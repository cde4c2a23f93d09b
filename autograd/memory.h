// Live-object counters, for tests and benchmarks that check memory stays flat: after a
// training step has run once, every later step must end with the same numbers. The counters
// and their updates are in memory.cpp; the objects counted call the updates from their
// constructors and destructors (Storage and TensorImpl in tensor.cpp, Node in node.cpp).
// memory_stats() also reports the block cache's size (cached_bytes), which the allocator keeps
// (runtime/allocator.h): not a live-object count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ag {

struct MemoryStats {
  std::int64_t live_storages = 0;  // data buffers
  std::int64_t live_bytes = 0;     // bytes in those buffers
  std::int64_t peak_bytes = 0;     // the most live_bytes has been since start (or reset)
  std::int64_t live_tensors = 0;   // TensorImpl objects
  std::int64_t live_nodes = 0;     // graph nodes
  std::int64_t cached_bytes = 0;   // freed blocks kept for reuse (runtime/allocator.h)
};

MemoryStats memory_stats();
void reset_peak_bytes();

namespace detail {
// Called only by the objects counted, once when each is made and once when it is destroyed.
void storage_allocated(std::size_t nbytes);
void storage_freed(std::size_t nbytes);
void tensor_created();
void tensor_destroyed();
void node_created();
void node_destroyed();
}  // namespace detail

}  // namespace ag
