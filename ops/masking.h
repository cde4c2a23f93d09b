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

// Elementwise logical not and and of bool tensors (and broadcasts).
Tensor logical_not(const Tensor& mask);
Tensor logical_and(const Tensor& a, const Tensor& b);

}  // namespace ag
