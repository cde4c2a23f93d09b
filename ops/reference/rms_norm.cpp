// rms_norm over the last dim, composed from primitive ops (D = the last dim's size): the
// normalisation of LLaMA-style models, layer norm without the centring and without a bias.
//
//   ms   = sum_j x_j^2 / D                   the mean square, mean(x * x, -1)
//   xhat = x / sqrt(ms + eps)
//   y    = xhat * weight                     weight broadcasts over the rows
//
// Backward is the chain rule through these three lines; docs/layer_norm.md shows that it
// collapses to  dx = rrms (g - xhat mean(g xhat)),  g = dy weight,  which is what the fast
// kernel in ops/fused/rms_norm.cpp computes in one pass per row.
#include "../binary.h"
#include "../elementwise.h"
#include "../kernel_ops.h"
#include "../reduce.h"
#include "reference.h"

namespace ag::reference {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  count_call(KernelOp::RmsNorm);
  Tensor ms = mean(x * x, -1, /*keepdim=*/true);  // [..., 1]
  Tensor xhat = x / ag::sqrt(ms + eps);           // [..., D]
  return weight.defined() ? xhat * weight : xhat;
}

}  // namespace ag::reference
