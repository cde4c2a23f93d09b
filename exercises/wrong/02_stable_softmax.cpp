// Exercise 2, wrong on purpose: the formula taken literally, with no shift. Right on small
// scores, NaN once exp overflows. Caught by 2.large-scores.
#include "../workbook.h"

namespace workbook {

Tensor stable_softmax(const Tensor& x) {
  Tensor e = x.exp();
  return e / e.sum(-1, true);
}

}  // namespace workbook
