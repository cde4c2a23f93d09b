// The matrix-product policy of one op call: how its products C = alpha op(A) op(B) + beta C run.
//
// The router (ops/route.h) decides it once, when the op runs, and hands it to the op's fast
// kernels, which keep it for their backward: the kernels call products.gemm(...) and never ask
// which precision is on. The policy is plain data over buffers, as every kernel of kernels/ is:
// it knows nothing of tensors, and what rounds a tensor for it is keep_rounded (ops/autocast_internal.h).
//
//   float32 / float64     blas::gemm (OpenBLAS)
//   bf16 (autocast)       bf16::gemm (oneDNN): both operands rounded to bf16, sums in float32
//
// Under bf16 an op may keep() a whole buffer's rounded copy (a weight, or a gradient read by two
// products); every later product whose operand lies inside that buffer reads the copy instead of
// rounding again. A parameter's copy is the one autocast caches per version (ops/autocast.h), so
// a weight is rounded once per step however often it is multiplied.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "bf16/bf16.h"
#include "cpu/blas.h"

namespace ag {

class Products {
 public:
  // float32 and float64 through BLAS: every op outside autocast.
  Products() = default;
  // bf16 inputs and float32 sums, for float32 operands.
  static Products bf16() {
    Products p;
    p.bf16_ = true;
    return p;
  }

  bool in_bf16() const { return bf16_; }

  // Keeps `copy`, the bf16 rounding of the `size` float32 values at `base`, with this policy
  // (a parameter's copy or an activation's); a later product reading inside [base, base + size)
  // reads the copy. Under the BLAS policy, does nothing.
  void keep(const float* base, std::int64_t size, std::shared_ptr<const bf16::Buffer> copy, bool parameter);
  // The copy kept for exactly these values, which a backward may hold on to after the buffer
  // itself is gone (null when none: not under bf16, or not kept).
  std::shared_ptr<const bf16::Buffer> copy_of(const float* base, std::int64_t size) const;
  // The same policy with only the parameters' copies kept: what a backward that may run long
  // after the forward holds on to. matmul's does: it keeps its float32 operands anyway, so an
  // activation is cheaper to round again than to keep twice. linear and attention instead keep
  // an activation's copy alone and let the float32 one go (FastRun::released).
  Products parameters_only() const;

  template <class T>
  void gemm(blas::Matrix<const T> a, blas::Matrix<const T> b, blas::Matrix<T> c, T beta = T(0), T alpha = T(1)) const {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) return bf16_gemm(a, b, c, beta, alpha);
    }
    blas::gemm(a, b, c, beta, alpha);
  }
  // C = A B + bias, bias[j] added to every row's column j (bias holds C's column count; null for
  // none): linear's forward. Under bf16 oneDNN adds the bias as it writes C, so C is written once;
  // under BLAS C's rows start as the bias and the product is added on top (beta = 1).
  template <class T>
  void gemm_bias(blas::Matrix<const T> a, blas::Matrix<const T> b, blas::Matrix<T> c, const T* bias) const {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_) return bf16_gemm(a, b, c, 0.0f, 1.0f, bias);
    }
    if (bias)
      for (std::int64_t r = 0; r < c.rows; ++r) std::copy(bias, bias + c.cols, c.data + r * c.ld);
    blas::gemm(a, b, c, bias ? T(1) : T(0));
  }
  // Under bf16, with b a bf16 copy held by the caller (copy_of); a is read as above.
  void gemm(blas::Matrix<const float> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c,
            float beta = 0.0f, float alpha = 1.0f) const;
  // Under bf16, with a already rounded by the caller (a kernel that wrote it in bf16 as it made
  // it); b is read as above, or is a bf16 copy too.
  void gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const float> b, blas::Matrix<float> c,
            float beta = 0.0f, float alpha = 1.0f) const;
  void gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c,
            float beta = 0.0f, float alpha = 1.0f) const;

 private:
  struct Kept {
    const float* base;  // the tensor's float32 data, and how many values it holds
    std::int64_t size;
    std::shared_ptr<const bf16::Buffer> copy;
    bool parameter;
  };
  const std::uint16_t* kept_view(const blas::Matrix<const float>& m) const;
  void bf16_gemm(blas::Matrix<const float> a, blas::Matrix<const float> b, blas::Matrix<float> c, float beta,
                 float alpha, const float* bias = nullptr) const;

  bool bf16_ = false;
  std::vector<Kept> kept_;  // a few entries at most
};

}  // namespace ag
