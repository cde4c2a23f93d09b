// Checks ops/reduce.cpp: sum, mean, max, min and their indices over one dim and over everything.
#include "../../ops/call_counts.h"
#include "../test_util.h"

#include <limits>

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

// x = [[1, 5, 3],
//      [4, 2, 6]]
Tensor sample() { return tensor({1, 5, 3, 4, 2, 6}, {2, 3}, kFloat64); }

TEST(Reduce, Values) {
  Tensor x = sample();
  EXPECT_TRUE(all_close(x.sum(), {21}, 0));
  EXPECT_EQ(x.sum().dim(), 0);
  EXPECT_TRUE(all_close(x.sum(0), {5, 7, 9}, 0));
  EXPECT_TRUE(all_close(x.sum(1), {9, 12}, 0));
  EXPECT_TRUE(all_close(x.sum(-1), {9, 12}, 0));
  EXPECT_TRUE(all_close(x.mean(), {3.5}, 1e-15));
  EXPECT_TRUE(all_close(x.mean(1), {3, 4}, 1e-15));
  EXPECT_TRUE(all_close(x.max(), {6}, 0));
  EXPECT_TRUE(all_close(x.amax(0), {4, 5, 6}, 0));
  EXPECT_TRUE(all_close(x.amax(1), {5, 6}, 0));
  EXPECT_EQ(argmax(x, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(argmax(x, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0, 1}));
}

TEST(Reduce, KeepdimShapes) {
  Tensor x = ones({2, 3, 4});
  EXPECT_EQ(x.sum(1).shape(), (Shape{2, 4}));
  EXPECT_EQ(x.sum(1, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(x.mean(-1, true).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.amax(0, true).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(argmax(x, 2, true).shape(), (Shape{2, 3, 1}));
}

TEST(Reduce, Float32SumIsAccurate) {
  // One million 0.1f: a float accumulator drifts by ~1e-3 relative; the double accumulator does not.
  Tensor x = full({1000000}, 0.1, kFloat32);
  EXPECT_NEAR(x.sum().item(), 1000000 * static_cast<double>(0.1f), 1.0);
}

TEST(Reduce, GradcheckEveryDim) {
  Generator gen(11);
  Tensor x = normal_leaf({2, 3, 4}, gen);  // continuous values: no ties for max
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].sum(); }, {x}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].mean(); }, {x}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].max(); }, {x}));
  for (std::int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(fmt::format("dim {} keepdim {}", dim, keepdim));
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].sum(dim, keepdim); }, {x}));
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].mean(dim, keepdim); }, {x}));
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].amax(dim, keepdim); }, {x}));
    }
  }
}

TEST(Reduce, MaxTieSendsGradientToFirstPosition) {
  // Ties make max non-differentiable; the documented choice is the first maximal position.
  Tensor x = tensor({3, 1, 3, 2}, {4}, kFloat64).requires_grad_();
  x.max().backward();
  EXPECT_TRUE(all_close(x.grad(), {1, 0, 0, 0}, 0));
}

// max's backward is one rule, a scatter to the winners whose own adjoint is the gather again, so
// the derivatives of every order follow from it. f = sum over rows of (max_k x_k^3)^2, with rows
// x = [1, -2, 0.5] and [-1, -2, -3] won by x = 1 and x = -1: its derivatives are those of x^6 at
// each winner and 0 elsewhere, 6x^5 = 6 and -6, then 30x^4 = 30 and 30, then 120x^3 = 120 and
// -120 (by hand). The square makes each backward's dy depend on x, so the second and third
// derivatives pass through the scatter's own backward.
TEST(Reduce, MaxDerivativesOfEveryOrderByHand) {
  Tensor x = tensor({1.0, -2.0, 0.5, -1.0, -2.0, -3.0}, {2, 3}, kFloat64).requires_grad_();
  Tensor m = (x * x * x).amax(1);
  Tensor g = grad({(m * m).sum()}, {x}, {}, {.create_graph = true})[0];
  EXPECT_TRUE(all_close(g, {6, 0, 0, -6, 0, 0}, 1e-12));
  Tensor h = grad({g.sum()}, {x}, {}, {.create_graph = true})[0];
  EXPECT_TRUE(all_close(h, {30, 0, 0, 30, 0, 0}, 1e-12));
  Tensor third = grad({h.sum()}, {x})[0];
  EXPECT_TRUE(all_close(third, {120, 0, 0, -120, 0, 0}, 1e-12));
}

