// exp, tanh and the normal distribution's CDF and density for float32 in plain arithmetic, so that a loop calling them
// compiles to SIMD instructions. A call to std::exp or std::erf is opaque to the vectoriser (and keeps errno
// semantics), so such a loop runs one element at a time; in a training step that made GELU and softmax about a sixth of
// the time. float64 keeps the standard library: it is the type the gradient checks run in, and the one where the last
// bits matter.
//
// exp(x) = 2^n * exp(r),  n = round(x / ln 2),  r = x - n ln 2 in [-ln2/2, ln2/2]
//   ln 2 is split into a short high part and a low correction (Cody and Waite), so n * ln2_hi
//   is exact and r loses nothing; exp(r) is a degree-7 polynomial (coefficients from Cephes'
//   expf, relative error about 1 ulp over that interval); 2^n is put straight into the float's
//   exponent bits.
//
// erfc(z), z >= 0, with t = 1 / (1 + z/2) mapping z in [0, inf) onto t in (0, 1]:
//   erfc(z) = t e^(-z^2) Q(t),  Q(t) = erfc(z) e^(z^2) / t,
//   where Q is smooth, Q(1) = 1 and Q(t) -> 1 / (2 sqrt pi) as z grows, so a polynomial in t keeps
//   its relative error in the far tail too, where 1 - erf(z) computed from an erf would have
//   cancelled to nothing. The same substitution as Numerical Recipes' "erfcc" (2nd ed., section
//   6.2), which fits the exponent instead and so needs a second exp. Q's polynomials are fitted
//   by tools/fit_normal_tail.py: degree 8, relative error about 2e-7 evaluated in float, for
//   normal(); degree 5, 2.5e-5, for normal_bf16(). GELU needs e^(-z^2) = e^(-x^2/2) for the
//   density anyway, so Phi and phi together cost one exp.
//
// Vectorisable is not yet vectorised well: the x86-64 baseline the library is compiled for has
// 4-wide SSE2 and no fused multiply-add. Hot loops are marked AG_SIMD_CLONES, which compiles
// them three times, for that baseline, for x86-64-v3 (AVX2 + FMA, any x86 CPU since 2013) and
// for x86-64-v4 (AVX-512: 16 lanes and 32 registers, so GELU's constants stay in registers), and
// picks one when the library loads. On the GELU loop of a training step v3 is 5x the baseline.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// Not under ThreadSanitizer: the clone picker runs while the library is relocated, before the
// sanitizer's runtime is ready, and its instrumented code crashes there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define AG_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AG_SIMD_CLONES
#endif

