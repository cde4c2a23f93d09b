// Checks ops/reduce.cpp: sum, mean, max, argmax over one dim and over everything.
#include "../../ops/call_counts.h"
#include "../test_util.h"

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
  EXPECT_TRUE(all_close(x.max(0), {4, 5, 6}, 0));
  EXPECT_TRUE(all_close(x.max(1), {5, 6}, 0));
  EXPECT_EQ(argmax(x, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(argmax(x, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0, 1}));
}

TEST(Reduce, KeepdimShapes) {
  Tensor x = ones({2, 3, 4});
  EXPECT_EQ(x.sum(1).shape(), (Shape{2, 4}));
  EXPECT_EQ(x.sum(1, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(x.mean(-1, true).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.max(0, true).shape(), (Shape{1, 3, 4}));
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
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].max(dim, keepdim); }, {x}));
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
  Tensor m = (x * x * x).max(1);
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
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(3).sum(); },
                                                 "sum: expected a float32 or float64 tensor, got int64"));
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
    Tensor sum_fast = x.sum(dim), max_fast = x.max(dim), where_fast = x.argmax(dim);
    EXPECT_EQ(counting.naive(), 0);
    KernelGuard naive(Kernels::Naive);
    EXPECT_TRUE(all_close(x.sum(dim), sum_fast, 1e-15));
    EXPECT_TRUE(all_close(x.max(dim), max_fast, 0));
    EXPECT_EQ(x.argmax(dim).to_vector<std::int64_t>(), where_fast.to_vector<std::int64_t>());
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].max(dim, keepdim); }, {x},
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

}  // namespace
}  // namespace ag
