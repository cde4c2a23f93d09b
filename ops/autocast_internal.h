// Autocast's side inside the ops (ops/autocast.h is the user's side): how an op turns its float32
// tensors into the bf16 buffers of the matrix-product policy (kernels/products.h), through the
// cache of parameter copies that autocast.h describes.
//
// Internal: read in the source tree, not installed; the ops whose products may run in bf16
// (matmul, linear, swiglu, attention) include it. Whether an op autocasts at all is the router's
// to read (detail::autocasts, ops/route.h).
#pragma once

#include <cstdint>
#include <memory>

#include "../autograd/tensor.h"
#include "../kernels/bf16/bf16.h"

namespace ag {

class Products;  // kernels/products.h: the matrix-product policy

namespace detail {

// Under a bf16 policy, rounds the float32 tensor t whole (unless the policy keeps it already),
// keeps the copy with the policy (a parameter's as a parameter's) and returns it; under the BLAS
// policy, or for an empty t, returns null. A parameter (a leaf that requires grad) is rounded
// once per version and its copy shared; any other tensor is converted on the spot.
std::shared_ptr<const bf16::Buffer> keep_rounded(Products& products, const Tensor& t);

// How many parameter copies the cache has made since the process started (for tests).
std::int64_t autocast_casts();

}  // namespace detail

}  // namespace ag
