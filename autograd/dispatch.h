// Runs a kernel written once as a template for the C++ type behind a runtime dtype:
//
//   dispatch_floating(x.dtype(), "exp", [&](auto tag) {
//     using T = decltype(tag);   // float or double
//     ...
//   });
//
// Kernels are ordinary loops over T*; this is the only place a dtype becomes a type.
#pragma once

#include <cstdint>
#include <string_view>

#include "dtype.h"
#include "error.h"
#include "tensor.h"

namespace ag {

template <class F>
decltype(auto) dispatch_floating(DType dtype, std::string_view op, F&& kernel) {
  switch (dtype) {
    case DType::Float32: return kernel(float{});
    case DType::Float64: return kernel(double{});
    default: break;
  }
  throw_invalid(op, "expected a float32 or float64 tensor, got {}", dtype_name(dtype));
}

template <class F>
decltype(auto) dispatch_all(DType dtype, F&& kernel) {
  switch (dtype) {
    case DType::Float32: return kernel(float{});
    case DType::Float64: return kernel(double{});
    case DType::Int64: return kernel(std::int64_t{});
    case DType::Bool: break;
  }
  return kernel(bool{});
}

// Argument checks shared by the ops.
inline void check_defined(std::string_view op, const Tensor& t) {
  if (!t.defined()) throw_invalid(op, "got an undefined tensor");
}

inline void check_floating(std::string_view op, const Tensor& t) {
  check_defined(op, t);
  if (!is_floating(t.dtype()))
    throw_invalid(op, "expected a float32 or float64 tensor, got {} with shape {}", dtype_name(t.dtype()),
                  shape_str(t.shape()));
}

// Both floating and of the same dtype: float32 never mixes silently with float64.
inline void check_same_floating(std::string_view op, const Tensor& a, const Tensor& b) {
  check_floating(op, a);
  check_floating(op, b);
  if (a.dtype() != b.dtype())
    throw_invalid(op, "dtypes differ: {} with shape {} and {} with shape {} (convert one with .to())",
                  dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()));
}

// Turns a possibly negative dim into 0..rank-1, or throws.
inline std::int64_t normalize_dim(std::string_view op, std::int64_t dim, std::int64_t rank) {
  if (rank == 0) throw_invalid(op, "dim {} given for a 0-d tensor, which has no dims", dim);
  if (dim < -rank || dim >= rank)
    throw_invalid(op, "dim {} is out of range for a tensor with {} dimensions (valid: {} to {})", dim, rank, -rank,
                  rank - 1);
  return dim < 0 ? dim + rank : dim;
}

}  // namespace ag
