// The one place attograd talks to BLAS: a row-major C = alpha op(A) op(B) + beta C, where op
// transposes when asked. BLAS reads a stored matrix as its transpose for free, so backward
// formulas like dA = dC B^T never copy B.
//
//   A is stored with rows of length lda, B with rows of length ldb; C is [m, n].
//
// BLAS itself runs on one thread (runtime/parallel.h); a large product is cut here into
// bands of C's rows (or columns, when C is wider than tall), one per thread. Each band is an
// ordinary GEMM on the matching rows of op(A) (or columns of op(B)), so nothing is copied.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "../runtime/parallel.h"

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

namespace detail {

inline CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

inline void gemm_one(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                     int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm_one(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
                     int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_split(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c,
                int ldc) {
  bool split = worth_splitting(m, n, k);
  if (!split || m >= n) {
    // Rows [r0, r1) of C come from rows r0.. of op(A): row r0 of A, or column r0 when A^T is used.
    for_row_bands(m, split, [&](int r0, int r1) {
      const T* a0 = ta ? a + r0 : a + std::int64_t{r0} * lda;
      gemm_one(ta, tb, r1 - r0, n, k, alpha, a0, lda, b, ldb, beta, c + std::int64_t{r0} * ldc, ldc);
    });
  } else {
    // Columns [c0, c1) of C come from columns c0.. of op(B): column c0 of B, or row c0 of B^T.
    parallel_for((n + kBand - 1) / kBand, 1, [&](std::int64_t lo, std::int64_t hi) {
      int c0 = static_cast<int>(lo * kBand), c1 = std::min(n, static_cast<int>(hi * kBand));
      const T* b0 = tb ? b + std::int64_t{c0} * ldb : b + c0;
      gemm_one(ta, tb, m, c1 - c0, k, alpha, a, lda, b0, ldb, beta, c + c0, ldc);
    });
  }
}

}  // namespace detail

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                 float* c, float beta = 0.0f, float alpha = 1.0f) {
  detail::gemm_split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, const double* a, int lda, const double* b, int ldb,
                 double* c, double beta = 0.0, double alpha = 1.0) {
  detail::gemm_split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
}

// The same with C's row length given (ldc), for writing into a strided view of a larger tensor.
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc) {
  detail::gemm_split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  detail::gemm_split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ag::blas
