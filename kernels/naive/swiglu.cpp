// swiglu and its backward as plain loops; the fast twin is kernels/cpu/swiglu.cpp, the op
// ops/fused/swiglu.cpp. Sizes: R rows, I inputs, H hidden units, O outputs. h1 is what LLaMA
// calls the gate and h3 the up projection; the loops name them so.
//
//   x: [R, I]   W1, W3: [H, I]   W2: [O, H]   y, dy: [R, O]   h1, h3, a: [R, H]
//
// `products` is always the plain policy here (the naive table says bf16_products = false), so it
// is not read: every product is a loop with a double accumulator.
#include <algorithm>
#include <cmath>
#include <vector>

#include "naive.h"

namespace ag::backends::naive {

namespace {

// silu and its slope at v, in double, with s = sigmoid(v) = 1 / (1 + e^-v):
//   silu(v)  = v s
//   silu'(v) = s + v s (1 - s) = s (1 + v (1 - s))           (product rule; sigmoid' = s (1 - s))
// For every finite v both are finite: far below zero e^-v overflows to inf and s = 0, so both
// are -0; far above, s = 1. At v = -inf or +inf the products would be inf * 0 = NaN, so the
// limits are returned: silu(-inf) = 0, silu'(-inf) = 0, silu(inf) = inf, silu'(inf) = 1.
struct ValueAndSlope {
  double value, slope;
};
ValueAndSlope silu_at(double v) {
  if (std::isinf(v)) return v > 0 ? ValueAndSlope{v, 1} : ValueAndSlope{0, 0};
  double s = 1 / (1 + std::exp(-v));
  return {v * s, s * (1 + v * (1 - s))};
}

// sum_i u[i] v[i] over n values, in double: one element of a product x W^T, u a row of x and v a
// row of W.
template <class T>
double dot(const T* u, const T* v, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(u[i]) * v[i];
  return sum;
}

}  // namespace

// h1 = x W1^T,   h3 = x W3^T,   a = silu(h1) h3,   y = a W2^T:
//   h1[r, j] = sum_i x[r, i] W1[j, i]          h3[r, j] = sum_i x[r, i] W3[j, i]
//   a[r, j]  = silu(h1[r, j]) h3[r, j]         y[r, o]  = sum_j a[r, j] W2[o, j]
// h1 and h3 (each may be null: not kept) are rounded to T before a is made from them, so that a
// here is exactly the a backward makes again from the kept h1 and h3.
template <class T>
void swiglu(const Products&, const SwigluSizes& n, const T* x, const T* w1, const T* w3, const T* w2, T* y, T* h1,
            T* h3) {
  count_call();
  std::int64_t rows = n.rows, in = n.in, hidden = n.hidden, out = n.out;
  std::vector<double> a_row(static_cast<std::size_t>(hidden));
  double* a = a_row.data();  // row r of a
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < hidden; ++j) {
      T gate = static_cast<T>(dot(x + r * in, w1 + j * in, in));  // h1[r, j]
      T up = static_cast<T>(dot(x + r * in, w3 + j * in, in));    // h3[r, j]
      if (h1) h1[r * hidden + j] = gate;
      if (h3) h3[r * hidden + j] = up;
      a[j] = silu_at(gate).value * up;
    }
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (std::int64_t j = 0; j < hidden; ++j) sum += a[j] * w2[o * hidden + j];
      y[r * out + o] = static_cast<T>(sum);
    }
  }
}

