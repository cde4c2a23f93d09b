#include "fast_math.h"

namespace ag::fast {

AG_SIMD_CLONES void exp_shifted(float* x, std::int64_t n, float shift) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = fast::exp(x[i] - shift);
}

void exp_shifted(double* x, std::int64_t n, double shift) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - shift);
}

AG_SIMD_CLONES void tanh_each(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = fast::tanh(x[i]);
}

void tanh_each(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace ag::fast
