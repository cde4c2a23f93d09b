// Whether training diverged, read from what the updates left behind rather than from the loss
// alone: a huge learning rate can leave finite losses and weights of 1e10 whose next forward is
// NaN, or a second moment of inf that stops the weights without a NaN anywhere. A program checks
// before each checkpoint, so that nothing it cannot load again is ever written over the last
// good one.
#pragma once

#include <attograd/attograd.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace ag::examples {

// The first tensor in `named` that holds a value that is not finite, or, where its name ends in
// "exp_avg_sq" (Adam's second moment, a running mean of squares), a negative one; described for
// a message:
//
//   'h.0.mlp.c_fc.weight' holds -inf at element 17 (1264 bad values in it)
//
// None when every value is as it should be. Float32 and float64 tensors are read; others skipped.
inline std::optional<std::string> first_bad_value(const std::vector<nn::NamedTensor>& named) {
  for (const auto& [name, t] : named) {
    if (!t.defined() || (t.dtype() != kFloat32 && t.dtype() != kFloat64)) continue;
    const Tensor& c = t;  // storage is always contiguous and row-major
    const bool non_negative = name.ends_with("exp_avg_sq");
    std::int64_t bad = 0, first = -1;
    double value = 0;
    auto scan = [&](const auto* p) {
      for (std::int64_t i = 0, n = c.numel(); i < n; ++i)
        if ((!std::isfinite(p[i]) || (non_negative && p[i] < 0)) && bad++ == 0) {
          first = i;
          value = static_cast<double>(p[i]);
        }
    };
    if (c.dtype() == kFloat32)
      scan(c.data_ptr<float>());
    else
      scan(c.data_ptr<double>());
    if (bad > 0) return fmt::format("'{}' holds {} at element {} ({} bad values in it)", name, value, first, bad);
  }
  return std::nullopt;
}

}  // namespace ag::examples
