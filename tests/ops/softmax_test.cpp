// Checks ops/softmax.cpp: values, stability, the fully masked row, gradients along every dim.
#include <cmath>
#include <limits>

#include "../../ops/call_counts.h"
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Softmax, HandComputedValues) {
  // softmax([1, 2, 3]) = e^k / (e + e^2 + e^3)
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  Tensor x = tensor({1, 2, 3}, {3}, kFloat64);
  EXPECT_TRUE(all_close(softmax(x, 0), {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z}, 1e-15));
  EXPECT_TRUE(all_close(log_softmax(x, 0), {1 - std::log(z), 2 - std::log(z), 3 - std::log(z)}, 1e-14));
  EXPECT_NEAR(std::exp(3.0) / z, 0.6652409557748219, 1e-15);
}

TEST(Softmax, RowsSumToOneAlongAnyDim) {
  Generator gen(1);
  Tensor x = randn({2, 3, 4}, gen, kFloat64) * 5.0;
  for (std::int64_t dim : {0, 1, 2}) {
    Tensor sums = softmax(x, dim).sum(dim);
    EXPECT_TRUE(all_close(sums, std::vector<double>(static_cast<std::size_t>(sums.numel()), 1.0), 1e-14));
  }
}

TEST(Softmax, StableForHugeLogits) {
  // Shifting every logit by the same amount leaves softmax unchanged; naive exp(1e4) is inf.
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor big = tensor({1e4, 1e4 - 1, -1e4}, {3}, dtype);
    double z = 1 + std::exp(-1.0);
    EXPECT_TRUE(all_close(softmax(big, 0), {1 / z, std::exp(-1.0) / z, 0.0}, 1e-6));
    EXPECT_TRUE(all_close(log_softmax(big, 0), {-std::log(z), -1 - std::log(z), -2e4 - std::log(z)}, 1e-2));
  }
}

TEST(Softmax, GradcheckAlongEveryDim) {
  Generator gen(2);
  Tensor x = normal_leaf({2, 3, 4}, gen);
  for (std::int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(fmt::format("dim {}", dim));
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return softmax(in[0], dim); }, {x}));
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {x}));
  }
}

TEST(Softmax, PartlyMaskedRowIgnoresMaskedPositions) {
  Tensor x = tensor({1, -kInf, 3}, {3}, kFloat64);
  double z = std::exp(1.0) + std::exp(3.0);
  EXPECT_TRUE(all_close(softmax(x, 0), {std::exp(1.0) / z, 0, std::exp(3.0) / z}, 1e-15));
}

TEST(Softmax, FullyMaskedRowIsZeroWithZeroGradient) {
  // Row 0 has every position masked; row 1 is ordinary.
  Tensor logits = tensor({0.5, 1.0, -0.5, 2.0, 0.0, 1.0}, {2, 3}, kFloat64).requires_grad_();
  Tensor mask = from_vector<bool>({true, true, true, false, true, false}, {2, 3});
  Tensor y = softmax(masked_fill(logits, mask, -kInf), 1);
  EXPECT_TRUE(all_close(y.slice(0, 0, 1), {0, 0, 0}, 0));
  double z = std::exp(2.0) + std::exp(1.0);
  EXPECT_TRUE(all_close(y.slice(0, 1, 2), {std::exp(2.0) / z, 0, std::exp(1.0) / z}, 1e-15));
  (y * tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64)).sum().backward();
  for (double g : logits.grad().to_vector<double>()) EXPECT_FALSE(std::isnan(g));
  EXPECT_TRUE(all_close(logits.grad().slice(0, 0, 1), {0, 0, 0}, 0));
  EXPECT_EQ(logits.grad().at<double>({1, 1}), 0.0);  // masked position: no gradient
  // log_softmax: -inf everywhere, and no gradient either.
  Tensor all_masked = full({3}, -kInf, kFloat64).requires_grad_();
  Tensor ls = log_softmax(all_masked, 0);
  EXPECT_TRUE(all_close(ls, {-kInf, -kInf, -kInf}, 0));
  ls.backward(ones({3}, kFloat64));
  EXPECT_TRUE(all_close(all_masked.grad(), {0, 0, 0}, 0));
}

TEST(Softmax, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { softmax(ones({2, 3}), 2); }, "softmax: dim 2 is out of range"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { log_softmax(arange(3), 0); },
                                                 "log_softmax: expected a float32 or float64 tensor, got int64"));
}

TEST(Softmax, MethodsAreTheFreeFunctions) {
  Generator gen(31);
  Tensor x = randn({3, 5}, gen, kFloat64);
  for (std::int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(all_close(x.softmax(dim), softmax(x, dim), 0));
    EXPECT_TRUE(all_close(x.log_softmax(dim), log_softmax(x, dim), 0));
  }
  // Rows of a softmax add up to 1, and log_softmax is its log.
  EXPECT_TRUE(all_close(x.softmax(1).sum(1), {1, 1, 1}, 1e-15));
  EXPECT_TRUE(all_close(x.log_softmax(0).exp(), x.softmax(0), 1e-15));
  Tensor leaf = test::normal_leaf({3, 5}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].softmax(0) * in[0].log_softmax(1); },
                                 {leaf}));
}

// A NaN in a row makes the row NaN, even when every other logit is -inf: exp(NaN - m) is NaN, and
// so is the sum that divides every entry. Not a fully masked row's zeros, which would hide it.
TEST(Softmax, NaNIsNotTakenForAFullyMaskedRow) {
  Tensor x = tensor({NAN, -kInf, -kInf, NAN, 1, NAN, -kInf, -kInf}, {4, 2}, kFloat64);
  for (Kernels route : {Kernels::Fast, Kernels::Naive}) {
    KernelGuard guard(route);
    for (double v : softmax(x, 1).slice(0, 0, 3).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
    for (double v : log_softmax(x, 1).slice(0, 0, 3).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
    EXPECT_TRUE(all_close(softmax(x, 1).slice(0, 3, 4), {0, 0}, 0));  // the fully masked row
    EXPECT_TRUE(all_close(log_softmax(x, 1).slice(0, 3, 4), {-kInf, -kInf}, 0));
  }
}

// The naive backend's softmax (kernels/naive/along_dim.cpp) against the fast one along every dim,
// with a fully masked row; gradients and tangents pass gradcheck on it; its loops really ran.
TEST(Softmax, NaiveBackendAgreesWithTheFastOne) {
  Generator gen(41);
  Tensor x = normal_leaf({3, 5, 4}, gen);
  Tensor masked = masked_fill(x.detach(), from_vector<bool>({true, false, false}, {3, 1, 1}), -kInf);  // x[0]: -inf
  testing::CountCalls counting;
  for (std::int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(fmt::format("dim {}", dim));
    Tensor p = softmax(x, dim), lp = log_softmax(x, dim), pm = softmax(masked, dim), lpm = log_softmax(masked, dim);
    KernelGuard naive(Kernels::Naive);
    EXPECT_TRUE(all_close(softmax(x, dim), p, 0));
    EXPECT_TRUE(all_close(log_softmax(x, dim), lp, 0));
    EXPECT_TRUE(all_close(softmax(masked, dim), pm, 0));
    EXPECT_TRUE(all_close(log_softmax(masked, dim), lpm, 0));
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return softmax(in[0], dim); }, {x},
                                   {.check_forward_ad = true}));
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {x},
                                   {.check_forward_ad = true}));
  }
  EXPECT_GE(counting.naive(), 3 * 4);
}

}  // namespace
}  // namespace ag
