// Arithmetic between two tensors with NumPy broadcasting, and the two ops that broadcasting
// is made of: broadcast_to (copy along new or size-1 dims) and sum_to (its adjoint).
//
// Broadcasting lines shapes up from the right; each pair of sizes must be equal or one of them
// 1, and a missing dim counts as 1:   [4, 1, 3] with [5, 3]  ->  [4, 5, 3].
#pragma once

#include "../autograd/tensor.h"

namespace ag {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
// With a number: the number becomes a 0-d tensor of the other operand's dtype.
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// The shape two shapes broadcast to, or an error naming `op` and both shapes.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// x copied along the dims where `shape` is larger. Backward: sum_to(dy, x.shape()).
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// Sums g over the dims that broadcasting from `shape` added or stretched, giving `shape`.
// Backward: broadcast_to(dy, g.shape()).
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace ag