namespace ag::fast {

namespace detail {
// exp for x already known to lie in [-87, 88]: the range reduction and polynomial above, with
// no checks for overflow, underflow or NaN. The clamp only keeps the conversion to an integer
// defined whatever comes in; callers guarantee the range.
inline float exp_in_range(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc >= -87.0f ? xc : -87.0f;  // a NaN lands here too
  float n = (xc * kLog2e + kRound) - kRound;
  float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}
}  // namespace detail

inline float exp(float x) {
  float y = detail::exp_in_range(x);
  y = x < -87.0f ? 0.0f : y;  // flushed to 0 below e^-87 = 1.6e-38, next to the smallest normal
  y = x > 88.0f ? INFINITY : y;
  return x != x ? x : y;  // NaN in, NaN out
}

// The standard normal distribution at x: cdf = Phi(x) = P(N(0, 1) <= x) and pdf = phi(x).
template <class T>
struct Normal {
  T cdf, pdf;
};

// Both share e^(-x^2/2). Its exponent must be exact: x^2/2 rounded to float is off by up to
// 4e-6 when it is near 80, and so would the result be, relatively. So x is split into a head
// with 12 significant bits, whose square is exact in float, and a small tail:
//   x^2 = h^2 + (x - h)(x + h),   e^(-x^2/2) = e^(-h^2/2) e^s,   s = -(x - h)(x + h)/2.
// |x - h| < 2^-11 |x|, so |s| < 0.06 for |x| <= 13.5, and e^s needs only the Taylor series to
// s^4 (error below s^5/120 < 7e-9). Beyond |x| = 13.5 the density is below e^-91 and rounds to
// 0 in float, as does the CDF's tail; x is clamped there.
inline Normal<float> normal(float x) {
  constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
  float xc = x > 13.5f ? 13.5f : x;
  xc = xc < -13.5f ? -13.5f : xc;
  float h = std::bit_cast<float>(std::bit_cast<std::uint32_t>(xc) & 0xFFFFF000u);
  float head_exponent = -0.5f * h * h;  // exact, in [-91.2, 0]
  float head = head_exponent < -87.0f ? 0.0f : detail::exp_in_range(head_exponent);
  float s = -0.5f * (xc - h) * (xc + h);
  float gauss = head * (1.0f + s * (1.0f + s * (0.5f + s * (1.0f / 6.0f + s * (1.0f / 24.0f)))));
  float z = (xc < 0.0f ? -xc : xc) * kInvSqrt2;  // erfc(z) = P(N(0, 1) > |x|) * 2
  float t = 1.0f / (1.0f + 0.5f * z);
  float q = -5.890968442e-02f;
  q = q * t + 2.837947309e-01f;
  q = q * t - 4.855769575e-01f;
  q = q * t + 2.762008011e-01f;
  q = q * t - 2.533232979e-02f;
  q = q * t + 2.021359056e-01f;
  q = q * t + 2.432441264e-01f;
  q = q * t + 2.823558450e-01f;
  q = q * t + 2.820875347e-01f;
  float upper_tail = 0.5f * t * gauss * q;  // erfc(z) / 2, with e^(-z^2) = gauss
  float cdf = x < 0.0f ? upper_tail : 1.0f - upper_tail, pdf = kInvSqrt2Pi * gauss;
  return {x != x ? x : cdf, x != x ? x : pdf};  // NaN in, NaN out
}

// The same to a relative 3e-5, for values that are rounded to bf16 next (a relative error of up
// to 2^-9 = 2e-3, 60 times as large): linear_gelu's output and slope under bf16 products. The
// exponent -x^2/2 is rounded once (a relative error below 91 * 2^-24 = 5.4e-6 in e^(-x^2/2))
// instead of split, and Q has degree 5; in a loop it runs in 0.85 of normal()'s time.
inline Normal<float> normal_bf16(float x) {
  constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
  float xc = x > 13.5f ? 13.5f : x;
  xc = xc < -13.5f ? -13.5f : xc;
  float exponent = -0.5f * xc * xc;  // in [-91.2, 0]
  float gauss = exponent < -87.0f ? 0.0f : detail::exp_in_range(exponent);
  float z = (xc < 0.0f ? -xc : xc) * kInvSqrt2;
  float t = 1.0f / (1.0f + 0.5f * z);
  float q = -5.556658283e-02f;
  q = q * t - 1.681336015e-02f;
  q = q * t + 3.123255968e-01f;
  q = q * t + 1.842539310e-01f;
  q = q * t + 2.945855856e-01f;
  q = q * t + 2.811903059e-01f;
  float upper_tail = 0.5f * t * gauss * q;
  float cdf = x < 0.0f ? upper_tail : 1.0f - upper_tail, pdf = kInvSqrt2Pi * gauss;
  return {x != x ? x : cdf, x != x ? x : pdf};
}

// tanh, odd, so computed on a = |x| with the sign put back:
//   a < 0.625:  tanh a = a + a^3 P(a^2), P of degree 4 (coefficients from Cephes' tanhf; relative
//               error about 1 ulp), which avoids the cancellation of 1 - e^-2a near 0;
//   otherwise:  tanh a = 1 - 2 / (e^2a + 1), where the subtraction loses at most a bit.
// Above a = 44 e^2a is clamped (tanh a is 1 in float from a = 9.1). Both sides are computed and
// one selected, so a loop of them has no branch.
inline float tanh(float x) {
  float a = std::fabs(x);
  float s = a * a;
  float p = -5.70498872745e-3f;
  p = p * s + 2.06390887954e-2f;
  p = p * s - 5.37397155531e-2f;
  p = p * s + 1.33314422036e-1f;
  p = p * s - 3.33332819422e-1f;
  float near_zero = a + a * s * p;
  float far = 1.0f - 2.0f / (detail::exp_in_range(a > 44.0f ? 88.0f : a + a) + 1.0f);
  float t = a < 0.625f ? near_zero : far;
  t = std::copysign(t, x);  // -0 stays -0
  return x != x ? x : t;    // NaN in, NaN out
}

// The same names for double: the standard library.
inline double exp(double x) { return std::exp(x); }
inline double tanh(double x) { return std::tanh(x); }
inline Normal<double> normal(double x) {
  return {0.5 * std::erfc(-x * 0.70710678118654752440), 0.39894228040143268 * std::exp(-0.5 * x * x)};
}

// y[i] = tanh(x[i]) for i < n.
void tanh_each(const float* x, float* y, std::int64_t n);
void tanh_each(const double* x, double* y, std::int64_t n);

// x[i] = exp(x[i] - shift) for i < n, in place: the exponentials of a softmax row.
void exp_shifted(float* x, std::int64_t n, float shift);
void exp_shifted(double* x, std::int64_t n, double shift);

// Sum of term(j) for j in [0, n), in double. One running sum is a chain of dependent additions
// (about 4 cycles each) that the compiler may not reorder; kLanes interleaved partial sums
// vectorise. They are added in a fixed order, so the result does not vary from run to run.
template <class Term>
[[gnu::always_inline]] inline double lane_sum(std::int64_t n, Term term) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(term(j + l));
  double total = 0.0;
  for (; j < n; ++j) total += static_cast<double>(term(j));
  for (int l = 0; l < kLanes; ++l) total += lane[l];
  return total;
}

// The largest of x[0..n), from `start` (-inf for a plain max), in kLanes interleaved running
// maxima for the same reason. Like std::max, a NaN element never replaces the running value.
template <class T>
[[gnu::always_inline]] inline T lane_max(const T* x, std::int64_t n, T start) {
  constexpr int kLanes = 8;
  T lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = start;
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = lane[l] < x[j + l] ? x[j + l] : lane[l];
  T m = start;
  for (; j < n; ++j) m = m < x[j] ? x[j] : m;
  for (int l = 0; l < kLanes; ++l) m = m < lane[l] ? lane[l] : m;
  return m;
}

}  // namespace ag::fast
