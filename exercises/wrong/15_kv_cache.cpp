// Exercise 15, wrong on purpose: the scores are not divided by √dk. The first step is still
// right (one key gets weight 1 at any scale) and the cache is right. Caught by 15.equals-full.
#include "../workbook.h"

namespace workbook {

Tensor KvCache::step(const Tensor& x_t) {
  Tensor x = x_t.unsqueeze(0);
  Tensor q = x.matmul(w_q.t()), k = x.matmul(w_k.t()), v = x.matmul(w_v.t());
  keys = keys.defined() ? ag::cat({keys, k}, 0) : k;
  values = values.defined() ? ag::cat({values, v}, 0) : v;
  Tensor p = q.matmul(keys.t()).softmax(-1);  // no 1/√dk
  return p.matmul(values).squeeze(0);
}

}  // namespace workbook
