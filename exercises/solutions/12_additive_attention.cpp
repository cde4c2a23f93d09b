// Exercise 12, a reference answer: every (query, key) pair's hidden vector by one broadcast sum.
#include "../workbook.h"

namespace workbook {

Tensor additive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w_q, const Tensor& w_k,
                          const Tensor& a) {
  Tensor hq = q.matmul(w_q.t()).unsqueeze(1);               // [Tq, 1, H]
  Tensor hk = k.matmul(w_k.t()).unsqueeze(0);               // [1, Tk, H]
  Tensor scores = (hq + hk).tanh().matmul(a.unsqueeze(1));  // [Tq, Tk, 1]
  return ag::softmax(scores.squeeze(-1), -1).matmul(v);     // [Tq, dv]
}

}  // namespace workbook
