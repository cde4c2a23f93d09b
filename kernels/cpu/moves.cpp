// The cpu backend's moves (kernels/table.h): slice, cat and their backward as one memcpy per run
// of adjacent rows, permute as an odometer over y's index that copies elements of their own
// width, and convert (one loop per pair of types), arange and fill split across the pool. The naive
// twins are in kernels/naive/moves.cpp.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../../runtime/parallel.h"
#include "kernels.h"

namespace ag::backends::cpu {

void copy_along(const CopySizes& n, const void* src, void* dst) {
  if (n.count == 0 || n.outer == 0 || n.inner == 0) return;  // nothing to move (and no null pointer to memcpy)
  char* out = static_cast<char*>(dst);
  const char* in = static_cast<const char*>(src);
  auto at = [&](std::int64_t dim_n, std::int64_t o, std::int64_t k) { return (o * dim_n + k) * n.inner * n.element; };
  // With both steps 1 the rows of one outer index are adjacent, so each outer index is one
  // memcpy; a slice along the last dim with a step is otherwise a copy per element.
  const bool runs = n.dst_step == 1 && n.src_step == 1;
  const std::int64_t bytes = (runs ? n.count : 1) * n.inner * n.element;
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t j = 0; j < (runs ? 1 : n.count); ++j)
      std::memcpy(out + at(n.dst_n, o, n.dst_begin + j * n.dst_step), in + at(n.src_n, o, n.src_begin + j * n.src_step),
                  static_cast<std::size_t>(bytes));
}

// One memcpy per picked row of `inner` elements, the rows split across the pool.
void select_along(const DimSizes& n, std::int64_t m, std::int64_t element, const void* x, const std::int64_t* index,
                  void* y) {
  const std::int64_t row = n.inner * element;  // bytes
  if (row == 0) return;
  const char* in = static_cast<const char*>(x);
  char* out = static_cast<char*>(y);
  parallel_for(n.outer * m, std::max<std::int64_t>(1, (1 << 17) / row), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r) {
      std::int64_t o = r / m, j = r % m;
      std::memcpy(out + r * row, in + (o * n.n + index[j]) * row, static_cast<std::size_t>(row));
    }
  });
}

namespace {

// copy(o, from) for every element o of y, `from` its element of x: an odometer over y's index
// that tracks x's offset.
template <class Copy>
void odometer(const PermuteSizes& n, Copy copy) {
  std::int64_t total = 1;
  for (std::size_t d = 0; d < n.rank; ++d) total *= n.shape[d];
  std::vector<std::int64_t> counter(n.rank, 0);
  std::int64_t from = 0;
  for (std::int64_t o = 0; o < total; ++o) {
    copy(o, from);
    for (std::size_t d = n.rank; d-- > 0;) {
      from += n.x_strides[d];
      if (++counter[d] < n.shape[d]) break;
      from -= n.x_strides[d] * n.shape[d];
      counter[d] = 0;
    }
  }
}

// Elements copied as W, a type of their width.
template <class W>
void permute_as(const PermuteSizes& n, const void* x, void* y) {
  const W* px = static_cast<const W*>(x);
  W* py = static_cast<W*>(y);
  odometer(n, [&](std::int64_t o, std::int64_t from) { py[o] = px[from]; });
}

}  // namespace

void permute(const PermuteSizes& n, const void* x, void* y) {
  for (std::size_t d = 0; d < n.rank; ++d)
    if (n.shape[d] == 0) return;
  switch (n.element) {
    case 1: return permute_as<std::uint8_t>(n, x, y);
    case 2: return permute_as<std::uint16_t>(n, x, y);
    case 4: return permute_as<std::uint32_t>(n, x, y);
    case 8: return permute_as<std::uint64_t>(n, x, y);
    default:  // no dtype has another width; moved as bytes all the same
      odometer(n, [&](std::int64_t o, std::int64_t from) {
        std::memcpy(static_cast<char*>(y) + o * n.element, static_cast<const char*>(x) + from * n.element,
                    static_cast<std::size_t>(n.element));
      });
  }
}

// Whether x fits the type D: only a float going to int64 may not (a NaN, an infinity, or a number
// outside [-2^63, 2^63), whose conversion C++ leaves undefined).
template <class D, class S>
bool fits(S x) {
  if constexpr (std::is_same_v<D, std::int64_t> && std::is_floating_point_v<S>)
    return x >= S(-0x1p63) && x < S(0x1p63);
  else
    return true;
}

std::int64_t convert(Scalar from, Scalar to, std::int64_t n, const void* src, void* dst) {
  std::atomic<std::int64_t> first_bad{n};  // the least index that does not fit, over the chunks
  with_element(from, [&](auto s) {
    with_element(to, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
      parallel_for(n, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
        std::int64_t bad = n;
        for (std::int64_t i = begin; i < end; ++i) {
          if (fits<D>(in[i])) {
            out[i] = static_cast<D>(in[i]);
          } else {
            out[i] = D(0);
            bad = std::min(bad, i);
          }
        }
        for (std::int64_t seen = first_bad.load(); bad < seen && !first_bad.compare_exchange_weak(seen, bad);) {
        }
      });
    });
  });
  return first_bad.load() == n ? -1 : first_bad.load();
}

void arange(Scalar to, double start, double step, std::int64_t n, void* dst) {
  with_element(to, [&](auto d) {
    using D = decltype(d);
    D* out = static_cast<D*>(dst);
    parallel_for(n, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = static_cast<D>(start + static_cast<double>(i) * step);
    });
  });
}

void fill(Scalar to, double value, std::int64_t n, void* dst) {
  with_element(to, [&](auto d) {
    using D = decltype(d);
    D* out = static_cast<D*>(dst);
    const D v = static_cast<D>(value);
    parallel_for(n, 1 << 16, [&](std::int64_t begin, std::int64_t end) { std::fill(out + begin, out + end, v); });
  });
}

}  // namespace ag::backends::cpu
