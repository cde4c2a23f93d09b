// The one place attograd talks to BLAS: a row-major C = alpha A B + beta C on matrix views
// (Matrix below). BLAS reads a stored matrix as its transpose for free, so backward formulas
// like dA = dC B^T never copy B:  gemm(dC, B.t(), dA).
//
// BLAS itself runs on one thread, with kernels fit for the CPU (runtime/blas_setup.h); a large
// product is cut here into bands of C's rows (or columns, when C is wider than tall), one per
// thread. Each band is an ordinary GEMM on the matching rows of op(A) (or columns of op(B)), so
// nothing is copied.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "../../runtime/blas_setup.h"
#include "../../runtime/error.h"
#include "../../runtime/parallel.h"
#include "../../runtime/profile.h"

namespace ag::blas {

// Below this many multiply-adds a product stays on one thread: handing half of it over costs
// more than it saves. Bands are whole multiples of kBand rows or columns, the kernels' tile size.
inline constexpr std::int64_t kSplitWork = std::int64_t{1} << 18;
inline constexpr int kBand = 16;

// Whether an m x n x k product (or a loop of that size around one) is split across threads.
inline bool worth_splitting(std::int64_t m, std::int64_t n, std::int64_t k) {
  return m * n * k >= kSplitWork && get_num_threads() > 1 && !in_parallel_region();
}

// body(r0, r1) over bands of rows covering [0, m): one band per thread, each a whole multiple of
// kBand rows, when `split`; else body(0, m) on this thread.
template <class Body>
void for_row_bands(int m, bool split, Body&& body) {
  if (!split) {
    body(0, m);
    return;
  }
  parallel_for((m + kBand - 1) / kBand, 1, [&](std::int64_t lo, std::int64_t hi) {
    body(static_cast<int>(lo * kBand), std::min(m, static_cast<int>(hi * kBand)));
  });
}

// A matrix inside a buffer: stored row-major as `rows` x `cols`, consecutive rows `ld` elements
// apart (ld > cols for a view of some columns of a wider tensor, such as one head of
// [B, T, H, d]), and read as its transpose when `transposed` (t()), which BLAS does for free.
// Sizes are attograd's int64 here; gemm narrows them to BLAS's int, checked, in one place.
template <class T>
struct Matrix {
  T* data;
  std::int64_t rows, cols, ld;
  bool transposed = false;

  Matrix(T* data_, std::int64_t rows_, std::int64_t cols_, std::int64_t ld_, bool transposed_ = false)
      : data(data_), rows(rows_), cols(cols_), ld(ld_), transposed(transposed_) {}
  Matrix(T* data_, std::int64_t rows_, std::int64_t cols_) : Matrix(data_, rows_, cols_, cols_) {}
  template <class U>
  requires std::is_same_v<const U, T> Matrix(const Matrix<U>& m)
      : Matrix(m.data, m.rows, m.cols, m.ld, m.transposed) {}  // NOLINT: a view is a view

