// Reductions: over one dim (kept as size 1 with keepdim) or over every element (a 0-d result).
#pragma once

#include "../autograd/tensor.h"

namespace ag {

// sum and mean of a float tensor keep its dtype. Of a bool tensor (a count of the true ones) or
// an int64 one, the sum is int64, exact (a sum past int64's range is refused), and the mean is
// float32, what an accuracy is (PyTorch refuses a mean of integers); neither has a gradient.
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
