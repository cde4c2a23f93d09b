// Reductions: over one dim (kept as size 1 with keepdim) or over every element (a 0-d result).
#pragma once

#include "../autograd/tensor.h"

namespace ag {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);
// The gradient goes to the first position holding the maximum (ties: the lowest index).
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim = false);
// The index of the maximum along `dim` (first on ties), as int64. Not differentiable.
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);

}  // namespace ag
