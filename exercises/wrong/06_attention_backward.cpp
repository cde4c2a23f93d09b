// Exercise 6, wrong on purpose: dQ and dK without the scale 1/sqrt(d) that S carries. dV is
// right. Caught by 6.dq.
#include <cmath>

#include "../workbook.h"

namespace workbook {

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout) {
  double scale = 1 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor p = ag::softmax(q.matmul(k.t()) * scale, -1);
  Tensor dp = dout.matmul(v.t());
  Tensor ds = p * (dp - (dp * p).sum(-1, true));
  return {ds.matmul(k), ds.t().matmul(q), p.t().matmul(dout)};
}

}  // namespace workbook
