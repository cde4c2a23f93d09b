// Ops that move elements without changing them. Any dtype; gradients flow for float tensors.
#pragma once

#include <vector>

#include "../autograd/tensor.h"

namespace ag {

// Same elements, new shape with the same numel; one size may be -1 (inferred). Shares the
// data (storage is always contiguous, so no copy is needed).
Tensor reshape(const Tensor& x, Shape shape);
// Dims reordered: y's dim i is x's dim dims[i]. Copies into a contiguous result.
Tensor permute(const Tensor& x, std::vector<std::int64_t> dims);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
// Elements start, start+step, ... < end along `dim`. Negative start/end count from the end;
// after that they must satisfy 0 <= start <= end <= size (no silent clamping).
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1);
// Joins tensors along `dim`; every other size must agree.
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim);
// Pieces of `split_size` along `dim` (the last may be smaller), or pieces of the given sizes.
// Many pieces are cut by halves, so that the backward of n pieces costs about 2 log2 n passes
// over x, not n (and the forward about log2 n copies of x, not 1); up to 8 are cut straight.
std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim);
// A new size-1 dim at `dim`; removing a size-1 dim (a dim of another size is an error).
Tensor unsqueeze(const Tensor& x, std::int64_t dim);
Tensor squeeze(const Tensor& x, std::int64_t dim);

}  // namespace ag
