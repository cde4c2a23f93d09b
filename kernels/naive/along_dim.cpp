// Loops along one dim, as plain loops on one thread (kernels/table.h); the fast twins are in
// kernels/cpu/along_dim.cpp. The tensor is seen as [outer, n, inner]: for every lane (o, i), the
// n values x[o, 0, i], ..., x[o, n-1, i] sit `inner` apart.
//
//   sum      y[o, i] = x[o, 0, i] + ... + x[o, n-1, i]   (also exactly, for bool and int64 x)
//   max      y[o, i] = the largest of them (a NaN wins), index[o, i] = where it is
//   softmax  y[o, k, i] = exp(x[o, k, i] - m) / sum_j exp(x[o, j, i] - m), m the lane's max
#include <cmath>
#include <limits>

#include "naive.h"

namespace ag::backends::naive {

namespace {
// A 128-bit integer (GCC's and Clang's), for int64 sums that must not wrap.
__extension__ typedef __int128 Wide;
}  // namespace

template <class T>
void sum_dim(const DimSizes& n, const T* x, T* y) {
  count_call();
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t i = 0; i < n.inner; ++i) {
      double total = 0.0;
      for (std::int64_t k = 0; k < n.n; ++k) total += x[(o * n.n + k) * n.inner + i];
      y[o * n.inner + i] = static_cast<T>(total);
    }
}

std::int64_t sum_integers(Scalar type, const DimSizes& n, const void* x, std::int64_t* y) {
  count_call();
  std::int64_t first_bad = -1;
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t i = 0; i < n.inner; ++i) {
      Wide total = 0;  // 128 bits: n values under 2^63 each cannot pass 2^126
      for (std::int64_t k = 0; k < n.n; ++k) {
        std::int64_t at = (o * n.n + k) * n.inner + i;
        if (type == Scalar::Bool)
          total += static_cast<const bool*>(x)[at];
        else
          total += static_cast<const std::int64_t*>(x)[at];
      }
      y[o * n.inner + i] = static_cast<std::int64_t>(total);
      if (total != y[o * n.inner + i] && first_bad < 0) first_bad = o * n.inner + i;  // past int64's range
    }
  return first_bad;
}

template <class T>
void max_dim(const DimSizes& n, const T* x, T* y, std::int64_t* index) {
  count_call();
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t i = 0; i < n.inner; ++i) {
      std::int64_t where = 0;
      for (std::int64_t k = 1; k < n.n; ++k) {
        T best = x[(o * n.n + where) * n.inner + i], v = x[(o * n.n + k) * n.inner + i];
        if (std::isnan(best)) break;  // the first NaN wins
        if (std::isnan(v) || v > best) where = k;
      }
      y[o * n.inner + i] = x[(o * n.n + where) * n.inner + i];
      index[o * n.inner + i] = where;
    }
}

template <class T>
void take_along(const DimSizes& n, const T* x, const std::int64_t* index, T* y) {
  count_call();
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t i = 0; i < n.inner; ++i) {
      std::int64_t k = index[o * n.inner + i];
      y[o * n.inner + i] = x[(o * n.n + k) * n.inner + i];
    }
}

template <class T>
void put_along(const DimSizes& n, const T* x, const std::int64_t* index, T* y) {
  count_call();
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t i = 0; i < n.inner; ++i) {
      std::int64_t k = index[o * n.inner + i];
      y[(o * n.n + k) * n.inner + i] = x[o * n.inner + i];
    }
}

template <class T>
bool softmax(const DimSizes& n, bool log, const T* x, T* y) {
  count_call();
  const T minus_inf = -std::numeric_limits<T>::infinity();
  bool some_row_dead = false;
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t i = 0; i < n.inner; ++i) {
      const T* in = x + o * n.n * n.inner + i;  // the lane's k-th value is in[k * inner]
      T* out = y + o * n.n * n.inner + i;
      // 1. the largest value (a NaN anywhere makes the row NaN)
      T m = minus_inf;
      for (std::int64_t k = 0; k < n.n; ++k) {
        if (std::isnan(in[k * n.inner])) m = in[k * n.inner];
        if (!std::isnan(m) && in[k * n.inner] > m) m = in[k * n.inner];
      }
      // 2. every value -inf: no distribution
      if (m == minus_inf) {
        some_row_dead = true;
        for (std::int64_t k = 0; k < n.n; ++k) out[k * n.inner] = log ? minus_inf : T(0);
        continue;
      }
      // 3. the shifted exponentials and their sum
      double sum = 0.0;
      for (std::int64_t k = 0; k < n.n; ++k) {
        out[k * n.inner] = std::exp(in[k * n.inner] - m);
        sum += out[k * n.inner];
      }
      // 4. normalise, or take logs
      for (std::int64_t k = 0; k < n.n; ++k)
        out[k * n.inner] =
            log ? in[k * n.inner] - m - static_cast<T>(std::log(sum)) : out[k * n.inner] * static_cast<T>(1.0 / sum);
    }
  return some_row_dead;
}

template <class T>
bool dead_rows(const DimSizes& n, const T* y, bool* dead) {
  count_call();
  bool found = false;
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t i = 0; i < n.inner; ++i) {
      bool all_minus_inf = true;
      for (std::int64_t k = 0; k < n.n; ++k)
        if (y[(o * n.n + k) * n.inner + i] != -std::numeric_limits<T>::infinity()) all_minus_inf = false;
      if (!all_minus_inf) continue;
      found = true;
      for (std::int64_t k = 0; k < n.n; ++k) dead[(o * n.n + k) * n.inner + i] = true;
    }
  return found;
}

template <class T>
void masked_fill(std::int64_t n, const T* x, const bool* mask, double value, T* y) {
  count_call();
  for (std::int64_t j = 0; j < n; ++j) y[j] = mask[j] ? static_cast<T>(value) : x[j];
}

template <class T>
void where(std::int64_t n, const bool* cond, const T* a, const T* b, T* y) {
  count_call();
  for (std::int64_t j = 0; j < n; ++j) y[j] = cond[j] ? a[j] : b[j];
}

// The indexing ops: x (or y) as [outer, n, inner], the other side as [outer, m, inner].
template <class T>
void gather(const DimSizes& n, std::int64_t m, const T* x, const std::int64_t* index, T* y) {
  count_call();
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t j = 0; j < m; ++j)
      for (std::int64_t i = 0; i < n.inner; ++i) {
        std::int64_t at = (o * m + j) * n.inner + i;
        y[at] = x[(o * n.n + index[at]) * n.inner + i];
      }
}

template <class T>
void scatter_add(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y) {
  count_call();
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t j = 0; j < m; ++j)
      for (std::int64_t i = 0; i < n.inner; ++i) {
        std::int64_t at = (o * m + j) * n.inner + i;
        y[(o * n.n + index[at]) * n.inner + i] += src[at];
      }
}

template <class T>
void index_add(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y) {
  count_call();
  for (std::int64_t o = 0; o < n.outer; ++o)
    for (std::int64_t j = 0; j < m; ++j)
      for (std::int64_t i = 0; i < n.inner; ++i)
        y[(o * n.n + index[j]) * n.inner + i] += src[(o * m + j) * n.inner + i];
}

// The two precisions of the table (table.cpp).
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

}  // namespace ag::backends::naive
