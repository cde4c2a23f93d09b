// matmul's one product as three loops; the fast twin is one BLAS call (kernels/cpu/table.cpp),
// the op ops/matmul.cpp, which calls this once per matrix of a batch.
//
//   C[i, j] = sum_p op(A)[i, p] op(B)[p, j]        op(A) [m, k], op(B) [k, n], C [m, n]
//
// where op(A)[i, p] is A[i, p] as stored, or A[p, i] when A is stored transposed ([k, m]); B
// likewise. `products` is always the plain policy here (the table says bf16_products = false).
#include "naive.h"

namespace ag::backends::naive {

template <class T>
void matmul(const Products&, const ProductSizes& n, const T* a, const T* b, T* c) {
  count_call();
  auto a_at = [&](std::int64_t i, std::int64_t p) { return n.trans_a ? a[p * n.m + i] : a[i * n.k + p]; };
  auto b_at = [&](std::int64_t p, std::int64_t j) { return n.trans_b ? b[j * n.k + p] : b[p * n.n + j]; };
  for (std::int64_t i = 0; i < n.m; ++i)
    for (std::int64_t j = 0; j < n.n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < n.k; ++p) sum += static_cast<double>(a_at(i, p)) * b_at(p, j);
      c[i * n.n + j] = static_cast<T>(sum);
    }
}

// The two precisions of the table (table.cpp).
template void matmul(const Products&, const ProductSizes&, const float*, const float*, float*);
template void matmul(const Products&, const ProductSizes&, const double*, const double*, double*);

}  // namespace ag::backends::naive
