// Exercise 5, wrong on purpose: no 1/sqrt(d) scale. Caught by 5.equals-library.
#include <limits>

#include "../workbook.h"

namespace workbook {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  Tensor s = q.matmul(k.transpose(-2, -1));
  if (causal)
    s = s.masked_fill(ag::logical_not(ag::causal_mask(q.size(-2), k.size(-2))),
                      -std::numeric_limits<double>::infinity());
  return ag::softmax(s, -1).matmul(v);
}

}  // namespace workbook
