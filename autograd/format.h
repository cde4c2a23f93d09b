// Printing tensors the way NumPy does: nested brackets, columns aligned, the middle of each
// long dim elided as "..." once the tensor has more than 1000 elements, then shape and dtype:
//
//   tensor([[ 0.5000, -1.2500],
//           [ 2.0000,  3.0000]], shape=[2, 2], dtype=float32)
//
// fmt::format("{}", t), fmt::print and std::ostream << all work for tensors; a shape prints
// through fmt (or shape_str), since a Shape is a std::vector and an operator<< for it would have
// to be declared for every std::vector<int64_t> of the program:
//
//   fmt::print("{}\n", x.shape());   // [2, 3], as shape_str writes it
#pragma once

#include <fmt/format.h>
// A Shape is a std::vector<std::int64_t>; fmt's range support formats it as "[2, 3]", the form
// every message uses. Included here so that one include of the library is enough to print one.
#include <fmt/ranges.h>

#include <ostream>
#include <string>

#include "tensor.h"

namespace ag {

struct PrintOptions {
  std::int64_t threshold = 1000;  // elide when numel() is larger than this
  std::int64_t edge_items = 3;    // items kept at each end of an elided dim
  int precision = 4;              // digits after the decimal point
};

std::string to_string(const Tensor& t, const PrintOptions& options = {});
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace ag

template <>
struct fmt::formatter<ag::Tensor> : fmt::formatter<std::string> {
  auto format(const ag::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string>::format(ag::to_string(t), ctx);
  }
};
