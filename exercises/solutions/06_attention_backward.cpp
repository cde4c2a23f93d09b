// Exercise 6, a reference answer: the three steps of docs/attention.md, one line each.
#include <cmath>

#include "../workbook.h"

namespace workbook {

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout) {
  double scale = 1 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor p = ag::softmax(q.matmul(k.t()) * scale, -1);  // [Tq, Tk], recomputed
  Tensor dv = p.t().matmul(dout);                       // O = P V:  dV = Pᵀ dO   [Tk, dv]
  Tensor dp = dout.matmul(v.t());                       //           dP = dO Vᵀ   [Tq, Tk]
  Tensor ds = p * (dp - (dp * p).sum(-1, true));        // softmax, row by row
  Tensor dq = ds.matmul(k) * scale;                     // S = scale Q Kᵀ:  dQ = scale dS K    [Tq, d]
  Tensor dk = ds.t().matmul(q) * scale;                 //                  dK = scale dSᵀ Q   [Tk, d]
  return {dq, dk, dv};
}

}  // namespace workbook
