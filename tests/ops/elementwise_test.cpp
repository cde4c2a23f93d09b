// Checks ops/elementwise.cpp and ops/fused/gelu.cpp: values against closed forms, gradients
// against finite differences, on the fast backend and on the naive one
// (kernels/naive/elementwise.cpp).
#include <cmath>
#include <numbers>

#include "../../ops/call_counts.h"
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;
using test::uniform_leaf;

using UnaryFn = Tensor (*)(const Tensor&);

void values_match_the_math() {
  Tensor x = tensor({-2.0, -0.5, 0.25, 1.0, 3.0}, {5}, kFloat64);
  EXPECT_TRUE(all_close(neg(x), {2.0, 0.5, -0.25, -1.0, -3.0}, 0));
  EXPECT_TRUE(
      all_close(exp(x), {std::exp(-2.0), std::exp(-0.5), std::exp(0.25), std::numbers::e, std::exp(3.0)}, 1e-15));
  EXPECT_TRUE(
      all_close(tanh(x), {std::tanh(-2.0), std::tanh(-0.5), std::tanh(0.25), std::tanh(1.0), std::tanh(3.0)}, 1e-15));
  EXPECT_TRUE(all_close(relu(x), {0, 0, 0.25, 1.0, 3.0}, 0));
  EXPECT_TRUE(all_close(abs(x), {2.0, 0.5, 0.25, 1.0, 3.0}, 0));
  EXPECT_TRUE(all_close(sigmoid(tensor({0.0}, {1}, kFloat64)), {0.5}, 0));
  // erfc(0) = 1, erfc(-z) = 2 - erfc(z), erfc(1) = 0.157299207050285... (Abramowitz and Stegun, table 7.1)
  Tensor e = erfc(tensor({0.0, 1.0, -1.0}, {3}, kFloat64));
  EXPECT_TRUE(all_close(e, {1.0, 0.15729920705028513, 1.8427007929497148}, 1e-15));
  Tensor p = tensor({0.25, 1.0, 4.0}, {3}, kFloat64);
  EXPECT_TRUE(all_close(sqrt(p), {0.5, 1.0, 2.0}, 0));
  EXPECT_TRUE(all_close(log(p), {-std::log(4.0), 0.0, std::log(4.0)}, 1e-15));
  EXPECT_TRUE(all_close(pow(p, 2.0), {0.0625, 1.0, 16.0}, 1e-15));
  EXPECT_TRUE(all_close(pow(p, -0.5), {2.0, 1.0, 0.5}, 1e-15));
}

TEST(Elementwise, GeluMatchesNormalCdf) {
  // GELU(x) = x Phi(x). Phi(1) = 0.841344746068543 and Phi(-1) = 1 - Phi(1) from normal tables.
  Tensor x = tensor({-1.0, 0.0, 1.0}, {3}, kFloat64);
  EXPECT_TRUE(all_close(gelu(x), {-(1 - 0.841344746068543), 0.0, 0.841344746068543}, 1e-14));
  // Tanh form at x = 1: 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.841191990607... (computed by hand)
  double u = std::sqrt(2.0 / std::numbers::pi) * 1.044715;
  EXPECT_TRUE(all_close(gelu(x, GeluApproximation::Tanh),
                        {-(1 - 0.5 * (1 + std::tanh(u))), 0.0, 0.5 * (1 + std::tanh(u))}, 1e-14));
  EXPECT_NEAR(0.5 * (1 + std::tanh(u)), 0.8411919906, 1e-9);
}

void float32_matches_float64() {
  Generator gen(1);
  Tensor x = randn({4, 7}, gen, kFloat64);
  for (UnaryFn f : {static_cast<UnaryFn>(exp), static_cast<UnaryFn>(tanh), static_cast<UnaryFn>(sigmoid)})
    EXPECT_TRUE(all_close(f(x.to(kFloat32)), f(x), 1e-5));
  EXPECT_TRUE(all_close(gelu(x.to(kFloat32)), gelu(x), 1e-6));
}

