// The cpu backend's loops along one dim of the [outer, n, inner] view (kernels/table.h): sum (and
// the exact sum of bool and int64 elements), max,
// the gathers of max's winners, softmax, and masked_fill. The math of each is at the top of
// ops/reduce.cpp, ops/softmax.cpp and ops/masking.cpp; the naive twins are in
// kernels/naive/along_dim.cpp.
//
// Every output lane (o, i) reads and writes its own elements only, so the lanes are split across
// threads once there are enough of them, and each lane's result is the same bits whatever the
// thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "../../runtime/parallel.h"
#include "kernels.h"

namespace ag::backends::cpu {

namespace {

// About this many elements per chunk of lanes, as for the elementwise loops (broadcast.cpp).
constexpr std::int64_t kElementsPerChunk = 1 << 15;

// body(o, i) for every lane of n, the lanes split across threads.
template <class Body>
void each_lane(const DimSizes& n, Body body) {
  std::int64_t lanes = n.outer * n.inner;
  std::int64_t grain = std::max<std::int64_t>(1, kElementsPerChunk / std::max<std::int64_t>(n.n, 1));
  parallel_for(lanes, grain, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t lane = first; lane < last; ++lane) body(lane / n.inner, lane % n.inner);
  });
}

std::int64_t at(const DimSizes& n, std::int64_t o, std::int64_t k, std::int64_t i) {
  return (o * n.n + k) * n.inner + i;
}

// A 128-bit integer (GCC's and Clang's), for int64 sums that must not wrap.
__extension__ typedef __int128 Wide;

}  // namespace

template <class T>
void sum_dim(const DimSizes& n, const T* x, T* y) {
  each_lane(n, [&](std::int64_t o, std::int64_t i) {
    double acc = 0.0;
    for (std::int64_t k = 0; k < n.n; ++k) acc += x[at(n, o, k, i)];
    y[o * n.inner + i] = static_cast<T>(acc);
  });
}

std::int64_t sum_integers(Scalar type, const DimSizes& n, const void* x, std::int64_t* y) {
  std::atomic<std::int64_t> first_bad{-1};  // the least lane whose sum overflows, over the threads
  auto note = [&](std::int64_t lane) {
    for (std::int64_t seen = first_bad.load();
         (seen < 0 || lane < seen) && !first_bad.compare_exchange_weak(seen, lane);) {
    }
  };
  if (type == Scalar::Bool) {  // a count of at most n: it cannot overflow
    const bool* b = static_cast<const bool*>(x);
    each_lane(n, [&](std::int64_t o, std::int64_t i) {
      std::int64_t count = 0;
      for (std::int64_t k = 0; k < n.n; ++k) count += b[at(n, o, k, i)];
      y[o * n.inner + i] = count;
    });
  } else {
    const std::int64_t* v = static_cast<const std::int64_t*>(x);
    each_lane(n, [&](std::int64_t o, std::int64_t i) {
      Wide total = 0;  // n values under 2^63 each: the sum stays under 2^126
      for (std::int64_t k = 0; k < n.n; ++k) total += v[at(n, o, k, i)];
      y[o * n.inner + i] = static_cast<std::int64_t>(total);
      if (total != y[o * n.inner + i]) note(o * n.inner + i);
    });
  }
  return first_bad.load();
}

template <class T>
void max_dim(const DimSizes& n, const T* x, T* y, std::int64_t* index) {
  each_lane(n, [&](std::int64_t o, std::int64_t i) {
    std::int64_t best = 0;
    T best_value = x[at(n, o, 0, i)];
    for (std::int64_t k = 1; k < n.n; ++k) {
      T v = x[at(n, o, k, i)];
      if (v > best_value || (std::isnan(v) && !std::isnan(best_value))) {
        best = k;
        best_value = v;
      }
    }
    y[o * n.inner + i] = best_value;
    index[o * n.inner + i] = best;
  });
}

template <class T>
void take_along(const DimSizes& n, const T* x, const std::int64_t* index, T* y) {
  each_lane(n, [&](std::int64_t o, std::int64_t i) { y[o * n.inner + i] = x[at(n, o, index[o * n.inner + i], i)]; });
}

template <class T>
void put_along(const DimSizes& n, const T* x, const std::int64_t* index, T* y) {
  each_lane(n, [&](std::int64_t o, std::int64_t i) { y[at(n, o, index[o * n.inner + i], i)] = x[o * n.inner + i]; });
}

