// The matrix-product policy of one op call: how its products C = alpha op(A) op(B) + beta C run.
//
// The router (ops/route.h) decides it once, when the op runs, and hands it to the op's fast
// kernels, which keep it for their backward: the kernels call products.gemm(...) and never ask
// which precision is on.
//
//   float32 / float64     blas::gemm (OpenBLAS)
//   bf16 (autocast)       bf16::gemm (oneDNN): both operands rounded to bf16, sums in float32
//
// Under bf16 a kernel may keep() a whole tensor rounded once (a weight, or a gradient read by
// two products); every later product whose operand lies inside that tensor reads the rounded
// copy instead of rounding again. A parameter's copy is the one autocast caches per version
// (ops/autocast.h), so a weight is rounded once per step however often it is multiplied.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "../autograd/tensor.h"
#include "bf16.h"
#include "blas.h"

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

  // Under bf16, rounds the float32 tensor t whole (unless it is kept already) and keeps the
  // copy with this policy; otherwise does nothing. Returns *this, so calls chain.
  Products& keep(const Tensor& t);
  // The same policy with only the parameters' copies kept: what a backward that may run long
  // after the forward holds on to. matmul's does: it keeps its float32 operands anyway, so an
  // activation is cheaper to round again than to keep twice. linear and attention instead keep
  // an activation's copy alone and let the float32 one go (FastRun::released).
  Products parameters_only() const;

  // The copy keep(t) made, which a backward may hold on to after t itself is gone (null when
  // none was made: not under bf16, or t empty).
  std::shared_ptr<const bf16::Buffer> copy_of(const Tensor& t) const;

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
