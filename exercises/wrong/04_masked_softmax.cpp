// Exercise 4, wrong on purpose: masked scores set to 0 instead of −inf, so exp(0) = 1 still
// takes a share. Caught by 4.masked-zero.
#include "../workbook.h"

namespace workbook {

Tensor masked_softmax(const Tensor& scores, const Tensor& keep) {
  return ag::softmax(scores.masked_fill(ag::logical_not(keep), 0.0), -1);
}

}  // namespace workbook
