// Exercise 11, a reference answer: dx_rc = dloss · (softmax(x_r)_c − [c = t_r]) / N on counted
// rows, 0 on ignored ones, as a loop over rows.
#include <cmath>

#include "../workbook.h"

namespace workbook {

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss) {
  std::int64_t rows = logits.size(0), classes = logits.size(1);
  std::vector<double> x = logits.to(ag::kFloat64).to_vector<double>(), dx(x.size(), 0.0);
  std::vector<std::int64_t> t = targets.to_vector<std::int64_t>();
  std::int64_t counted = 0;
  for (std::int64_t target : t) counted += target != -100;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (t[static_cast<std::size_t>(r)] == -100) continue;
    const double* row = x.data() + r * classes;
    double largest = row[0], sum = 0;
    for (std::int64_t c = 1; c < classes; ++c) largest = std::max(largest, row[c]);
    for (std::int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - largest);
    for (std::int64_t c = 0; c < classes; ++c) {
      double p = std::exp(row[c] - largest) / sum;
      double onehot = c == t[static_cast<std::size_t>(r)] ? 1.0 : 0.0;
      dx[static_cast<std::size_t>(r * classes + c)] = dloss * (p - onehot) / static_cast<double>(counted);
    }
  }
  return ag::tensor(dx, {rows, classes}, ag::kFloat64).to(logits.dtype());
}

}  // namespace workbook
