// The elementwise functions of ops/elementwise.cpp as one plain loop with the C library's
// functions (kernels/table.h); the fast twins are in kernels/cpu/elementwise.cpp.
//
//   y[i] = f(x[i]):  -x,  x^p,  e^x,  ln x,  sqrt x,  tanh x,  1 / (1 + e^-x),  erfc x,  max(x, 0)
#include <cmath>

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
    }
  }
}

// The two precisions of the table (table.cpp).
template void unary(Unary, double, std::int64_t, const float*, float*);
template void unary(Unary, double, std::int64_t, const double*, double*);

}  // namespace ag::backends::naive
