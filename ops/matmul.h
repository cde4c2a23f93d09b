// Matrix product through OpenBLAS. 2-D: [M, K] @ [K, N] -> [M, N]. Batched: the last two dims
// are the matrices and the leading (batch) dims broadcast: [B, H, M, K] @ [K, N] works.
#pragma once

#include "../autograd/tensor.h"

namespace ag {

Tensor matmul(const Tensor& a, const Tensor& b);

// op(A) @ op(B), where op reads its operand with the last two dims swapped when asked:
// matmul_transposed(a, false, b, true) is a @ b^T without copying b^T. BLAS reads a transpose
// for free, so this is what matmul's own backward, linear's x W^T and attention's Q K^T are
// made of when they are written as ops (create_graph, the reference kernels). Its backward is
// made of it too: dA = dC B for C = A B^T, dB = dC^T A.
Tensor matmul_transposed(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b);

}  // namespace ag
