// The one place attograd talks to BLAS: a row-major C = alpha op(A) op(B) + beta C, where op
// transposes when asked. BLAS reads a stored matrix as its transpose for free, so backward
// formulas like dA = dC B^T never copy B.
//
//   A is stored with rows of length lda, B with rows of length ldb; C is [m, n].
#pragma once

#include <cblas.h>

namespace ag::blas {

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                 float* c, float beta = 0.0f, float alpha = 1.0f) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, n);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, const double* a, int lda, const double* b, int ldb,
                 double* c, double beta = 0.0, double alpha = 1.0) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, n);
}

// The same with C's row length given (ldc), for writing into a strided view of a larger tensor.
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ag::blas
