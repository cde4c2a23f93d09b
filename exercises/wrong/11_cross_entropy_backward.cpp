// Exercise 11, wrong on purpose: the mean taken over every row, ignored ones included, so each
// gradient is too small by N_counted / R. Caught by 11.autograd.
#include "../workbook.h"

namespace workbook {

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss) {
  std::int64_t rows = logits.size(0), classes = logits.size(1);
  Tensor p = ag::softmax(logits, -1);
  std::vector<std::int64_t> t = targets.to_vector<std::int64_t>();
  std::vector<double> onehot(static_cast<std::size_t>(rows * classes), 0.0), counted(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    counted[static_cast<std::size_t>(r)] = t[static_cast<std::size_t>(r)] == -100 ? 0.0 : 1.0;
    if (t[static_cast<std::size_t>(r)] != -100)
      onehot[static_cast<std::size_t>(r * classes + t[static_cast<std::size_t>(r)])] = 1.0;
  }
  Tensor keep = ag::tensor(counted, {rows, 1}, logits.dtype());
  return (p - ag::tensor(onehot, {rows, classes}, logits.dtype())) * keep * (dloss / static_cast<double>(rows));
}

}  // namespace workbook
