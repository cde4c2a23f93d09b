// GELU's value and slope on n values: the cpu backend's loops behind the gelu op
// (ops/fused/gelu.cpp) and the epilogue of linear_gelu's bands (cpu/linear.cpp).
#include <cmath>
#include <numbers>
#include <utility>

#include "../../runtime/parallel.h"
#include "fast_math.h"
#include "kernels.h"

namespace ag::backends::cpu {

// Exact:  y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
//         dy/dx = Phi(x) + x phi(x),  phi(x) = e^(-x^2/2) / sqrt(2 pi)   (product rule; Phi' = phi)
// Tanh:   y = x/2 (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//         dy/dx = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Both are computed in the tensor's own type, double for float64 and float math for float32;
// the exact form's Phi and phi come from fast_math.h, written so that the loop runs in SIMD.
constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;

namespace {

// y[i] = f(x[i]) and, when slope is not null, slope[i] = f'(x[i]); `f(v)` returns both.
// Two loops rather than a test inside one, so that each compiles to SIMD code.
template <class T, class F>
[[gnu::always_inline]] inline void value_and_slope_loop(const T* x, T* y, T* slope, std::int64_t n, F f) {
  if (slope)
    for (std::int64_t i = 0; i < n; ++i) {
      auto [value, d] = f(x[i]);
      y[i] = value;
      slope[i] = d;
    }
  else
    for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i]).first;
}

template <class T>
std::pair<T, T> gelu_exact(T v) {
  auto [cdf, pdf] = fast::normal(v);  // Phi(v) and phi(v)
  return {v * cdf, cdf + v * pdf};
}

template <class T>
std::pair<T, T> gelu_tanh(T v) {
  T t = fast::tanh(T(kSqrt2OverPi) * (v + T(kCubic) * v * v * v));
  T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * v * v);
  return {T(0.5) * v * (T(1) + t), T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du};
}

// The float32 loops (the exact one is where a GPT step spends its time) are compiled for AVX2 +
// FMA too.
AG_SIMD_CLONES void gelu_exact_loop(const float* x, float* y, float* slope, std::int64_t n) {
  value_and_slope_loop(x, y, slope, n, [](float v) { return gelu_exact(v); });
}
AG_SIMD_CLONES void gelu_exact_bf16_loop(const float* x, float* y, float* slope, std::int64_t n) {
  value_and_slope_loop(x, y, slope, n, [](float v) {
    auto [cdf, pdf] = fast::normal_bf16(v);
    return std::pair<float, float>{v * cdf, cdf + v * pdf};
  });
}
AG_SIMD_CLONES void gelu_tanh_loop(const float* x, float* y, float* slope, std::int64_t n) {
  value_and_slope_loop(x, y, slope, n, [](float v) { return gelu_tanh(v); });
}
void gelu_exact_loop(const double* x, double* y, double* slope, std::int64_t n) {
  value_and_slope_loop(x, y, slope, n, [](double v) { return gelu_exact(v); });
}

}  // namespace

void gelu_loop(const float* x, float* y, float* slope, std::int64_t n, GeluForm form) {
  if (form == GeluForm::Exact)
    gelu_exact_loop(x, y, slope, n);
  else
    gelu_tanh_loop(x, y, slope, n);
}
void gelu_loop_bf16(const float* x, float* y, float* slope, std::int64_t n, GeluForm form) {
  if (form == GeluForm::Exact)
    gelu_exact_bf16_loop(x, y, slope, n);
  else
    gelu_loop(x, y, slope, n, form);
}
void gelu_loop(const double* x, double* y, double* slope, std::int64_t n, GeluForm form) {
  if (form == GeluForm::Exact)
    gelu_exact_loop(x, y, slope, n);
  else
    value_and_slope_loop(x, y, slope, n, [](double v) { return gelu_tanh(v); });
}

// The op: the loop above over chunks of 4096 values, one chunk per thread.
template <class T>
void gelu(std::int64_t n, const T* x, T* y, T* slope, GeluForm form) {
  parallel_for(n, 4096, [&](std::int64_t begin, std::int64_t end) {
    gelu_loop(x + begin, y + begin, slope ? slope + begin : nullptr, end - begin, form);
  });
}
template void gelu(std::int64_t, const float*, float*, float*, GeluForm);
template void gelu(std::int64_t, const double*, double*, double*, GeluForm);

// GELU''(v), in double whatever T is (only the rules of the second order read it):
//   exact:  d/dv (Phi + v phi) = 2 phi + v phi' = phi (2 - v^2)
//   tanh:   u = a (v + c v^3), t = tanh u: GELU' = (1 + t) / 2 + v (1 - t^2) u' / 2, and its
//           derivative (1 - t^2) (u' - v t u'^2 + v u'' / 2)
template <class T>
void gelu_curvature(std::int64_t n, const T* x, T* out, GeluForm form) {
  for (std::int64_t i = 0; i < n; ++i) {
    double v = x[i];
    if (form == GeluForm::Exact) {
      out[i] =
          static_cast<T>(std::exp(-0.5 * v * v) * 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2 * (2 - v * v));
      continue;
    }
    double u1 = kSqrt2OverPi * (1 + 3 * kCubic * v * v), u2 = kSqrt2OverPi * 6 * kCubic * v;
    double t = std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    out[i] = static_cast<T>((1 - t * t) * (u1 - v * t * u1 * u1 + 0.5 * v * u2));
  }
}
template void gelu_curvature(std::int64_t, const float*, float*, GeluForm);
template void gelu_curvature(std::int64_t, const double*, double*, GeluForm);

}  // namespace ag::backends::cpu
