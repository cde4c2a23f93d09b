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
// The complementary error function, 1 - erf(x): what the exact GELU is written with.
Tensor erfc(const Tensor& x);
// GELU(x) = x * Phi(x), Phi the standard normal CDF (exact, with erf), or GPT-2's tanh
// approximation of it.
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);

namespace detail {
// y[i] = GELU(x[i]) and, when slope is not null, slope[i] = GELU'(x[i]), for i < n. y may be x
// (in place); slope must not overlap either. The loop behind gelu() (fused/gelu.cpp), also used
// by linear_gelu (nn_ops.h) on each band of rows straight after its product.
void gelu_loop(const float* x, float* y, float* slope, std::int64_t n, GeluApproximation approximate);
void gelu_loop(const double* x, double* y, double* slope, std::int64_t n, GeluApproximation approximate);
// The same for values rounded to bf16 next (linear_gelu under bf16 products): the exact form from
// fast::normal_bf16, to a relative 3e-5 rather than 5e-7 (kernels/cpu/fast_math.h). The tanh form is
// gelu_loop's.
void gelu_loop_bf16(const float* x, float* y, float* slope, std::int64_t n, GeluApproximation approximate);
// GELU''(x), elementwise: phi(x) (2 - x^2), or the tanh form's (forward over reverse).
Tensor gelu_curvature(const Tensor& x, GeluApproximation approximate);
}  // namespace detail

}  // namespace ag
