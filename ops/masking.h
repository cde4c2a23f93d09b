// Masks: boolean tensors that say which positions take part.
//
// Two conventions meet here, both PyTorch's:
//   masked_fill(x, mask, v)          mask true  = replace this position with v
//   attention masks (attn_mask)      mask true  = this query may attend to this key
// The helpers below build attention masks (true = attend).
#pragma once

#include <vector>

#include "../autograd/tensor.h"

namespace ag {

// y = x where mask is false, `value` where it is true. `mask` is bool and broadcasts to x's
// shape. Not differentiable in `mask`; no gradient reaches the filled positions of x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// [Tq, Tk], true where query i may see key j: j <= i + (Tk - Tq). With Tq = Tk this is the
// lower triangle; with Tk > Tq (queries that continue a cached prefix) the diagonal shifts so
// the last query sees every key.
Tensor causal_mask(std::int64_t tq, std::int64_t tk);

// [B, 1, 1, T], true at key positions < lengths[b]: broadcasts over heads and queries.
Tensor key_padding_mask(const std::vector<std::int64_t>& lengths, std::int64_t t);

// a where `condition` is true, b where it is false: y[o] = condition[o] ? a[o] : b[o], the three
// broadcast together (condition bool; a and b float, of one dtype; a number takes the other
// operand's dtype). The gradient of each side is dy where it was chosen and 0 elsewhere; the
// condition has none. Unlike a * c + b * (1 - c), the side not chosen never reaches the result,
// so an inf or NaN there does no harm (it does under a product: 0 * inf is NaN).
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, double b);
Tensor where(const Tensor& condition, double a, const Tensor& b);

// Elementwise logical not, and, or of bool tensors (and and or broadcast), also as the
// operators ~, & and | on bool tensors, as in libtorch.
Tensor logical_not(const Tensor& mask);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& mask);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);

}  // namespace ag