template <class T>
bool softmax(const DimSizes& n, bool log, const T* x, T* y) {
  std::atomic<bool> any_dead{false};
  each_lane(n, [&](std::int64_t o, std::int64_t i) {
    T m = -std::numeric_limits<T>::infinity();
    bool nan = false;  // a NaN makes the whole row NaN, as in PyTorch, never a row of zeros
    for (std::int64_t k = 0; k < n.n; ++k) {
      m = std::max(m, x[at(n, o, k, i)]);
      nan = nan || std::isnan(x[at(n, o, k, i)]);
    }
    if (nan) m = std::numeric_limits<T>::quiet_NaN();
    if (m == -std::numeric_limits<T>::infinity()) {
      any_dead.store(true, std::memory_order_relaxed);
      for (std::int64_t k = 0; k < n.n; ++k) y[at(n, o, k, i)] = log ? m : T(0);
      return;
    }
    double sum = 0.0;
    for (std::int64_t k = 0; k < n.n; ++k) sum += (y[at(n, o, k, i)] = std::exp(x[at(n, o, k, i)] - m));
    if (log) {
      T log_sum = static_cast<T>(std::log(sum));
      for (std::int64_t k = 0; k < n.n; ++k) y[at(n, o, k, i)] = x[at(n, o, k, i)] - m - log_sum;
    } else {
      T inv = static_cast<T>(1.0 / sum);
      for (std::int64_t k = 0; k < n.n; ++k) y[at(n, o, k, i)] *= inv;
    }
  });
  return any_dead.load(std::memory_order_relaxed);
}

template <class T>
bool dead_rows(const DimSizes& n, const T* y, bool* dead) {
  std::atomic<bool> any{false};
  each_lane(n, [&](std::int64_t o, std::int64_t i) {
    for (std::int64_t k = 0; k < n.n; ++k)
      if (y[at(n, o, k, i)] != -std::numeric_limits<T>::infinity()) return;
    any.store(true, std::memory_order_relaxed);
    for (std::int64_t k = 0; k < n.n; ++k) dead[at(n, o, k, i)] = true;
  });
  return any.load(std::memory_order_relaxed);
}

template <class T>
void masked_fill(std::int64_t n, const T* x, const bool* mask, double value, T* y) {
  T fill = static_cast<T>(value);
  parallel_for(n, kElementsPerChunk, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) y[j] = mask[j] ? fill : x[j];
  });
}

template <class T>
void where(std::int64_t n, const bool* cond, const T* a, const T* b, T* y) {
  parallel_for(n, kElementsPerChunk, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) y[j] = cond[j] ? a[j] : b[j];
  });
}

// The indexing ops. gather and index_select write each element of y once; scatter_add and
// index_add add into y's lane (o, i) from that lane's sources only, in the order of j, so the
// lanes split across threads give the same sums whatever the thread count.
template <class T>
void gather(const DimSizes& n, std::int64_t m, const T* x, const std::int64_t* index, T* y) {
  DimSizes out{n.outer, m, n.inner};
  each_lane(out, [&](std::int64_t o, std::int64_t i) {
    for (std::int64_t j = 0; j < m; ++j) y[at(out, o, j, i)] = x[at(n, o, index[at(out, o, j, i)], i)];
  });
}

template <class T>
void scatter_add(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y) {
  DimSizes from{n.outer, m, n.inner};
  each_lane(from, [&](std::int64_t o, std::int64_t i) {
    for (std::int64_t j = 0; j < m; ++j) y[at(n, o, index[at(from, o, j, i)], i)] += src[at(from, o, j, i)];
  });
}

template <class T>
void index_add(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y) {
  DimSizes from{n.outer, m, n.inner};
  each_lane(from, [&](std::int64_t o, std::int64_t i) {
    for (std::int64_t j = 0; j < m; ++j) y[at(n, o, index[j], i)] += src[at(from, o, j, i)];
  });
}

#define AG_ALONG_DIM(T)                                                                        \
  template void sum_dim(const DimSizes&, const T*, T*);                                        \
  template void max_dim(const DimSizes&, const T*, T*, std::int64_t*);                         \
  template void take_along(const DimSizes&, const T*, const std::int64_t*, T*);                \
  template void put_along(const DimSizes&, const T*, const std::int64_t*, T*);                 \
  template bool softmax(const DimSizes&, bool, const T*, T*);                                  \
  template bool dead_rows(const DimSizes&, const T*, bool*);                                   \
  template void masked_fill(std::int64_t, const T*, const bool*, double, T*);                  \
  template void where(std::int64_t, const bool*, const T*, const T*, T*);                      \
  template void gather(const DimSizes&, std::int64_t, const T*, const std::int64_t*, T*);      \
  template void scatter_add(const DimSizes&, std::int64_t, const T*, const std::int64_t*, T*); \
  template void index_add(const DimSizes&, std::int64_t, const T*, const std::int64_t*, T*);
AG_ALONG_DIM(float)
AG_ALONG_DIM(double)
#undef AG_ALONG_DIM

}  // namespace ag::backends::cpu