TEST(Reduce, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).sum(2);
      },
      "sum: dim 2 is out of range for a tensor with 2 dimensions (valid: -2 to 1)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { ones({2, 3}).max(-3); }, "max: dim -3 is out of range"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 0}).max(1);
      },
      "max: max over an empty dim (shape [2, 0])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { ones({0}).mean(); }, "mean: mean over an empty dim (shape [0])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(3).max(); },
                                                 "max: expected a float32 or float64 tensor, got int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { Tensor().sum(); }, "sum: got an undefined tensor"));
}

// Sums of bool and int64 tensors by hand: int64 and exact, a count for a bool; the mean float32.
TEST(Reduce, SumsOfBoolAndInt64ByHand) {
  Tensor correct = from_vector<bool>({true, false, true, true, true, true}, {2, 3});
  Tensor count = correct.sum();
  EXPECT_EQ(count.dtype(), kInt64);
  EXPECT_EQ(count.dim(), 0);
  EXPECT_EQ(count.item<std::int64_t>(), 5);
  EXPECT_EQ(correct.sum(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(correct.sum(0, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(correct.sum(0, true).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 1, 2}));
  Tensor accuracy = correct.mean();
  EXPECT_EQ(accuracy.dtype(), kFloat32);
  EXPECT_EQ(accuracy.item<float>(), 5.0f / 6.0f);
  EXPECT_EQ(correct.mean(1).to_vector<float>(), (std::vector<float>{2.0f / 3.0f, 1.0f}));
  // 2^53 + 1 has no double: a sum through float64 would give 2^53.
  const std::int64_t big = std::int64_t{1} << 53;
  EXPECT_EQ(from_vector<std::int64_t>({big, 1}, {2}).sum().item<std::int64_t>(), big + 1);
  // On the way to a sum that fits, a partial sum may pass int64's range: the sum is still exact.
  const std::int64_t top = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(from_vector<std::int64_t>({top, 1, -2}, {3}).sum().item<std::int64_t>(), top - 1);
  EXPECT_EQ(arange(5).sum().item<std::int64_t>(), 10);
  EXPECT_EQ(from_vector<bool>({}, {0}).sum().item<std::int64_t>(), 0);  // an empty sum
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { from_vector<std::int64_t>({1, 2, top, 1}, {2, 2}).sum(1); },
      "sum: sum 1 of the int64 tensor of shape [2, 2] passes int64's range (sum x.to(ag::kFloat64) instead)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { from_vector<bool>({}, {0}).mean(); },
                                                 "mean: mean over an empty dim (shape [0])"));
  // The naive backend's loop gives the same, and is the one that ran.
  testing::CountCalls counting;
  Generator gen(4);
  Tensor ids = randint(-1000, 1000, {5, 7, 3}, gen);
  std::vector<Tensor> fast = {ids.sum(), ids.sum(1), ids.sum(2, true), (ids > 0.0).sum(0)};
  KernelGuard naive(Kernels::Naive);
  counting.reset();
  std::vector<Tensor> loops = {ids.sum(), ids.sum(1), ids.sum(2, true), (ids > 0.0).sum(0)};
  EXPECT_GE(counting.naive(), 4);
  for (std::size_t i = 0; i < fast.size(); ++i)
    EXPECT_EQ(loops[i].to_vector<std::int64_t>(), fast[i].to_vector<std::int64_t>()) << "sum " << i;
}

