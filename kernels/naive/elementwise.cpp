// The elementwise functions of ops/elementwise.cpp as one plain loop with the C library's
// functions (kernels/table.h); the fast twins are in kernels/cpu/elementwise.cpp.
//
//   y[i] = f(x[i]):  -x,  x^p,  e^x,  ln x,  sqrt x,  tanh x,  1 / (1 + e^-x),  erfc x,  max(x, 0)
#include <cmath>
#include <numbers>

#include "naive.h"

namespace ag::backends::naive {

template <class T>
void unary(Unary op, double p, std::int64_t n, const T* x, T* y) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) {
    T v = x[i];
    switch (op) {
      case Unary::Neg: y[i] = -v; break;
      case Unary::Pow: y[i] = static_cast<T>(std::pow(v, p)); break;
      case Unary::Exp: y[i] = std::exp(v); break;
      case Unary::Log: y[i] = std::log(v); break;
      case Unary::Sqrt: y[i] = std::sqrt(v); break;
      case Unary::Tanh: y[i] = std::tanh(v); break;
      case Unary::Sigmoid: y[i] = 1 / (1 + std::exp(-v)); break;
      case Unary::Erfc: y[i] = std::erfc(v); break;
      case Unary::Relu: y[i] = v < 0 ? T(0) : v; break;  // NaN is not < 0: it passes through
      case Unary::Abs: y[i] = std::abs(v); break;
    }
  }
}

// dx[i] = dy[i] f'(i), f' from the saved input v or output y (kernels/table.h says which)
template <class T>
void unary_backward(Unary op, double p, std::int64_t n, const T* saved, const T* dy, T* dx) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) {
    T v = saved[i], slope = 0;
    switch (op) {
      case Unary::Neg: slope = -1; break;
      case Unary::Pow: slope = p == 0.0 ? T(0) : static_cast<T>(p * std::pow(v, p - 1.0)); break;
      case Unary::Exp: slope = v; break;                // y
      case Unary::Log: slope = 1 / v; break;            // 1 / x
      case Unary::Sqrt: slope = 1 / (2 * v); break;     // 1 / (2y)
      case Unary::Tanh: slope = 1 - v * v; break;       // 1 - y^2
      case Unary::Sigmoid: slope = v * (1 - v); break;  // y (1 - y)
      case Unary::Erfc: slope = static_cast<T>(-2 * std::numbers::inv_sqrtpi * std::exp(-(v * v))); break;
      case Unary::Relu: slope = v > 0 ? T(1) : T(0); break;
      case Unary::Abs: slope = v > 0 ? T(1) : v < 0 ? T(-1) : T(0); break;  // the sign; 0 at 0 and for NaN
    }
    dx[i] = dy[i] * slope;
  }
}

// The two precisions of the table (table.cpp).
template void unary(Unary, double, std::int64_t, const float*, float*);
template void unary(Unary, double, std::int64_t, const double*, double*);
template void unary_backward(Unary, double, std::int64_t, const float*, const float*, float*);
template void unary_backward(Unary, double, std::int64_t, const double*, const double*, double*);

}  // namespace ag::backends::naive
