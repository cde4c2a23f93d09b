// Reductions: over one dim (kept as size 1 with keepdim) or over every element (a 0-d result).
#pragma once

#include <tuple>

#include "../autograd/tensor.h"

namespace ag {

// sum and mean of a float tensor keep its dtype. Of a bool tensor (a count of the true ones) or
// an int64 one, the sum is int64, exact (a sum past int64's range is refused), and the mean is
// float32, what an accuracy is (PyTorch refuses a mean of integers); neither has a gradient.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);
// The largest and smallest values, as PyTorch's max, min, amax and amin. The winner of a dim is
// the first position holding the extreme value (ties: the lowest index), and a NaN beats any
// number. The gradient goes to the winner alone.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// Over one dim: the values and, as int64, the winners' indices (libtorch's
// `auto [values, indices] = torch::max(x, dim)`). The indices carry no gradient.
std::tuple<Tensor, Tensor> max(const Tensor& x, std::int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, std::int64_t dim, bool keepdim = false);
// The values alone.
Tensor amax(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor amin(const Tensor& x, std::int64_t dim, bool keepdim = false);
// The indices alone. Not differentiable.
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);

}  // namespace ag
