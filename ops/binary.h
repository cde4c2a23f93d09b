// Arithmetic between two tensors with NumPy broadcasting, the two ops that broadcasting is made
// of (broadcast_to, a copy along new or size-1 dims, and sum_to, its adjoint), and the
// comparisons, which broadcast the same way.
//
// Broadcasting lines shapes up from the right; each pair of sizes must be equal or one of them
// 1, and a missing dim counts as 1:   [4, 1, 3] with [5, 3]  ->  [4, 5, 3].
#pragma once

#include <optional>

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

// Elementwise comparisons with broadcasting, each giving a bool tensor: what an evaluation loop
// counts with, as in
//
//   ag::Tensor correct = (logits.argmax(-1) == targets);   // bool, [batch]
//
//   eq ==    ne !=    lt <    le <=    gt >    ge >=
//
// Both operands have one dtype (float32, float64, int64 or bool: there is no type promotion,
// as in the arithmetic ops) and broadcast as in ops/binary.h. IEEE's rules hold: -0 equals 0, a
// NaN is unequal to everything, itself included (ne is true, the five others false); false
// orders before true.
//
// With a number, the number is taken in the tensor's dtype: rounded to float32 beside a float32
// tensor (as PyTorch rounds it), and, beside an int64 or bool tensor, only a number that dtype
// holds exactly (an integer in int64's range; 0 or 1) is accepted: x < 1.5 on int64 ids is
// refused, pointing to x.to(ag::kFloat64), rather than answered in a rounded type.
//
// A comparison has no gradient (its result is piecewise constant): the result is never part of
// a graph, and its inputs may require grad.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator==(double a, const Tensor& b);
Tensor operator!=(double a, const Tensor& b);
Tensor operator<(double a, const Tensor& b);
Tensor operator<=(double a, const Tensor& b);
Tensor operator>(double a, const Tensor& b);
Tensor operator>=(double a, const Tensor& b);

// The larger and the smaller of a and b, elementwise with broadcasting (PyTorch's maximum and
// minimum): a NaN in either wins. The gradient goes to the side that won; on a tie it is split
// evenly between the two, as PyTorch splits it.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// x held within [min, max]: min(max(x, min), max), either bound optional (not both), each
// rounded to x's dtype. The gradient is dy where min <= x <= max (a bound itself included, as
// PyTorch takes it) and 0 where a bound replaced x. With min > max every element is max, as in
// PyTorch. A NaN element stays NaN; a NaN bound is refused.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);

// The shape two shapes broadcast to, or an error naming `op` and both shapes.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// x copied along the dims where `shape` is larger. Backward: sum_to(dy, x.shape()).
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// Sums g over the dims that broadcasting from `shape` added or stretched, giving `shape`.
// Backward: broadcast_to(dy, g.shape()).
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace ag
