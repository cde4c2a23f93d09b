// One threading model for the whole library: a small pool of worker threads that splits a loop
// into contiguous chunks, one per thread. BLAS runs single-threaded inside it; large matrix
// products are split by rows or columns across the pool instead (kernels/cpu/blas.h). Two pools (an
// OpenMP one and OpenBLAS's own) spinning against each other on a 2-core machine cost more than
// they give, so there is only this one.
//
//   ag::set_num_threads(2);
//   ag::parallel_for(rows, 64, [&](std::int64_t begin, std::int64_t end) {
//     for (std::int64_t r = begin; r < end; ++r) normalise_row(r);
//   });
//
// A chunk is never shorter than `grain` items (so small loops stay on the calling thread), the
// split depends only on n, grain and the thread count (so results are reproducible for a given
// thread count), and a parallel_for inside another runs serially on its caller.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace ag {

// Threads used by parallel_for, the caller included. Starts at the environment variable
// AG_NUM_THREADS when set, otherwise the number of CPUs this process may run on.
int get_num_threads();
// Replaces the pool with one of n threads (n >= 1). Not to be called from inside a parallel_for.
// If the system refuses some of the threads, the pool keeps those it could start, prints one
// line on stderr, and get_num_threads() says how many that is.
void set_num_threads(int n);
// True on any thread while it runs a chunk of a parallel_for.
bool in_parallel_region();

namespace detail {
using ChunkFn = void (*)(void* body, std::int64_t begin, std::int64_t end);
void run_chunks(std::int64_t n, int chunks, ChunkFn call, void* body);
}  // namespace detail

// How many chunks parallel_for(n, grain, ...) cuts [0, n) into: 1 when it runs serially.
inline std::int64_t chunk_count(std::int64_t n, std::int64_t grain) {
  std::int64_t chunks = n / std::max<std::int64_t>(grain, 1);
  int threads = get_num_threads();
  if (threads == 1 || chunks < 2 || in_parallel_region()) return 1;
  return std::min<std::int64_t>(chunks, threads);
}

// Calls body(begin, end) on disjoint ranges covering [0, n), in parallel when n is at least
// 2 * grain. Blocks until every chunk is done; an exception from any chunk is rethrown here.
template <class Body>
void parallel_for(std::int64_t n, std::int64_t grain, Body&& body) {
  if (n <= 0) return;
  std::int64_t chunks = chunk_count(n, grain);
  if (chunks == 1) {
    body(std::int64_t{0}, n);
    return;
  }
  using B = std::remove_reference_t<Body>;
  detail::run_chunks(
      n, static_cast<int>(chunks),
      [](void* b, std::int64_t begin, std::int64_t end) { (*static_cast<B*>(b))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// parallel_for for reductions: body(chunk, begin, end) also gets its chunk's index, from 0 to
// chunk_count(n, grain) - 1, so each chunk can sum into its own partial result. Adding the
// partials in chunk order afterwards makes the answer depend only on the thread count.
template <class Body>
void parallel_for_chunks(std::int64_t n, std::int64_t grain, Body&& body) {
  if (n <= 0) return;
  std::int64_t chunks = chunk_count(n, grain);
  parallel_for(chunks, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t c = first; c < last; ++c) body(c, n * c / chunks, n * (c + 1) / chunks);
  });
}

// Per-chunk partial sums for parallel_for_chunks: `chunks` rows of `n` values, each starting on
// its own 64-byte cache line, all zero. Two threads adding into neighbouring partials must never
// write the same line: a shared line moves between the cores on every write, which once made
// layer norm's backward twice as slow on two threads as on one.
template <class T>
class ChunkPartials {
 public:
  ChunkPartials(std::int64_t chunks, std::int64_t n)
      : chunks_(chunks),
        n_(n),
        stride_((n + kPerLine - 1) / kPerLine * kPerLine),
        storage_(static_cast<std::size_t>(chunks * stride_ + kPerLine), T(0)) {
    auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    first_ = storage_.data() + (kLine - address % kLine) % kLine / sizeof(T);
  }

  T* operator[](std::int64_t chunk) { return first_ + chunk * stride_; }

  // out[j] += the partials' j-th values, added in chunk order.
  void add_to(T* out) const {
    for (std::int64_t c = 0; c < chunks_; ++c)
      for (std::int64_t j = 0; j < n_; ++j) out[j] += first_[c * stride_ + j];
  }

 private:
  static constexpr std::int64_t kLine = 64;
  static constexpr std::int64_t kPerLine = kLine / static_cast<std::int64_t>(sizeof(T));
  std::int64_t chunks_, n_, stride_;
  std::vector<T> storage_;
  T* first_;
};

}  // namespace ag
