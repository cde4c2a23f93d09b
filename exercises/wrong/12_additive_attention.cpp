// Exercise 12, wrong on purpose: no tanh, so the score is linear in q and k (and a · W_q q_i, the
// same for every key, cancels in the softmax). Caught by 12.values.
#include "../workbook.h"

namespace workbook {

Tensor additive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w_q, const Tensor& w_k,
                          const Tensor& a) {
  Tensor scores = (q.matmul(w_q.t()).unsqueeze(1) + k.matmul(w_k.t()).unsqueeze(0)).matmul(a.unsqueeze(1));
  return ag::softmax(scores.squeeze(-1), -1).matmul(v);
}

}  // namespace workbook
