// Checks kernels/cpu/fast_math.h against the standard library evaluated in double: relative error of
// exp over the whole float range it covers, of tanh over every magnitude, of the normal CDF out
// to its far left tail, and the special values.
#include "../../kernels/cpu/fast_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ag {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Every 97th float of either sign in [lo, hi): about 4 * 10^7 values over all exponents.
template <class F>
void for_floats(float lo, float hi, F f) {
  for (std::uint32_t bits = 0; bits < 0x7f800000u; bits += 97) {
    float a = std::bit_cast<float>(bits);
    if (a >= lo && a < hi) f(a);
    if (-a >= lo && -a < hi && bits != 0) f(-a);
  }
}

TEST(FastMath, ExpRelativeErrorWithinTwoUlp) {
  double worst = 0.0;
  float worst_x = 0;
  for_floats(-87.0f, 88.0f, [&](float x) {
    double exact = std::exp(static_cast<double>(x));
    double err = std::abs(fast::exp(x) - exact) / exact;
    if (err > worst) worst = err, worst_x = x;
  });
  SCOPED_TRACE(worst_x);
  EXPECT_LT(worst, 2 * 0x1p-23);  // float's unit roundoff is 2^-24; two ulp
}

TEST(FastMath, ExpSpecialValues) {
  EXPECT_EQ(fast::exp(0.0f), 1.0f);
  EXPECT_EQ(fast::exp(-kInf), 0.0f);
  EXPECT_EQ(fast::exp(-1000.0f), 0.0f);
  EXPECT_EQ(fast::exp(kInf), kInf);
  EXPECT_EQ(fast::exp(89.0f), kInf);
  EXPECT_TRUE(std::isnan(fast::exp(std::numeric_limits<float>::quiet_NaN())));
}

// Over every magnitude: subnormals (tanh x = x), the polynomial below 0.625, the branch switch,
// and the saturation at 1 (from about 9.1), where the exact value rounds to 1 in float.
TEST(FastMath, TanhRelativeErrorWithinTwoUlp) {
  double worst = 0.0;
  float worst_x = 0;
  for_floats(-std::numeric_limits<float>::max(), std::numeric_limits<float>::max(), [&](float x) {
    double exact = std::tanh(static_cast<double>(x));
    double err = std::abs(fast::tanh(x) - exact) / std::abs(exact);
    if (err > worst) worst = err, worst_x = x;
  });
  SCOPED_TRACE(worst_x);
  EXPECT_LT(worst, 2 * 0x1p-23);
}

TEST(FastMath, TanhSpecialValuesAndTheArrayLoop) {
  EXPECT_EQ(fast::tanh(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(fast::tanh(-0.0f)));
  EXPECT_EQ(fast::tanh(kInf), 1.0f);
  EXPECT_EQ(fast::tanh(-kInf), -1.0f);
  EXPECT_EQ(fast::tanh(20.0f), 1.0f);
  EXPECT_EQ(fast::tanh(-1e30f), -1.0f);
  EXPECT_TRUE(std::isnan(fast::tanh(std::numeric_limits<float>::quiet_NaN())));
  // The loop (compiled for SIMD) gives what the element function gives, at every position of a
  // length that leaves a tail after the vector body.
  std::vector<float> x(37), y(37);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -3.0f + 0.17f * static_cast<float>(i);
  fast::tanh_each(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], fast::tanh(x[i])) << "at " << x[i];
}

// The largest relative error of `normal`'s CDF over [-13, 10) and of its density over [-13, 13),
// against the C library in double. Down to x = -13, where Phi(x) = 6e-39 is below the smallest
// normal float (1.2e-38) yet keeps its relative accuracy: the tail is computed from erfc directly
// instead of cancelling in 1 + erf.
template <class Normal>
void expect_normal_within(Normal normal, double cdf_bound, double pdf_bound) {
  double worst_cdf = 0.0, worst_pdf = 0.0;
  float cdf_at = 0, pdf_at = 0;
  for_floats(-13.0f, 13.0f, [&](float x) {
    double v = x, pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * 3.14159265358979323846);
    auto [c, p] = normal(x);
    double pdf_error = std::abs(p - pdf) / pdf;
    if (pdf_error > worst_pdf) worst_pdf = pdf_error, pdf_at = x;
    if (x >= 10.0f) return;
    double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0)), cdf_error = std::abs(c - cdf) / cdf;
    if (cdf_error > worst_cdf) worst_cdf = cdf_error, cdf_at = x;
  });
  EXPECT_LT(worst_cdf, cdf_bound) << "at x = " << cdf_at;
  EXPECT_LT(worst_pdf, pdf_bound) << "at x = " << pdf_at;
}

