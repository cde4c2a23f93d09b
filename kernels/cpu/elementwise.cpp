// The elementwise functions of ops/elementwise.cpp (kernels/table.h), one loop each; the naive
// twins are in kernels/naive/elementwise.cpp. float32's tanh is fast::tanh, in plain arithmetic
// so that its loop vectorises (std::tanh, one element at a time, was a fifth of a small tanh
// MLP's training step); the others call the C library.
#include <cmath>

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
  }
}

template void unary(Unary, double, std::int64_t, const float*, float*);
template void unary(Unary, double, std::int64_t, const double*, double*);

}  // namespace ag::backends::cpu