  Matrix t() const { return {data, rows, cols, ld, !transposed}; }
  // Its size as read: m() rows by n() columns.
  std::int64_t m() const { return transposed ? cols : rows; }
  std::int64_t n() const { return transposed ? rows : cols; }
  // Rows [r0, r1) or columns [c0, c1) of the matrix as read: still a view, nothing copied.
  Matrix row_band(std::int64_t r0, std::int64_t r1) const {
    return transposed ? Matrix{data + r0, rows, r1 - r0, ld, true} : Matrix{data + r0 * ld, r1 - r0, cols, ld};
  }
  Matrix col_band(std::int64_t c0, std::int64_t c1) const {
    return transposed ? Matrix{data + c0 * ld, c1 - c0, cols, ld, true} : Matrix{data + c0, rows, c1 - c0, ld};
  }
};

namespace detail {

// BLAS counts in int: the one narrowing from attograd's int64 sizes, checked.
inline int to_int(std::int64_t v) {
  if (v > std::numeric_limits<int>::max())
    throw_invalid("matrix product", "a size of {} exceeds what BLAS can index ({} at most)", v,
                  std::numeric_limits<int>::max());
  return static_cast<int>(v);
}
// A leading dimension: BLAS wants at least 1 even for a matrix with no columns.
inline int ld_of(std::int64_t ld) { return to_int(std::max<std::int64_t>(ld, 1)); }

inline CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

inline void gemm_one(const Matrix<const float>& a, const Matrix<const float>& b, const Matrix<float>& c, float beta,
                     float alpha) {
  cblas_sgemm(CblasRowMajor, op(a.transposed), op(b.transposed), to_int(c.rows), to_int(c.cols), to_int(a.n()), alpha,
              a.data, ld_of(a.ld), b.data, ld_of(b.ld), beta, c.data, ld_of(c.ld));
}
inline void gemm_one(const Matrix<const double>& a, const Matrix<const double>& b, const Matrix<double>& c, double beta,
                     double alpha) {
  cblas_dgemm(CblasRowMajor, op(a.transposed), op(b.transposed), to_int(c.rows), to_int(c.cols), to_int(a.n()), alpha,
              a.data, ld_of(a.ld), b.data, ld_of(b.ld), beta, c.data, ld_of(c.ld));
}

}  // namespace detail

// Throws std::logic_error unless A [m, k], B [k, n] and C [m, n] (as read) fit one product.
template <class A, class B, class C>
void check_fit(const char* who, const Matrix<A>& a, const Matrix<B>& b, const Matrix<C>& c) {
  if (a.m() != c.m() || b.n() != c.n() || a.n() != b.m() || c.transposed)
    throw std::logic_error(fmt::format("{}: the views' sizes do not fit A [m, k] B [k, n] = C [m, n]: A is [{}, {}], "
                                       "B [{}, {}], C [{}, {}]{}",
                                       who, a.m(), a.n(), b.m(), b.n(), c.m(), c.n(), c.transposed ? " transposed" : ""));
}

// product(A_band, B_band, C_band) over bands of C's rows (or columns, when C is wider than tall)
// across threads when the product is large enough, else once on the whole: each band is an
// ordinary product on the matching rows of A (or columns of B), so nothing is copied.
template <class A, class B, class C, class Product>
void for_bands(const Matrix<A>& a, const Matrix<B>& b, const Matrix<C>& c, Product&& product) {
  std::int64_t m = c.m(), n = c.n(), k = a.n();
  bool split = worth_splitting(m, n, k);
  if (!split || m >= n) {
    for_row_bands(detail::to_int(m), split, [&](int r0, int r1) { product(a.row_band(r0, r1), b, c.row_band(r0, r1)); });
  } else {
    parallel_for((n + kBand - 1) / kBand, 1, [&](std::int64_t lo, std::int64_t hi) {
      std::int64_t c0 = lo * kBand, c1 = std::min(n, hi * kBand);
      product(a, b.col_band(c0, c1), c.col_band(c0, c1));
    });
  }
}

// C = alpha A B + beta C, for A [m, k], B [k, n] and C [m, n] as read (each may be a transposed
// or strided view), in bands across threads when large enough (for_bands).
template <class T>
void gemm(Matrix<const std::type_identity_t<T>> a, Matrix<const std::type_identity_t<T>> b, Matrix<T> c, T beta = T(0),
          T alpha = T(1)) {
  check_fit("blas::gemm", a, b, c);
  if (c.m() == 0 || c.n() == 0) return;
  profile::Scope scope(profile::Family::Products);
  static const bool blas_ready = (setup_blas(), true);  // done at load already; kept for a static link
  (void)blas_ready;
  for_bands(a, b, c, [&](const auto& a_band, const auto& b_band, const auto& c_band) {
    detail::gemm_one(a_band, b_band, c_band, beta, alpha);
  });
}

}  // namespace ag::blas