// Every unary op, gradchecked on a [2, 3, 5] input in its domain, away from kinks, in both modes.
void gradcheck_every_op() {
  Generator gen(7);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    double lo, hi;
  };
  std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return -x; }, -2, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return log(x); }, 0.5, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.5, 3},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -3, 3},
      {"erfc", [](const Tensor& x) { return erfc(x); }, -2, 2},
      {"relu (positive side)", [](const Tensor& x) { return relu(x); }, 0.1, 2},
      {"relu (negative side)", [](const Tensor& x) { return relu(x); }, -2, -0.1},
      {"abs (positive side)", [](const Tensor& x) { return abs(x); }, 0.1, 2},
      {"abs (negative side)", [](const Tensor& x) { return x.abs(); }, -2, -0.1},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }, -2, 2},
      {"pow 0.5", [](const Tensor& x) { return pow(x, 0.5); }, 0.5, 3},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); }, 0.5, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -3, 3},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }, -3, 3},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = uniform_leaf({2, 3, 5}, gen, c.lo, c.hi);
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return c.f(in[0]); }, {x},
                                   {.check_forward_ad = true}));
  }
}

TEST(Elementwise, ValuesMatchTheMath) { values_match_the_math(); }
TEST(Elementwise, Float32MatchesFloat64) { float32_matches_float64(); }
TEST(Elementwise, Gradcheck) { gradcheck_every_op(); }

// The same checks on the naive backend's loops, which really run (and, on the fast route, none).
TEST(Elementwise, NaiveBackendPassesTheSameChecks) {
  testing::CountCalls counting;
  values_match_the_math();
  EXPECT_EQ(counting.naive(), 0);
  KernelGuard naive(Kernels::Naive);
  values_match_the_math();
  float32_matches_float64();
  gradcheck_every_op();
  EXPECT_TRUE(std::isnan(relu(tensor({NAN}, {1}, kFloat64)).item()));
  EXPECT_GE(counting.naive(), 10);
}

TEST(Elementwise, ReluPassesNaN) { EXPECT_TRUE(std::isnan(relu(tensor({NAN}, {1}, kFloat64)).item())); }

TEST(Elementwise, ReluGradientAtZeroIsZero) {
  Tensor x = tensor({0.0, 1.0}, {2}, kFloat64).requires_grad_();
  relu(x).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {0.0, 1.0}, 0));
}

// |x| by hand: -0 gives +0, NaN passes through, and the gradient is the sign, 0 at the kink. Its
// second derivative is 0 (the slope is made outside the graph), on both backends.
TEST(Elementwise, AbsByHand) {
  for (Kernels route : {Kernels::Fast, Kernels::Naive}) {
    KernelGuard guard(route);
    Tensor x = tensor({-3.0, -0.0, 0.0, 2.5}, {4}, kFloat64).requires_grad_();
    Tensor y = x.abs();
    EXPECT_FALSE(std::signbit(y.to_vector<double>()[1]));
    EXPECT_TRUE(std::isnan(abs(tensor({NAN}, {1})).item()));
    Tensor g = grad({y.sum()}, {x}, {}, {.create_graph = true})[0];
    EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{-1, 0, 0, 1}));
    EXPECT_EQ(grad({(g * x).sum()}, {x})[0].to_vector<double>(), (std::vector<double>{-1, 0, 0, 1}));  // d(g x)/dx = g
    Generator gen(5);
    EXPECT_TRUE(testing::gradgradcheck([](const std::vector<Tensor>& in) { return abs(in[0]) * in[0]; },
                                       {uniform_leaf({3, 4}, gen, 0.2, 1.5)}));
  }
}

TEST(Elementwise, RejectsNonFloat) {
  Tensor ids = arange(4);
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { exp(ids); }, "exp: expected a float32 or float64 tensor, got int64"));
  Tensor mask = full({2}, 1, kBool);
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { tanh(mask); }, "tanh: expected a float32 or float64 tensor, got bool"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { relu(Tensor()); }, "relu: got an undefined tensor"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { ids.abs(); }, "abs: expected a float32 or float64 tensor, got int64"));
}

TEST(Elementwise, SigmoidMethodIsTheFreeFunction) {
  Tensor x = tensor({0, 2, -1}, {3}, kFloat64);
  EXPECT_TRUE(all_close(x.sigmoid(), {0.5, 1 / (1 + std::exp(-2.0)), 1 / (1 + std::exp(1.0))}, 1e-15));
  EXPECT_TRUE(all_close(x.sigmoid(), sigmoid(x), 0));
  Generator gen(32);
  Tensor leaf = uniform_leaf({3, 5}, gen, -2, 2);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].sigmoid(); }, {leaf}));
}

}  // namespace
}  // namespace ag
