// Moving elements as plain loops (kernels/table.h); the fast twins are in kernels/cpu/moves.cpp.
// Elements are moved one at a time as `element` bytes, whatever their dtype; convert moves each
// into another type, and arange and fill make them.
#include <cstring>
#include <type_traits>
#include <vector>

#include "naive.h"

namespace ag::backends::naive {

void copy_along(const CopySizes& n, const void* src, void* dst) {
  count_call();
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t j = 0; j < n.count; ++j)
      for (std::int64_t i = 0; i < n.inner; ++i) {
        std::int64_t to = (o * n.dst_n + n.dst_begin + j * n.dst_step) * n.inner + i;
        std::int64_t from = (o * n.src_n + n.src_begin + j * n.src_step) * n.inner + i;
        std::memcpy(out + to * n.element, in + from * n.element, static_cast<std::size_t>(n.element));
      }
}

void select_along(const DimSizes& n, std::int64_t m, std::int64_t element, const void* x, const std::int64_t* index,
                  void* y) {
  count_call();
  const char* in = static_cast<const char*>(x);
  char* out = static_cast<char*>(y);
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t j = 0; j < m; ++j)
      for (std::int64_t i = 0; i < n.inner; ++i) {
        std::int64_t to = (o * m + j) * n.inner + i, from = (o * n.n + index[j]) * n.inner + i;
        std::memcpy(out + to * element, in + from * element, static_cast<std::size_t>(element));
      }
}

void permute(const PermuteSizes& n, const void* x, void* y) {
  count_call();
  std::int64_t total = 1;
  for (std::size_t d = 0; d < n.rank; ++d) total *= n.shape[d];
  const char* in = static_cast<const char*>(x);
  char* out = static_cast<char*>(y);
  std::vector<std::int64_t> coordinate(n.rank);
  for (std::int64_t o = 0; o < total; ++o) {
    // o's coordinates in y, the last dim fastest; x's element is where they lead with x's strides
    std::int64_t rest = o, from = 0;
    for (std::size_t d = n.rank; d-- > 0;) {
      coordinate[d] = rest % n.shape[d];
      rest /= n.shape[d];
    }
    for (std::size_t d = 0; d < n.rank; ++d) from += coordinate[d] * n.x_strides[d];
    std::memcpy(out + o * n.element, in + from * n.element, static_cast<std::size_t>(n.element));
  }
}

namespace {

// dst[i] = v, as the type `to` names; false, with 0 stored, for a float int64 cannot hold (a
// NaN, an infinity, a number outside [-2^63, 2^63): C++ leaves its conversion undefined).
template <class V>
bool store(Scalar to, void* dst, std::int64_t i, V v) {
  switch (to) {
    case Scalar::Float32: static_cast<float*>(dst)[i] = static_cast<float>(v); break;
    case Scalar::Float64: static_cast<double*>(dst)[i] = static_cast<double>(v); break;
    case Scalar::Int64:
      if constexpr (std::is_floating_point_v<V>) {
        if (!(v >= V(-0x1p63) && v < V(0x1p63))) {
          static_cast<std::int64_t*>(dst)[i] = 0;
          return false;
        }
      }
      static_cast<std::int64_t*>(dst)[i] = static_cast<std::int64_t>(v);
      break;
    case Scalar::Bool: static_cast<bool*>(dst)[i] = static_cast<bool>(v); break;
  }
  return true;
}

}  // namespace

std::int64_t convert(Scalar from, Scalar to, std::int64_t n, const void* src, void* dst) {
  count_call();
  std::int64_t first_bad = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    // element i read as its own type, then written as the other
    bool fits = true;
    switch (from) {
      case Scalar::Float32: fits = store(to, dst, i, static_cast<const float*>(src)[i]); break;
      case Scalar::Float64: fits = store(to, dst, i, static_cast<const double*>(src)[i]); break;
      case Scalar::Int64: fits = store(to, dst, i, static_cast<const std::int64_t*>(src)[i]); break;
      case Scalar::Bool: fits = store(to, dst, i, static_cast<const bool*>(src)[i]); break;
    }
    if (!fits && first_bad < 0) first_bad = i;
  }
  return first_bad;
}

void arange(Scalar to, double start, double step, std::int64_t n, void* dst) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) store(to, dst, i, start + static_cast<double>(i) * step);
}

void fill(Scalar to, double value, std::int64_t n, void* dst) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) store(to, dst, i, value);
}

}  // namespace ag::backends::naive
