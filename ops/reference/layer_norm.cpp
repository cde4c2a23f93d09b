// layer_norm over the last dim, composed from primitive ops (D = the last dim's size):
//
//   mu   = sum_j x_j / D                     mean(x, -1)
//   var  = sum_j (x_j - mu)^2 / D            the biased variance, as PyTorch's layer norm uses
//   xhat = (x - mu) / sqrt(var + eps)
//   y    = xhat * weight + bias              weight and bias broadcast over the rows
//
// Backward is the chain rule through these five lines; docs/layer_norm.md shows that it
// collapses to  dx = rstd (g - mean(g) - xhat mean(g xhat)),  g = dy weight,  which is what the
// fast kernel in ops/fused/layer_norm.cpp computes in one pass per row.
#include "../binary.h"
#include "../elementwise.h"
#include "../kernel_ops.h"
#include "../reduce.h"
#include "reference.h"

namespace ag::reference {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  count_call(KernelOp::LayerNorm);
  Tensor mu = mean(x, -1, /*keepdim=*/true);       // [..., 1]
  Tensor centred = x - mu;                         // [..., D]
  Tensor var = mean(centred * centred, -1, true);  // [..., 1]
  Tensor xhat = centred / ag::sqrt(var + eps);     // [..., D]
  Tensor y = weight.defined() ? xhat * weight : xhat;
  return bias.defined() ? y + bias : y;
}

}  // namespace ag::reference
