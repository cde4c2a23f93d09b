// The elementwise functions of ops/elementwise.cpp (kernels/table.h), one loop each; the naive
// twins are in kernels/naive/elementwise.cpp. float32's tanh is fast::tanh, in plain arithmetic
// so that its loop vectorises (std::tanh, one element at a time, was a fifth of a small tanh
// MLP's training step); the others call the C library.
#include <cmath>
#include <numbers>

#include "../../runtime/parallel.h"
#include "fast_math.h"
#include "kernels.h"

namespace ag::backends::cpu {

namespace {

template <class T, class F>
void each(std::int64_t n, const T* x, T* y, F f) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

}  // namespace

template <class T>
void unary(Unary op, double p, std::int64_t n, const T* x, T* y) {
  switch (op) {
    case Unary::Neg: return each(n, x, y, [](T v) { return -v; });
    case Unary::Pow: return each(n, x, y, [p](T v) { return static_cast<T>(std::pow(v, p)); });
    case Unary::Exp: return each(n, x, y, [](T v) { return std::exp(v); });
    case Unary::Log: return each(n, x, y, [](T v) { return std::log(v); });
    case Unary::Sqrt: return each(n, x, y, [](T v) { return std::sqrt(v); });
    case Unary::Tanh: return fast::tanh_each(x, y, n);
    case Unary::Sigmoid: return each(n, x, y, [](T v) { return 1 / (1 + std::exp(-v)); });
    case Unary::Erfc: return each(n, x, y, [](T v) { return std::erfc(v); });
    case Unary::Relu: return each(n, x, y, [](T v) { return v < 0 ? T(0) : v; });
    case Unary::Abs: return each(n, x, y, [](T v) { return std::abs(v); });
  }
}

template void unary(Unary, double, std::int64_t, const float*, float*);
template void unary(Unary, double, std::int64_t, const double*, double*);

namespace {

// dx[i] = dy[i] * slope(saved[i]), split across threads like the same-shape arithmetic loops.
template <class T, class F>
void times_slope(std::int64_t n, const T* saved, const T* dy, T* dx, F slope) {
  parallel_for(n, 1 << 15, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) dx[i] = dy[i] * static_cast<T>(slope(saved[i]));
  });
}

}  // namespace

template <class T>
void unary_backward(Unary op, double p, std::int64_t n, const T* saved, const T* dy, T* dx) {
  switch (op) {
    case Unary::Neg: return times_slope(n, saved, dy, dx, [](T) { return T(-1); });
    case Unary::Pow:
      if (p == 0.0) return times_slope(n, saved, dy, dx, [](T) { return T(0); });
      return times_slope(n, saved, dy, dx, [p](T v) { return p * std::pow(v, p - 1.0); });
    case Unary::Exp: return times_slope(n, saved, dy, dx, [](T y) { return y; });
    case Unary::Log: return times_slope(n, saved, dy, dx, [](T v) { return 1 / v; });
    case Unary::Sqrt: return times_slope(n, saved, dy, dx, [](T y) { return 1 / (2 * y); });
    case Unary::Tanh: return times_slope(n, saved, dy, dx, [](T y) { return 1 - y * y; });
    case Unary::Sigmoid: return times_slope(n, saved, dy, dx, [](T y) { return y * (1 - y); });
    case Unary::Erfc:
      return times_slope(n, saved, dy, dx, [](T v) { return -2 * std::numbers::inv_sqrtpi * std::exp(-(v * v)); });
    case Unary::Relu: return times_slope(n, saved, dy, dx, [](T v) { return v > 0 ? T(1) : T(0); });
    case Unary::Abs: return times_slope(n, saved, dy, dx, [](T v) { return v > 0 ? T(1) : v < 0 ? T(-1) : T(0); });
  }
}

template void unary_backward(Unary, double, std::int64_t, const float*, const float*, float*);
template void unary_backward(Unary, double, std::int64_t, const double*, const double*, double*);

}  // namespace ag::backends::cpu