// From dy [R, O], row by row, with a[r, :] made again from h1[r, :] and h3[r, :]:
//   da[r, j]   = sum_o dy[r, o] W2[o, j]    (a[r, j] reaches every y[r, o], through W2[o, j])
//   dW2[o, j] += dy[r, o] a[r, j]           (W2[o, j] reaches y[r, o] through a[r, j], in every row)
//   dh3[r, j]  = da[r, j] silu(h1[r, j])                 (a = silu(h1) h3, so d a / d h3 = silu(h1))
//   dh1[r, j]  = da[r, j] h3[r, j] silu'(h1[r, j])       (and d a / d h1 = h3 silu'(h1))
//   dx[r, i]   = sum_j dh1[r, j] W1[j, i] + dh3[r, j] W3[j, i]
//                                  (x[r, i] reaches h1[r, j] through W1[j, i], and h3[r, j] through W3[j, i])
//   dW1[j, i] += dh1[r, j] x[r, i],   dW3[j, i] += dh3[r, j] x[r, i]
//                                  (W1[j, i] reaches h1[r, j] through x[r, i], in every row; W3 likewise)
// Each of dx, dW1, dW3, dW2 may be null (not wanted). The weight gradients are sums over the
// rows, gathered in double and rounded to T once, when stored at the end.
template <class T>
void swiglu_backward(const Products&, const SwigluSizes& n, const T* dy, const T* x, const T* w1, const T* w3,
                     const T* w2, const T* h1, const T* h3, T* dx, T* dw1, T* dw3, T* dw2) {
  count_call();
  std::int64_t rows = n.rows, in = n.in, hidden = n.hidden, out = n.out;
  auto zeros = [](std::int64_t count) { return std::vector<double>(static_cast<std::size_t>(count)); };
  std::vector<double> da_row = zeros(hidden), dh1_row = zeros(hidden), dh3_row = zeros(hidden), dx_row = zeros(in);
  std::vector<double> dw1_sums = zeros(dw1 ? hidden * in : 0), dw3_sums = zeros(dw3 ? hidden * in : 0),
                      dw2_sums = zeros(dw2 ? out * hidden : 0);
  double *da = da_row.data(), *dh1 = dh1_row.data(), *dh3 = dh3_row.data(), *dx_r = dx_row.data();
  double *dw1_sum = dw1_sums.data(), *dw3_sum = dw3_sums.data(), *dw2_sum = dw2_sums.data();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T *dy_r = dy + r * out, *x_r = x + r * in;
    // da = dy W2 (this row): dy[r, o] times row o of W2, summed over o
    std::fill(da, da + hidden, 0.0);
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t j = 0; j < hidden; ++j) da[j] += static_cast<double>(dy_r[o]) * w2[o * hidden + j];
    for (std::int64_t j = 0; j < hidden; ++j) {
      ValueAndSlope silu = silu_at(h1[r * hidden + j]);
      double up = h3[r * hidden + j];
      if (dw2)  // dW2 += dy^T a (this row's part), a = silu(h1) h3
        for (std::int64_t o = 0; o < out; ++o) dw2_sum[o * hidden + j] += dy_r[o] * silu.value * up;
      dh3[j] = da[j] * silu.value;       // dh3 = da silu(h1)
      dh1[j] = da[j] * up * silu.slope;  // dh1 = da h3 silu'(h1)
    }
    // dx = dh1 W1 + dh3 W3, dW1 += dh1^T x, dW3 += dh3^T x (this row's parts), along rows of W1, W3, x
    std::fill(dx_r, dx_r + in, 0.0);
    for (std::int64_t j = 0; j < hidden; ++j)
      for (std::int64_t i = 0; i < in; ++i) {
        dx_r[i] += dh1[j] * w1[j * in + i] + dh3[j] * w3[j * in + i];
        if (dw1) dw1_sum[j * in + i] += dh1[j] * x_r[i];
        if (dw3) dw3_sum[j * in + i] += dh3[j] * x_r[i];
      }
    if (dx)
      for (std::int64_t i = 0; i < in; ++i) dx[r * in + i] = static_cast<T>(dx_r[i]);
  }
  for (std::int64_t k = 0; dw1 && k < hidden * in; ++k) dw1[k] = static_cast<T>(dw1_sum[k]);
  for (std::int64_t k = 0; dw3 && k < hidden * in; ++k) dw3[k] = static_cast<T>(dw3_sum[k]);
  for (std::int64_t k = 0; dw2 && k < out * hidden; ++k) dw2[k] = static_cast<T>(dw2_sum[k]);
}

// The two precisions of the table (table.cpp).
template void swiglu(const Products&, const SwigluSizes&, const float*, const float*, const float*, const float*,
                     float*, float*, float*);
template void swiglu(const Products&, const SwigluSizes&, const double*, const double*, const double*, const double*,
                     double*, double*, double*);
template void swiglu_backward(const Products&, const SwigluSizes&, const float*, const float*, const float*,
                              const float*, const float*, const float*, const float*, float*, float*, float*, float*);
template void swiglu_backward(const Products&, const SwigluSizes&, const double*, const double*, const double*,
                              const double*, const double*, const double*, const double*, double*, double*, double*,
                              double*);

}  // namespace ag::backends::naive
