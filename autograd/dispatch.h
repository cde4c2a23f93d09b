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
#include <string>
#include <string_view>

#include "../runtime/error.h"
#include "dtype.h"
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
// An undefined tensor is most often a gradient read too early: Tensor::grad() of a leaf that no
// backward() has reached is undefined (optimizers rely on that to skip it), so the message says
// so where the tensor is used.
inline void check_defined(std::string_view op, const Tensor& t) {
  if (!t.defined())
    throw_invalid(op,
                  "got an undefined tensor (a default-constructed Tensor, or the grad() of a tensor that no "
                  "backward() has reached yet: call loss.backward() first, or test grad().defined())");
}

// How a dtype is spelled in C++ code, for the hints: "ag::kFloat32".
constexpr std::string_view dtype_constant(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "ag::kFloat32";
    case DType::Float64: return "ag::kFloat64";
    case DType::Int64: return "ag::kInt64";
    case DType::Bool: break;
  }
  return "ag::kBool";
}

// The .to() that ends a mix of dtypes a and b: "convert one with .to(ag::kFloat32)".
inline std::string to_hint(DType a, DType b) {
  DType target = is_floating(a) ? a : is_floating(b) ? b : kFloat32;
  return fmt::format("convert one with .to({})", dtype_constant(target));
}

inline void check_floating(std::string_view op, const Tensor& t) {
  check_defined(op, t);
  if (!is_floating(t.dtype()))
    throw_invalid(op, "expected a float32 or float64 tensor, got {} with shape {} (convert it with .to(ag::kFloat32))",
                  dtype_name(t.dtype()), shape_str(t.shape()));
}

// Both floating and of the same dtype: float32 never mixes silently with float64. Every mix of
// dtypes in a binary op, matmul, linear or attention is reported here, each with the .to() that
// ends it.
inline void check_same_floating(std::string_view op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  if (a.dtype() == b.dtype()) return check_floating(op, a);
  if (is_floating(a.dtype()) && is_floating(b.dtype()))
    throw_invalid(op, "dtypes differ: {} with shape {} and {} with shape {} ({})", dtype_name(a.dtype()),
                  shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()), to_hint(a.dtype(), b.dtype()));
  const Tensor& odd = is_floating(a.dtype()) ? b : a;  // the one that cannot take part
  const Tensor& other = is_floating(a.dtype()) ? a : b;
  throw_invalid(op, "expected a float32 or float64 tensor, got {} with shape {} beside {} with shape {} ({})",
                dtype_name(odd.dtype()), shape_str(odd.shape()), dtype_name(other.dtype()), shape_str(other.shape()),
                to_hint(a.dtype(), b.dtype()));
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
