// Indexing with integer tensors: picking elements or slices by index, and adding values back at
// indices, the way a batch is assembled from a dataset and a loss reads one logit per row.
//
//   index_select(x, d, idx)       y[..., j, ...] = x[..., idx[j], ...]          idx int64 [m]
//   index_add(s, d, idx, src)     y = s, then y[..., idx[j], ...] += src[..., j, ...]
//   gather(x, d, idx)             y[o, j, i] = x[o, idx[o, j, i], i]              idx as y
//   scatter_add(s, d, idx, src)   y = s, then y[o, idx[o, j, i], i] += src[o, j, i]
//
// (o runs over the dims before d, i over those after.) Each pair is adjoint: the gradient of a
// select is an add into zeros at the same indices, and the gradient of an add's src is a select
// of dy, so every order of derivative follows from the four. An index must be int64 and lie in
// 0..size-1 of dim d (negative indices are refused, as in PyTorch); repeated indices are
// allowed, and their values add up.
#pragma once

#include <vector>

#include "../autograd/generator.h"
#include "../autograd/tensor.h"

namespace ag {

// x of any dtype (a float x is differentiable); the others take float tensors.
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);
// index has x's rank and x's sizes in every dim but dim (where it may have any size).
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index);
// index and src have one shape: self's in every dim but dim.
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src);

// The tensors, of one shape and dtype, stacked along a new dim: stack({a, b}, 0) is [2, ...a's].
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);

// A random order of 0..n-1, as int64 (Fisher-Yates on the generator's integers).
Tensor randperm(std::int64_t n, Generator& generator);
Tensor randperm(std::int64_t n);

}  // namespace ag
