// Small bf16 matrix products on AVX512-BF16's dot-product instruction, without oneDNN.
//
// Attention's products are small: a block of 64 queries against at most a sequence's keys, over
// a head's 32 or 64 dimensions, a few thousand of them a training step. oneDNN's matmul spends
// about as long setting up and packing such a product as multiplying it, so bf16::gemm sends the
// products below a size (takes()) here instead. What it computes is the same: each operand
// rounded to bf16 (to nearest, ties to even, as bf16::from_float), products of bf16 pairs summed
// in float32 by the same instruction oneDNN uses on these CPUs; only the order of the float32
// additions differs.
//
//   VDPBF16PS  acc[j] += a[2j] b[2j] + a[2j+1] b[2j+1]     (16 float32 lanes, 32 bf16 pairs)
//
// So both operands are packed with k in pairs: A as one 32-bit (k, k+1) pair per row and step of
// two, broadcast to all lanes; B as 16 columns' pairs per vector. A tile of 8 rows by 32 columns
// of C stays in 16 registers while k runs.
#pragma once

#include <cstdint>

#include "../cpu/blas.h"

namespace ag::bf16::small {

// Whether an [m, k] x [k, n] product goes to gemm() below: the CPU has AVX512-BF16 (which AMX
// CPUs also have) and the product is small enough that oneDNN's per-call cost would dominate.
bool takes(std::int64_t m, std::int64_t n, std::int64_t k);

// C = alpha op(A) op(B) + bias + beta C on this thread, for views read like blas::gemm's; A and B
// are float32 (rounded to bf16 as they are packed) or bf16 (std::uint16_t). Only where takes()
// said yes; the caller has checked the shapes, and that alpha is 1 when there is a bias.
template <class TA, class TB>
void gemm(const blas::Matrix<const TA>& a, const blas::Matrix<const TB>& b, const blas::Matrix<float>& c, float beta,
          float alpha, const float* bias);

}  // namespace ag::bf16::small
