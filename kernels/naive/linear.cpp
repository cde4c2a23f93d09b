// linear, linear_gelu and gelu as plain loops; the fast twins are kernels/cpu/linear.cpp and
// gelu.cpp, the ops ops/fused/linear.cpp and gelu.cpp. Sizes: R rows, I inputs, O outputs.
//
//   x: [R, I]   W: [O, I]   b: [O]   h, y, slope, dy: [R, O]
//
// `products` is always the plain policy here (the naive table says bf16_products = false), so it
// is not read: every product is three loops with a double accumulator.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "naive.h"

namespace ag::backends::naive {

namespace {

// GELU's value and slope at v, in double:
//   exact:  y = v Phi(v),  Phi(v) = (1 + erf(v / sqrt 2)) / 2
//           y' = Phi(v) + v phi(v),  phi(v) = e^(-v^2/2) / sqrt(2 pi)        (product rule, Phi' = phi)
//   tanh:   y = v/2 (1 + t),  t = tanh u,  u = sqrt(2/pi) (v + 0.044715 v^3)
//           y' = (1 + t)/2 + v/2 (1 - t^2) u',  u' = sqrt(2/pi) (1 + 3 * 0.044715 v^2)   (tanh' = 1 - tanh^2)
struct ValueAndSlope {
  double value, slope;
};
ValueAndSlope gelu_at(double v, GeluForm form) {
  if (form == GeluForm::Exact) {
    double cdf = 0.5 * (1 + std::erf(v / std::numbers::sqrt2));
    double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
    return {v * cdf, cdf + v * pdf};
  }
  const double a = std::sqrt(2 / std::numbers::pi), c = 0.044715;
  double t = std::tanh(a * (v + c * v * v * v));
  double du = a * (1 + 3 * c * v * v);
  return {0.5 * v * (1 + t), 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du};
}

// h[r, o] = b[o] + sum_i x[r, i] W[o, i]: one output of x W^T + b.
template <class T>
double affine_at(const LinearSizes& n, const T* x, const T* w, const T* b, std::int64_t r, std::int64_t o) {
  double sum = b ? b[o] : 0.0;
  for (std::int64_t i = 0; i < n.in; ++i) sum += static_cast<double>(x[r * n.in + i]) * w[o * n.in + i];
  return sum;
}

}  // namespace

// y = x W^T + b:   y[r, o] = b[o] + sum_i x[r, i] W[o, i]      (b may be null: no bias)
template <class T>
void linear(const Products&, const LinearSizes& n, const T* x, const T* w, const T* b, T* y) {
  count_call();
  for (std::int64_t r = 0; r < n.rows; ++r)
    for (std::int64_t o = 0; o < n.out; ++o) y[r * n.out + o] = static_cast<T>(affine_at(n, x, w, b, r, o));
}

// h = x W^T + b,  y = GELU(h),  slope = GELU'(h)  (slope may be null: not kept).
// h is rounded to T before GELU, so that this equals linear followed by gelu exactly.
template <class T>
void linear_gelu(const Products&, const LinearSizes& n, const T* x, const T* w, const T* b, T* y, T* slope,
                 GeluForm form) {
  count_call();
  for (std::int64_t r = 0; r < n.rows; ++r)
    for (std::int64_t o = 0; o < n.out; ++o) {
      T h = static_cast<T>(affine_at(n, x, w, b, r, o));
      ValueAndSlope g = gelu_at(h, form);
      y[r * n.out + o] = static_cast<T>(g.value);
      if (slope) slope[r * n.out + o] = static_cast<T>(g.slope);
    }
}

// From dy [R, O], with g = dy (linear) or g = dy * slope (linear_gelu: the chain rule through
// y = GELU(h) gives dL/dh = dy GELU'(h)):
//   dx[r, i] = sum_o g[r, o] W[o, i]      (h[r, o] depends on x[r, i] through W[o, i])
//   dW[o, i] = sum_r g[r, o] x[r, i]      (and on W[o, i] through x[r, i], in every row r)
//   db[o]    = sum_r g[r, o]
// Each of dx, dW, db may be null (not wanted); x is read only for dW. x_rounded is the bf16 copy
// a bf16 policy would read instead of x, and is never given here.
//
// One pass over the rows: for each (r, o), g[r, o] times row o of W goes into row r of dx, and
// g[r, o] times row r of x into row o of dW, so that every inner loop walks along a row in
// memory. The sums are gathered in double and stored once.
template <class T>
void linear_backward(const Products&, const LinearSizes& n, const T* dy, const T* slope, const T* x,
                     const std::uint16_t*, const T* w, T* dx, T* dw, T* db) {
  count_call();
  std::vector<double> dx_row(static_cast<std::size_t>(n.in)), dw_sum(dw ? static_cast<std::size_t>(n.out * n.in) : 0),
      db_sum(static_cast<std::size_t>(n.out));
  for (std::int64_t r = 0; r < n.rows; ++r) {
    std::fill(dx_row.begin(), dx_row.end(), 0.0);
    for (std::int64_t o = 0; o < n.out; ++o) {
      double g = dy[r * n.out + o];
      if (slope) g *= slope[r * n.out + o];
      for (std::int64_t i = 0; i < n.in; ++i) dx_row[static_cast<std::size_t>(i)] += g * w[o * n.in + i];
      if (dw)
        for (std::int64_t i = 0; i < n.in; ++i) dw_sum[static_cast<std::size_t>(o * n.in + i)] += g * x[r * n.in + i];
      db_sum[static_cast<std::size_t>(o)] += g;
    }
    if (dx)
      for (std::int64_t i = 0; i < n.in; ++i) dx[r * n.in + i] = static_cast<T>(dx_row[static_cast<std::size_t>(i)]);
  }
  if (dw)
    for (std::int64_t j = 0; j < n.out * n.in; ++j) dw[j] = static_cast<T>(dw_sum[static_cast<std::size_t>(j)]);
  if (db)
    for (std::int64_t o = 0; o < n.out; ++o) db[o] = static_cast<T>(db_sum[static_cast<std::size_t>(o)]);
}

// y[i] = GELU(x[i]),  slope[i] = GELU'(x[i])  (slope may be null)      x, y, slope: [n]
template <class T>
void gelu(std::int64_t n, const T* x, T* y, T* slope, GeluForm form) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) {
    ValueAndSlope g = gelu_at(x[i], form);
    y[i] = static_cast<T>(g.value);
    if (slope) slope[i] = static_cast<T>(g.slope);
  }
}

// The two precisions of the table (table.cpp).
template void linear(const Products&, const LinearSizes&, const float*, const float*, const float*, float*);
template void linear(const Products&, const LinearSizes&, const double*, const double*, const double*, double*);
template void linear_gelu(const Products&, const LinearSizes&, const float*, const float*, const float*, float*, float*,
                          GeluForm);
template void linear_gelu(const Products&, const LinearSizes&, const double*, const double*, const double*, double*,
                          double*, GeluForm);
template void linear_backward(const Products&, const LinearSizes&, const float*, const float*, const float*,
                              const std::uint16_t*, const float*, float*, float*, float*);
template void linear_backward(const Products&, const LinearSizes&, const double*, const double*, const double*,
                              const std::uint16_t*, const double*, double*, double*, double*);
template void gelu(std::int64_t, const float*, float*, float*, GeluForm);
template void gelu(std::int64_t, const double*, double*, double*, GeluForm);

}  // namespace ag::backends::naive
