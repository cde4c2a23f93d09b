// Where tensor memory comes from: a cache of freed blocks, reused by exact size.
//
// A training step allocates the same buffers, of the same sizes, every step. Returning them to
// the system and asking again costs page faults (a fresh page is over 10 us on these
// machines); keeping freed blocks for the next request of the same size makes the steady
// state allocation-free. The cache holds at most 1 GiB; past that, blocks go
// back to the system.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ag {

// 64-byte aligned; `nbytes` may be 0.
void* allocate_block(std::size_t nbytes);
void free_block(void* block, std::size_t nbytes);

std::int64_t cached_bytes();
// Returns every cached block to the system.
void empty_cache();

// n values of T from the block cache, not yet written, given back when the buffer goes: a
// kernel's scratch the size of an activation (linear_gelu's dh), which a training step asks for
// at the same size every step.
template <class T>
class BlockBuffer {
 public:
  explicit BlockBuffer(std::int64_t n)
      : n_(n), data_(static_cast<T*>(allocate_block(static_cast<std::size_t>(n) * sizeof(T)))) {}
  ~BlockBuffer() { free_block(data_, static_cast<std::size_t>(n_) * sizeof(T)); }
  BlockBuffer(const BlockBuffer&) = delete;
  BlockBuffer& operator=(const BlockBuffer&) = delete;
  T* data() const { return data_; }

 private:
  std::int64_t n_;
  T* data_;
};

}  // namespace ag
