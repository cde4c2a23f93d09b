// What the row-wise layer ops (linear, layer_norm) share: a tensor [..., D] read as R rows of D,
// and the check of an optional per-column vector (a bias, a norm's weight).
#pragma once

#include <cstdint>
#include <string_view>

#include "../autograd/dispatch.h"
#include "../autograd/tensor.h"

namespace ag {

// The product of every dim but the last (1 for a 0-d or 1-d tensor).
inline std::int64_t rows_of(const Tensor& x) {
  return x.dim() <= 1 ? 1 : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
}

// An optional vector must be [size] and of x's dtype.
inline void check_vector(std::string_view op, const char* name, const Tensor& t, std::int64_t size, const Tensor& x) {
  if (!t.defined()) return;
  check_same_floating(op, x, t);
  if (t.shape() != Shape{size})
    throw_invalid(op, "{} has shape {}, expected [{}] for input of shape {}", name, shape_str(t.shape()), size,
                  shape_str(x.shape()));
}

// A tensor's data as a kernel takes it (kernels/table.h): null for an undefined tensor, which is
// how a kernel hears "none" of an optional input and "not wanted" of an optional output.
template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <class T>
T* mutable_data_or_null(Tensor& t) {
  return t.defined() ? t.mutable_data_ptr<T>() : nullptr;
}

}  // namespace ag