TEST(FastMath, NormalRelativeErrorIncludingTheTail) {
  expect_normal_within([](float x) { return fast::normal(x); }, 1e-6, 1e-6);
}

// For values rounded to bf16 next: 3e-5, against the rounding's 2^-9 = 2e-3.
TEST(FastMath, NormalBf16RelativeErrorIncludingTheTail) {
  expect_normal_within([](float x) { return fast::normal_bf16(x); }, 3e-5, 1e-5);
}

TEST(FastMath, NormalSpecialValues) {
  EXPECT_EQ(fast::normal(0.0f).cdf, 0.5f);
  EXPECT_EQ(fast::normal(kInf).cdf, 1.0f);
  EXPECT_EQ(fast::normal(-kInf).cdf, 0.0f);
  EXPECT_EQ(fast::normal(kInf).pdf, 0.0f);
  EXPECT_NEAR(fast::normal(1.0f).cdf, 0.841344746068543, 2e-7);  // tables of the normal CDF
  EXPECT_NEAR(fast::normal(0.0f).pdf, 0.398942280401433, 1e-7);  // 1 / sqrt(2 pi)
  EXPECT_TRUE(std::isnan(fast::normal(std::numeric_limits<float>::quiet_NaN()).cdf));
  for (float x : {0.0f, kInf, -kInf, 1.0f}) {
    EXPECT_NEAR(fast::normal_bf16(x).cdf, fast::normal(x).cdf, 3e-5) << x;
    EXPECT_NEAR(fast::normal_bf16(x).pdf, fast::normal(x).pdf, 1e-5) << x;
  }
  EXPECT_TRUE(std::isnan(fast::normal_bf16(std::numeric_limits<float>::quiet_NaN()).cdf));
  EXPECT_TRUE(std::isnan(fast::normal_bf16(std::numeric_limits<float>::quiet_NaN()).pdf));
}

// Every length from 0 to 40 (whole blocks of eight, tails, both), against a plain loop in long
// double; terms span ten orders of magnitude so a dropped or doubled term shows.
TEST(FastMath, LaneSumAddsEveryTermOnce) {
  for (std::int64_t n = 0; n <= 40; ++n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    long double expected = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      x[static_cast<std::size_t>(j)] =
          std::ldexp(1.0f + 0.125f * static_cast<float>(j % 7), static_cast<int>(j % 34) - 17);
      expected += x[static_cast<std::size_t>(j)];
    }
    double got = fast::lane_sum(n, [&](std::int64_t j) { return x[static_cast<std::size_t>(j)]; });
    EXPECT_NEAR(got, static_cast<double>(expected), 1e-15 * static_cast<double>(expected) + 1e-300) << "n = " << n;
  }
}

TEST(FastMath, LaneMaxFindsTheLargestAndIgnoresNaNLikeStdMax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t n = 1; n <= 27; ++n)
    for (std::int64_t at = 0; at < n; ++at) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) x[static_cast<std::size_t>(j)] = -static_cast<float>((j * 5) % 11) - 1.0f;
      x[static_cast<std::size_t>(at)] = 3.5f;
      x[static_cast<std::size_t>((at + 1) % n)] = n > 1 ? nan : 3.5f;
      EXPECT_EQ(fast::lane_max(x.data(), n, -kInf), 3.5f) << "n = " << n << ", largest at " << at;
    }
  EXPECT_EQ(fast::lane_max<float>(nullptr, 0, -kInf), -kInf);
  std::vector<float> all_masked(19, -kInf);
  EXPECT_EQ(fast::lane_max(all_masked.data(), 19, -kInf), -kInf);
}

}  // namespace
}  // namespace ag
