// The element types a Tensor can hold, chosen at run time.
//
//   float32  training (the default)
//   float64  gradient checks: finite differences need the extra precision
//   int64    token ids, targets, indices   (never carries a gradient)
//   bool     masks                         (never carries a gradient)
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ag {

enum class DType : std::uint8_t { Float32, Float64, Int64, Bool };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;

constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "unknown";
}

constexpr std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 4;
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType dtype) { return dtype == DType::Float32 || dtype == DType::Float64; }

// The C++ types of a tensor's elements, one per dtype: float, double, std::int64_t and bool. The
// element access of Tensor (data_ptr<T>, item<T>, at<T>, to_vector<T>) and from_vector take these
// (from_vector also converts the other integer types), so another type fails to compile, naming
// this concept, rather than to link.
template <class T>
concept Element =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int64_t> || std::same_as<T, bool>;

// The C++ type stored for each dtype, and back.
template <class T>
constexpr DType dtype_of() = delete;
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Float64;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}

}  // namespace ag
