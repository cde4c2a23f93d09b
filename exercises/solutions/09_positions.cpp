// Exercise 9, a reference answer: the formula, entry by entry, into a vector, then a tensor.
#include <cmath>

#include "../workbook.h"

namespace workbook {

Tensor sinusoidal_positions(std::int64_t t, std::int64_t d) {
  std::vector<double> pe(static_cast<std::size_t>(t * d));
  for (std::int64_t pos = 0; pos < t; ++pos)
    for (std::int64_t i = 0; 2 * i < d; ++i) {
      double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(d));
      pe[static_cast<std::size_t>(pos * d + 2 * i)] = std::sin(angle);
      pe[static_cast<std::size_t>(pos * d + 2 * i + 1)] = std::cos(angle);
    }
  return ag::tensor(pe, {t, d}, ag::kFloat64);
}

}  // namespace workbook
