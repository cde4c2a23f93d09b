// cross_entropy composed from log_softmax (ops/softmax.cpp) and a mask that picks each row's
// target (C classes, target t_r, N = rows whose target is not ignore_index):
//
//   log p_r = log_softmax(x_r)                         [..., C]
//   loss    = -(1/N) sum_r log p_r[t_r]                (ignored rows add nothing)
//
// Backward, through masked_fill, sum and log_softmax:
//   d log p_rc = -1/N at c = t_r, else 0
//   dx_rc = d log p_rc - p_rc sum_c' d log p_rc'  =  (p_rc - [c = t_r]) / N
// the formula the fused kernel in ops/fused/nn_ops.cpp writes directly. No gradient reaches targets.
#include <algorithm>

#include "../binary.h"
#include "../kernel_ops.h"
#include "../masking.h"
#include "../reduce.h"
#include "../softmax.h"
#include "reference.h"

namespace ag::reference {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  count_call(KernelOp::CrossEntropy);
  std::int64_t classes = logits.shape().back(), rows = targets.numel(), counted = 0;
  // is_target[r, c]: true where c is row r's target and the row counts.
  Tensor is_target = zeros(logits.shape(), kBool);
  auto* pick = is_target.mutable_data_ptr<bool>();
  const auto* pt = targets.data_ptr<std::int64_t>();
  for (std::int64_t r = 0; r < rows; ++r)
    if (pt[r] != ignore_index) {
      pick[r * classes + pt[r]] = true;
      ++counted;
    }
  Tensor log_p = log_softmax(logits, -1);
  // log p of each row's target, 0 everywhere else (masked_fill, not a product with a 0/1 mask:
  // a logit of -inf elsewhere in the row would give 0 * -inf = NaN).
  Tensor picked = masked_fill(log_p, logical_not(is_target), 0.0);
  return -sum(picked) / static_cast<double>(std::max<std::int64_t>(counted, 1));  // 0 when every row is ignored
}

}  // namespace ag::reference
