// Matrix product through OpenBLAS. 2-D: [M, K] @ [K, N] -> [M, N]. Batched: the last two dims
// are the matrices and the leading (batch) dims broadcast: [B, H, M, K] @ [K, N] works.
#pragma once

#include "../autograd/tensor.h"

namespace ag {

Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace ag
