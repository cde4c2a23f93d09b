// Elementwise functions of one tensor: y_i = f(x_i), so dL/dx_i = dL/dy_i * f'(x_i).
#pragma once

#include "../autograd/tensor.h"

namespace ag {

Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// |x|, whose gradient at 0 is 0 (as in PyTorch).
Tensor abs(const Tensor& x);
// The complementary error function, 1 - erf(x): what the exact GELU is written with.
Tensor erfc(const Tensor& x);
// GELU(x) = x * Phi(x), Phi the standard normal CDF (exact, with erf), or GPT-2's tanh
// approximation of it.
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);

}  // namespace ag
