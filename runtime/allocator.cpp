#include "allocator.h"
#include "profile.h"

#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace ag {

namespace {

constexpr std::size_t kAlign = 64;

// aligned_alloc wants a size that is a multiple of the alignment, and never 0. Rounding a size
// within kAlign of SIZE_MAX up would wrap to a tiny block, so such a size is refused.
std::size_t rounded(std::size_t nbytes) {
  if (nbytes > std::numeric_limits<std::size_t>::max() - kAlign)
    throw std::length_error("allocate_block: " + std::to_string(nbytes) + " bytes is more than any block can hold");
  return nbytes == 0 ? kAlign : (nbytes + kAlign - 1) / kAlign * kAlign;
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;  // by rounded size
  std::size_t bytes = 0;
  const std::size_t limit = std::size_t{1} << 30;  // 1 GiB
};

Cache& cache() {
  static auto* c = new Cache;  // never destroyed: tensors may be freed during static destruction
  return *c;
}

}  // namespace

void* allocate_block(std::size_t nbytes) {
  profile::Scope scope(profile::Family::Allocation);
  std::size_t size = rounded(nbytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      c.bytes -= size;
      return block;
    }
  }
  void* block = std::aligned_alloc(kAlign, size);
  if (block == nullptr) {
    empty_cache();  // the cache may be what is holding the memory
    block = std::aligned_alloc(kAlign, size);
    if (block == nullptr) throw std::bad_alloc();
  }
  return block;
}

void free_block(void* block, std::size_t nbytes) {
  profile::Scope scope(profile::Family::Allocation);
  std::size_t size = rounded(nbytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    if (c.bytes + size <= c.limit) {
      c.free_blocks[size].push_back(block);
      c.bytes += size;
      return;
    }
  }
  std::free(block);
}

std::int64_t cached_bytes() {
  std::lock_guard lock(cache().mutex);
  return static_cast<std::int64_t>(cache().bytes);
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  for (auto& [_, blocks] : c.free_blocks)
    for (void* b : blocks) std::free(b);
  c.free_blocks.clear();
  c.bytes = 0;
}

}  // namespace ag
