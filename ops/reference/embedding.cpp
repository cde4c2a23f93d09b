// embedding as a matrix product with one-hot rows:
//
//   onehot[p, v] = 1 if ids[p] = v else 0       [P, V]   (P = number of ids)
//   y = onehot W                                 [P, D], reshaped to [*ids.shape, D]
//   dW = onehot^T dy                             (matmul's rule for its second operand)
//
// so row v of dW is the sum of dy over the positions that looked up v: the scatter-add that the
// fast kernel in ops/fused/nn_ops.cpp writes as a loop. Not differentiable in ids (onehot is a constant).
#include "../kernel_ops.h"
#include "../matmul.h"
#include "../shape.h"
#include "reference.h"

namespace ag::reference {

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  count_call(KernelOp::Embedding);
  std::int64_t vocab = weight.size(0), positions = ids.numel();
  Tensor onehot = zeros({positions, vocab}, weight.dtype());
  const auto* pid = ids.data_ptr<std::int64_t>();
  for (std::int64_t p = 0; p < positions; ++p) {
    if (weight.dtype() == kFloat64)
      onehot.mutable_data_ptr<double>()[p * vocab + pid[p]] = 1.0;
    else
      onehot.mutable_data_ptr<float>()[p * vocab + pid[p]] = 1.0f;
  }
  Shape y_shape = ids.shape();
  y_shape.push_back(weight.size(1));
  return onehot.matmul(weight).reshape(y_shape);
}

}  // namespace ag::reference
