// A tensor seen around one of its dims. Shape [s0, ..., s(d-1), n, s(d+1), ...] is viewed as
// [outer, n, inner], where outer is the product of the sizes before dim d and inner the
// product after it, so element (o, k, i) sits at offset (o * n + k) * inner + i. Reductions,
// softmax, slicing and concatenation all hand this view to their kernels.
#pragma once

#include <cstdint>
#include <string_view>

#include "../autograd/dispatch.h"
#include "../autograd/tensor.h"
#include "../kernels/table.h"

namespace ag {

struct DimLayout {
  std::int64_t outer = 1, n = 1, inner = 1;
  Shape kept;     // the shape with size 1 at dim (a keepdim result)
  Shape reduced;  // the shape without dim

  // The view as a kernel takes it (kernels/table.h): element (o, k, i) at (o * n + k) * inner + i.
  backends::DimSizes sizes() const { return {outer, n, inner}; }
};

// `dim` may be negative; throws naming `op` when it is out of range.
inline DimLayout dim_layout(std::string_view op, const Shape& shape, std::int64_t dim) {
  auto d = static_cast<std::size_t>(normalize_dim(op, dim, static_cast<std::int64_t>(shape.size())));
  DimLayout l;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < d) l.outer *= shape[i];
    if (i > d) l.inner *= shape[i];
    l.kept.push_back(i == d ? 1 : shape[i]);
    if (i != d) l.reduced.push_back(shape[i]);
  }
  l.n = shape[d];
  return l;
}

}  // namespace ag
