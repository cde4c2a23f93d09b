// Exercise 3, wrong on purpose: only the diagonal of the Jacobian (dx = y dy), the term that
// comes from δ_ij, without the − y_i y_j part. Caught by 3.autograd.
#include "../workbook.h"

namespace workbook {

Tensor softmax_backward(const Tensor& y, const Tensor& dy) { return y * dy; }

}  // namespace workbook
