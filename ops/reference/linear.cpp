// linear and the MLP's GELU, composed from primitive ops.
//
//   linear:  y = x W^T + b           x: [..., in]   W: [out, in]   b: [out]   y: [..., out]
//   x W^T is matmul_transposed (W read transposed, never copied); the backward is its and add's
//   (ops/matmul.cpp, ops/binary.cpp):
//     dx = dy W,   dW = dy^T x (summed over every leading dim),   db = dy summed the same way
//
//   GELU(x) = x Phi(x),  Phi the standard normal CDF:
//     Phi(x) = (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2
//   The erfc form is the same number but keeps its precision for x far below 0, where 1 + erf
//   would cancel. GPT-2's approximation:  GELU(x) ~ x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   The derivative, x phi(x) + Phi(x), comes from the chain rule through mul, erfc and tanh.
#include <numbers>

#include "../binary.h"
#include "../elementwise.h"
#include "../kernel_ops.h"
#include "../matmul.h"
#include "../shape.h"
#include "reference.h"

namespace ag::reference {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  count_call(KernelOp::Linear);
  Tensor rows = x.dim() == 1 ? x.unsqueeze(0) : x;  // matmul wants a matrix: [in] -> [1, in]
  Tensor y = matmul_transposed(rows, false, weight, true);  // [..., in] @ [in, out]: W read transposed
  if (bias.defined()) y = y + bias;                 // b broadcasts over the rows
  return x.dim() == 1 ? y.squeeze(0) : y;
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  count_call(KernelOp::Gelu);
  if (approximate == GeluApproximation::Tanh) {
    constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2 / pi)
    Tensor u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + ag::tanh(u));
  }
  Tensor phi = 0.5 * erfc(x * (-1.0 / std::numbers::sqrt2));  // Phi(x)
  return x * phi;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) {
  count_call(KernelOp::LinearGelu);
  return reference::gelu(reference::linear(x, weight, bias), approximate);
}

}  // namespace ag::reference