TEST(Reduce, ArgmaxMethodIsTheFreeFunction) {
  Tensor x = tensor({1, 5, 2, 7, 0, 3}, {2, 3}, kFloat64);
  EXPECT_EQ(x.argmax(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(x.argmax(0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0, 1}));
  EXPECT_EQ(x.argmax(1, /*keepdim=*/true).shape(), (Shape{2, 1}));
  EXPECT_EQ(x.argmax(-1).to_vector<std::int64_t>(), argmax(x, -1).to_vector<std::int64_t>());
}

// The naive backend's loops (kernels/naive/along_dim.cpp) against the fast ones: the same values
// and winners along every dim, gradients and forward-mode tangents that pass gradcheck, a NaN that
// wins max on both, and the naive loops really ran (none on the fast route).
TEST(Reduce, NaiveBackendAgreesWithTheFastOne) {
  Generator gen(12);
  Tensor x = normal_leaf({3, 5, 4}, gen);
  testing::CountCalls counting;
  for (std::int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(fmt::format("dim {}", dim));
    counting.reset();
    Tensor sum_fast = x.sum(dim), max_fast = x.amax(dim), where_fast = x.argmax(dim);
    EXPECT_EQ(counting.naive(), 0);
    KernelGuard naive(Kernels::Naive);
    EXPECT_TRUE(all_close(x.sum(dim), sum_fast, 1e-15));
    EXPECT_TRUE(all_close(x.amax(dim), max_fast, 0));
    EXPECT_EQ(x.argmax(dim).to_vector<std::int64_t>(), where_fast.to_vector<std::int64_t>());
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].amax(dim, keepdim); }, {x},
                                     {.check_forward_ad = true}));
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].mean(dim, keepdim); }, {x},
                                     {.check_forward_ad = true}));
    }
  }
  EXPECT_GE(counting.naive(), 3);
  // max([1, NaN, 5, NaN]) is the first NaN, at index 1, on both routes (PyTorch's rule).
  Tensor with_nan = tensor({1, NAN, 5, NAN}, {4}, kFloat64);
  for (Kernels route : {Kernels::Fast, Kernels::Naive}) {
    KernelGuard guard(route);
    EXPECT_TRUE(std::isnan(with_nan.max().item()));
    EXPECT_EQ(with_nan.argmax(0).item<std::int64_t>(), 1);
  }
}

// max and min over a dim give values and indices, libtorch's tuple; the first extreme position
// wins a tie, and a NaN beats any number (by hand).
TEST(Reduce, MaxAndMinWithIndicesByHand) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({3, 1, 3, 2, 5, 1, -1, -1, 0}, {3, 3}, kFloat64);
  auto [hi, hi_at] = x.max(1);
  auto [lo, lo_at] = ag::min(x, 1);
  EXPECT_TRUE(all_close(hi, {3, 5, 0}, 0));
  EXPECT_EQ(hi_at.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_TRUE(all_close(lo, {1, 1, -1}, 0));
  EXPECT_EQ(lo_at.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 0}));
  EXPECT_EQ(hi_at.dtype(), kInt64);
  auto [col_lo, col_at] = x.min(0, true);
  EXPECT_EQ(col_lo.shape(), (Shape{1, 3}));
  EXPECT_TRUE(all_close(col_lo, {-1, -1, 0}, 0));
  EXPECT_EQ(col_at.to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_TRUE(all_close(x.amin(1), {1, 1, -1}, 0));
  EXPECT_EQ(x.argmin(0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_EQ(x.min().item(), -1);
  Tensor with_nan = tensor({2, nan, -4}, {3}, kFloat64);
  EXPECT_TRUE(std::isnan(with_nan.min().item()));
  EXPECT_EQ(with_nan.argmin(0).item<std::int64_t>(), 1);
}

// The gradient of a min goes to the first smallest position, and the indices carry none.
TEST(Reduce, MinGradientAndIndicesByHand) {
  Tensor x = tensor({1, 0, 0, 2, 4, 3}, {2, 3}, kFloat64).requires_grad_();
  auto [values, indices] = x.min(1);
  EXPECT_FALSE(indices.requires_grad());
  EXPECT_TRUE(values.requires_grad());
  (values * tensor({10, 100}, {2}, kFloat64)).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {0, 10, 0, 100, 0, 0}, 0));
}

TEST(Reduce, MinAndMaxGradcheckBothModes) {
  Generator gen(12);
  Tensor x = normal_leaf({3, 5, 2}, gen);  // continuous values: no ties
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].min(); }, {x},
                                 {.check_forward_ad = true}));
  for (std::int64_t dim : {0, 1, -1})
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(fmt::format("dim {} keepdim {}", dim, keepdim));
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return std::get<0>(in[0].min(dim, keepdim)); },
                                     {x}, {.check_forward_ad = true}));
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return std::get<0>(in[0].max(dim, keepdim)); },
                                     {x}, {.check_forward_ad = true}));
      EXPECT_TRUE(testing::gradgradcheck(
          [&](const std::vector<Tensor>& in) { return (in[0] * in[0] * in[0]).amin(dim, keepdim); }, {x}));
    }
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { ones({2, 0}).min(1); }, "min: min over an empty dim (shape [2, 0])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { ones({2, 3}).argmin(2); }, "argmin: dim 2 is out of range"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(3).amin(0); },
                                                 "amin: expected a float32 or float64 tensor, got int64"));
}

}  // namespace
}  // namespace ag
