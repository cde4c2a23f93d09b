// The boolean masks as plain loops (kernels/table.h), one element at a time; the fast twins are
// in kernels/cpu/masks.cpp.
#include "naive.h"

namespace ag::backends::naive {

void causal_mask(std::int64_t tq, std::int64_t tk, bool* y) {
  count_call();
  for (std::int64_t i = 0; i < tq; ++i)
    for (std::int64_t j = 0; j < tk; ++j) y[i * tk + j] = j <= i + (tk - tq);
}

void key_padding_mask(std::int64_t b, std::int64_t t, const std::int64_t* lengths, bool* y) {
  count_call();
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t j = 0; j < t; ++j) y[s * t + j] = j < lengths[s];
}

void logical(Logical op, std::int64_t n, const bool* a, const bool* b, bool* y) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) y[i] = op == Logical::Not ? !a[i] : a[i] && b[i];
}

}  // namespace ag::backends::naive
