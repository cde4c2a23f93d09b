// The cpu backend's boolean masks (kernels/table.h): the rows of a mask, or the elements of a
// logical op, split across the pool. The naive twins are in kernels/naive/masks.cpp.
#include <algorithm>

#include "../../runtime/parallel.h"
#include "kernels.h"

namespace ag::backends::cpu {

void causal_mask(std::int64_t tq, std::int64_t tk, bool* y) {
  parallel_for(tq, std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(tk, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t i = begin; i < end; ++i) {
                   // row i: its first i + 1 + (tk - tq) keys (clamped to 0..tk) are seen
                   std::int64_t seen = std::clamp<std::int64_t>(i + 1 + (tk - tq), 0, tk);
                   std::fill(y + i * tk, y + i * tk + seen, true);
                   std::fill(y + i * tk + seen, y + (i + 1) * tk, false);
                 }
               });
}

void key_padding_mask(std::int64_t b, std::int64_t t, const std::int64_t* lengths, bool* y) {
  for (std::int64_t s = 0; s < b; ++s) {
    std::fill(y + s * t, y + s * t + lengths[s], true);
    std::fill(y + s * t + lengths[s], y + (s + 1) * t, false);
  }
}

void logical(Logical op, std::int64_t n, const bool* a, const bool* b, bool* y) {
  parallel_for(n, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    if (op == Logical::Not)
      for (std::int64_t i = begin; i < end; ++i) y[i] = !a[i];
    else
      for (std::int64_t i = begin; i < end; ++i) y[i] = a[i] && b[i];
  });
}

}  // namespace ag::backends::cpu
