// Checks ops/binary.cpp: broadcasting arithmetic, broadcast_to and sum_to, the comparisons,
// maximum, minimum and clamp,
// on the fast backend and on the naive one (kernels/naive/broadcast.cpp).
#include "../../ops/call_counts.h"
#include "../test_util.h"

#include <limits>

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

TEST(Binary, ElementwiseValues) {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}, kFloat64);
  Tensor b = tensor({10, 20, 30, 40}, {2, 2}, kFloat64);
  EXPECT_TRUE(all_close(a + b, {11, 22, 33, 44}, 0));
  EXPECT_TRUE(all_close(b - a, {9, 18, 27, 36}, 0));
  EXPECT_TRUE(all_close(a * b, {10, 40, 90, 160}, 0));
  EXPECT_TRUE(all_close(b / a, {10, 10, 10, 10}, 0));
}

TEST(Binary, BroadcastValues) {
  // [2, 1] + [3] -> [2, 3]: row i, column j is a_i + b_j.
  Tensor a = tensor({1, 2}, {2, 1});
  Tensor b = tensor({10, 20, 30}, {3});
  Tensor y = a + b;
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(y, {11, 21, 31, 12, 22, 32}, 0));
  // [4, 1, 3] * [5, 3] -> [4, 5, 3]
  EXPECT_EQ((ones({4, 1, 3}) * ones({5, 3})).shape(), (Shape{4, 5, 3}));
  // A 0-d tensor broadcasts against anything.
  EXPECT_TRUE(all_close(scalar(2.0) * a, {2, 4}, 0));
}

TEST(Binary, ScalarOperands) {
  Tensor a = tensor({1, 2, 4}, {3}, kFloat64);
  EXPECT_TRUE(all_close(a + 1.0, {2, 3, 5}, 0));
  EXPECT_TRUE(all_close(1.0 - a, {0, -1, -3}, 0));
  EXPECT_TRUE(all_close(a * 3.0, {3, 6, 12}, 0));
  EXPECT_TRUE(all_close(2.0 / a, {2, 1, 0.5}, 0));
  EXPECT_EQ((a * 2.0).dtype(), kFloat64);  // the number takes the tensor's dtype
}

TEST(Binary, BroadcastShapeRules) {
  EXPECT_EQ(broadcast_shapes("t", {4, 1, 3}, {5, 3}), (Shape{4, 5, 3}));
  EXPECT_EQ(broadcast_shapes("t", {}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes("t", {2, 1}, {1, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes("t", {0, 1}, {1, 3}), (Shape{0, 3}));
}

// Every pair of shapes below broadcasts differently; each input's gradient must be summed back.
TEST(Binary, GradcheckAcrossBroadcasts) {
  Generator gen(3);
  std::vector<std::pair<Shape, Shape>> pairs = {
      {{2, 3}, {2, 3}}, {{4, 1, 3}, {5, 3}}, {{3}, {2, 3}}, {{}, {2, 3}}, {{2, 1}, {1, 3}}, {{2, 3, 1, 4}, {3, 5, 1}},
  };
  for (auto [sa, sb] : pairs) {
    SCOPED_TRACE(shape_str(sa) + " with " + shape_str(sb));
    Tensor a = normal_leaf(sa, gen);
    Tensor b = normal_leaf(sb, gen);
    // Keep the divisor away from 0.
    Tensor b_pos = (rand(sb, gen, kFloat64) + 0.5).detach().requires_grad_();
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0] + in[1]; }, {a, b}));
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0] - in[1]; }, {a, b}));
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {a, b}));
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0] / in[1]; }, {a, b_pos}));
    // And with the operands swapped.
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[1] / in[0]; }, {b_pos, a}));
  }
}

TEST(Binary, OnlyOneInputRequiresGrad) {
  Generator gen(4);
  Tensor a = normal_leaf({3, 2}, gen);
  Tensor b = randn({2}, gen, kFloat64);  // a constant
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0] * b; }, {a}));
  (a * b).sum().backward();
  // d/da sum(a * b) = b on every row.
  Tensor expected = broadcast_to(b, {3, 2});
  EXPECT_TRUE(all_close(a.grad(), expected, 0));
}

TEST(Binary, BroadcastToAndSumTo) {
  Tensor x = tensor({1, 2, 3}, {3, 1}, kFloat64);
  Tensor y = broadcast_to(x, {2, 3, 4});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(all_close(y.slice(0, 1, 2).slice(1, 2, 3), {3, 3, 3, 3}, 0));
  // sum_to adds up the copies: each x_i was copied 2 * 4 = 8 times.
  EXPECT_TRUE(all_close(sum_to(y, {3, 1}), {8, 16, 24}, 0));
  Generator gen(5);
  Tensor leaf = normal_leaf({3, 1}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return broadcast_to(in[0], {2, 3, 4}); }, {leaf}));
  Tensor big = normal_leaf({2, 3, 4}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return sum_to(in[0], {3, 1}); }, {big}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return sum_to(in[0], {4}); }, {big}));
}

// The naive backend's loops (one loop over the output, coordinates by division) against the
// hand values above, finite differences with forward mode, and the fast backend's odometer: each
// element is one IEEE operation on the same two numbers, and sum_to adds in the same order (the
// output's), so the two agree exactly, in float32 too.
TEST(Binary, NaiveBackendServesEveryLoop) {
  testing::CountCalls counting;
  Generator gen(6);
  std::vector<std::pair<Shape, Shape>> pairs = {
      {{2, 3}, {2, 3}}, {{4, 1, 3}, {5, 3}}, {{}, {2, 3}}, {{2, 1}, {1, 3}}, {{2, 3, 1, 4}, {3, 5, 1}},
  };
  for (DType dtype : {kFloat32, kFloat64})
    for (auto [sa, sb] : pairs) {
      SCOPED_TRACE(fmt::format("{} with {} {}", shape_str(sa), shape_str(sb), dtype_name(dtype)));
      Tensor a = randn(sa, gen, dtype), b = rand(sb, gen, dtype) + 0.5;
      Shape both = broadcast_shapes("test", sa, sb);
      std::vector<Tensor> fast = {a + b, a - b, a * b, a / b, broadcast_to(a, both), sum_to(broadcast_to(b, both), sb)};
      EXPECT_EQ(counting.naive(), 0);
      KernelGuard naive(Kernels::Naive);
      std::vector<Tensor> loops = {
          a + b, a - b, a * b, a / b, broadcast_to(a, both), sum_to(broadcast_to(b, both), sb)};
      EXPECT_GE(counting.naive(), 6);
      for (std::size_t i = 0; i < fast.size(); ++i) EXPECT_TRUE(all_close(loops[i], fast[i], 0)) << "result " << i;
      counting.reset();  // after the comparison, whose conversions run on the naive backend too
    }
  KernelGuard naive(Kernels::Naive);
  Tensor a = tensor({1, 2}, {2, 1}, kFloat64), b = tensor({10, 20, 30}, {3}, kFloat64);
  EXPECT_TRUE(all_close(a + b, {11, 21, 31, 12, 22, 32}, 0));
  EXPECT_TRUE(all_close(b / a, {10, 20, 30, 5, 10, 15}, 0));
  EXPECT_TRUE(all_close(sum_to(broadcast_to(tensor({1, 2, 3}, {3, 1}, kFloat64), {2, 3, 4}), {3, 1}), {8, 16, 24}, 0));
  Tensor x = normal_leaf({2, 3, 1}, gen), y = (rand({3, 4}, gen, kFloat64) + 0.5).detach().requires_grad_();
  for (auto f : {+[](const std::vector<Tensor>& in) { return in[0] + in[1]; },
                 +[](const std::vector<Tensor>& in) { return in[0] - in[1]; },
                 +[](const std::vector<Tensor>& in) { return in[0] * in[1]; },
                 +[](const std::vector<Tensor>& in) { return in[0] / in[1]; }})
    EXPECT_TRUE(testing::gradcheck(f, {x, y}, {.check_forward_ad = true}));
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        return sum_to(in[0], {3, 1});
      },
      {normal_leaf({2, 3, 4}, gen)}, {.check_forward_ad = true}));
}

TEST(Binary, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}) + ones({4});
      },
      "add: shapes [2, 3] and [4] cannot be broadcast: sizes 3 and 4 in dim 0 from the right differ"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { ones({2}, kFloat32) * ones({2}, kFloat64); },
                                         "mul: dtypes differ: float32 with shape [2] and float64 with shape [2]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(3) + arange(3); },
                                                 "add: expected a float32 or float64 tensor, got int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { full({2}, 1, kBool) * 2.0; },
                                                 "mul: expected a float32 or float64 tensor, got bool"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        broadcast_to(ones({3}), {3, 2});
      },
      "broadcast_to: shapes [3] and [3, 2] cannot be broadcast"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { sum_to(ones({3, 2}), {4}); }, "sum_to: shapes [4] and [3, 2]"));
}

// The comparisons by hand: a bool result, broadcasting, NaN unequal to everything, a number on
// either side (a < x read as x > a), and the accuracy count of an evaluation loop.
TEST(Compare, ValuesByHand) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = tensor({1, nan, 3}, {3}, dtype), col = tensor({1, 3}, {2, 1}, dtype);
    Tensor y = x == col;  // [2, 3]: {1, NaN, 3} == 1, then == 3
    EXPECT_EQ(y.dtype(), kBool);
    EXPECT_EQ(y.shape(), (Shape{2, 3}));
    EXPECT_EQ(y.to_vector<bool>(), (std::vector<bool>{1, 0, 0, 0, 0, 1}));
    EXPECT_EQ((x != col).to_vector<bool>(), (std::vector<bool>{0, 1, 1, 1, 1, 0}));
    EXPECT_EQ((x < 2.0).to_vector<bool>(), (std::vector<bool>{1, 0, 0}));
    EXPECT_EQ((x <= 1.0).to_vector<bool>(), (std::vector<bool>{1, 0, 0}));
    EXPECT_EQ((x > 1.0).to_vector<bool>(), (std::vector<bool>{0, 0, 1}));
    EXPECT_EQ((x >= 3.0).to_vector<bool>(), (std::vector<bool>{0, 0, 1}));
    EXPECT_EQ((2.0 < x).to_vector<bool>(), (std::vector<bool>{0, 0, 1}));  // x > 2
    EXPECT_EQ((1.0 >= x).to_vector<bool>(), (std::vector<bool>{1, 0, 0}));  // x <= 1
    EXPECT_EQ((nan != x).to_vector<bool>(), (std::vector<bool>{1, 1, 1}));
    EXPECT_EQ(x.eq(x).to_vector<bool>(), (std::vector<bool>{1, 0, 1}));  // NaN is not itself
    EXPECT_EQ(x.ge(col).to_vector<bool>(), (std::vector<bool>{1, 0, 1, 0, 0, 1}));
  }
  // 0.1 is rounded to float32 beside a float32 tensor, as PyTorch does: 0.1f == 0.1 there.
  EXPECT_TRUE((tensor({0.1}, {1}) == 0.1).to_vector<bool>()[0]);
  EXPECT_FALSE((tensor({0.1}, {1}, kFloat64) == static_cast<double>(0.1f)).to_vector<bool>()[0]);
  // int64 compares exactly: 2^53 + 1 and 2^53 are one double, and two int64 values.
  const std::int64_t big = std::int64_t{1} << 53;
  Tensor ids = from_vector<std::int64_t>({big + 1, big, -4}, {3});
  EXPECT_EQ((ids == from_vector<std::int64_t>({big, big, -4}, {3})).to_vector<bool>(), (std::vector<bool>{0, 1, 1}));
  EXPECT_EQ((ids > 9007199254740992.0).to_vector<bool>(), (std::vector<bool>{1, 0, 0}));
  EXPECT_EQ((ids.lt(-3.0)).to_vector<bool>(), (std::vector<bool>{0, 0, 1}));
  Tensor mask = from_vector<bool>({true, false}, {2});
  EXPECT_EQ((mask == 1.0).to_vector<bool>(), (std::vector<bool>{1, 0}));
  EXPECT_EQ((mask < from_vector<bool>({true, true}, {2})).to_vector<bool>(), (std::vector<bool>{0, 1}));
  // The evaluation loop's count: 2 of 3 rows pick their target.
  Tensor logits = tensor({0.1, 0.9, 0.8, 0.2, 0.3, 0.7}, {3, 2});
  Tensor correct = logits.argmax(-1) == from_vector<std::int64_t>({1, 0, 0}, {3});
  EXPECT_EQ(correct.to_vector<bool>(), (std::vector<bool>{1, 1, 0}));
  // Empty shapes give empty results.
  EXPECT_EQ((zeros({0, 3}) < zeros({3})).shape(), (Shape{0, 3}));
}

// A comparison is never part of a graph: its inputs may require grad, its result does not, and
// no node is recorded (as in PyTorch), in forward mode neither.
TEST(Compare, HasNoGradient) {
  Generator gen(3);
  Tensor x = normal_leaf({2, 3}, gen);
  Tensor y = x > 0.0;
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  Tensor loss = (x * y.to(kFloat64)).sum();  // relu's value, the mask a constant
  loss.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), y.to(kFloat64).to_vector<double>());
}

// The naive backend's loop gives the same bools, and is the one that ran.
TEST(Compare, NaiveBackendServesIt) {
  testing::CountCalls counting;
  Generator gen(8);
  Tensor a = randn({4, 1, 3}, gen, kFloat64), b = randn({5, 3}, gen, kFloat64);
  std::vector<Tensor> fast = {a == b, a != b, a < b, a <= b, a > b, a >= b, a < 0.25};
  KernelGuard naive(Kernels::Naive);
  counting.reset();
  std::vector<Tensor> loops = {a == b, a != b, a < b, a <= b, a > b, a >= b, a < 0.25};
  EXPECT_GE(counting.naive(), 7);
  for (std::size_t i = 0; i < fast.size(); ++i)
    EXPECT_EQ(loops[i].to_vector<bool>(), fast[i].to_vector<bool>()) << "comparison " << i;
}

TEST(Compare, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { ones({2}, kFloat32) < ones({2}, kFloat64); },
      "lt: dtypes differ: float32 with shape [2] and float64 with shape [2] (compare tensors of one dtype: convert "
      "one with .to(ag::kFloat32))"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(3) == full({3}, 1, kBool); },
                                                 "eq: dtypes differ: int64 with shape [3] and bool with shape [3] "
                                                 "(compare tensors of one dtype: convert one with .to(ag::kInt64))"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { ones({2, 3}) >= ones({4}); },
      "ge: shapes [2, 3] and [4] cannot be broadcast: sizes 3 and 4 in dim 0 from the right differ"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { arange(4) < 1.5; },
      "lt: 1.5 is not an int64 value, so an int64 tensor (shape [4]) cannot be compared with it exactly"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(4) != std::numeric_limits<double>::quiet_NaN(); },
                                                 "ne: nan is not an int64 value"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(4) <= 0x1p63; }, "le: 9.223372036854776e+18 is not an int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { full({2}, 1, kBool) == 2.0; },
                                                 "eq: a bool tensor (shape [2]) compares with 0 or 1 only, got 2"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { Tensor() > 0.0; }, "gt: got an undefined tensor"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { ones({2}) == Tensor(); }, "eq: got an undefined tensor"));
}

// maximum and minimum broadcast, and a NaN on either side wins, as in PyTorch.
TEST(Extremum, ValuesByHand) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = tensor({1, 5, nan, -2}, {4}, dtype), b = tensor({3, -1}, {2, 1}, dtype);
    std::vector<double> hi = maximum(a, b).to(kFloat64).to_vector<double>();
    std::vector<double> lo = a.minimum(b).to(kFloat64).to_vector<double>();
    ASSERT_EQ(hi.size(), 8u);
    // row 0 against 3, row 1 against -1
    std::vector<double> want_hi = {3, 5, nan, 3, 1, 5, nan, -1}, want_lo = {1, 3, nan, -2, -1, -1, nan, -2};
    for (std::size_t i = 0; i < hi.size(); ++i) {
      if (std::isnan(want_hi[i])) {
        EXPECT_TRUE(std::isnan(hi[i]) && std::isnan(lo[i])) << i;
      } else {
        EXPECT_EQ(hi[i], want_hi[i]) << i;
        EXPECT_EQ(lo[i], want_lo[i]) << i;
      }
    }
    // A NaN as the second operand wins too.
    EXPECT_TRUE(std::isnan(maximum(tensor({1}, {1}, dtype), tensor({nan}, {1}, dtype)).item()));
    EXPECT_TRUE(std::isnan(minimum(tensor({1}, {1}, dtype), tensor({nan}, {1}, dtype)).item()));
  }
}

// d maximum(a, b) / da is 1 where a wins, 0 where it loses and 1/2 on a tie (PyTorch's split);
// b with shape [1] collects its shares over the row: by hand 0 + 1/2 + 1 = 1.5.
TEST(Extremum, GradientsByHandWithATie) {
  Tensor a = tensor({3, 2, 1}, {3}, kFloat64).requires_grad_();
  Tensor b = tensor({2}, {1}, kFloat64).requires_grad_();
  maximum(a, b).sum().backward();
  EXPECT_TRUE(all_close(a.grad(), {1, 0.5, 0}, 0));
  EXPECT_TRUE(all_close(b.grad(), {1.5}, 0));
  a.zero_grad();
  b.zero_grad();
  minimum(a, b).sum().backward();
  EXPECT_TRUE(all_close(a.grad(), {0, 0.5, 1}, 0));
  EXPECT_TRUE(all_close(b.grad(), {1.5}, 0));
}

TEST(Extremum, GradcheckBothModesAndSecondOrder) {
  Generator gen(31);
  Tensor a = normal_leaf({3, 1, 5}, gen), b = normal_leaf({4, 1}, gen);  // [3, 4, 5], no ties
  for (auto op : {maximum, minimum}) {
    auto f = [op](const std::vector<Tensor>& in) { return op(in[0] * in[0], in[1] * 3.0); };
    EXPECT_TRUE(testing::gradcheck(f, {a, b}, {.check_forward_ad = true}));
    EXPECT_TRUE(testing::gradgradcheck(f, {a, b}));
  }
}

TEST(Extremum, NaiveBackendServesIt) {
  testing::CountCalls counting;
  Generator gen(32);
  Tensor a = randn({4, 1, 3}, gen, kFloat64), b = randn({5, 3}, gen, kFloat64);
  b.mutable_data_ptr<double>()[4] = std::numeric_limits<double>::quiet_NaN();
  std::vector<Tensor> fast = {maximum(a, b), minimum(a, b), maximum(b, a), minimum(b, a)};
  KernelGuard naive(Kernels::Naive);
  counting.reset();
  std::vector<Tensor> loops = {maximum(a, b), minimum(a, b), maximum(b, a), minimum(b, a)};
  EXPECT_GE(counting.naive(), 4);
  for (std::size_t i = 0; i < fast.size(); ++i) {
    std::vector<double> f = fast[i].to_vector<double>(), l = loops[i].to_vector<double>();
    for (std::size_t j = 0; j < f.size(); ++j)
      EXPECT_TRUE(f[j] == l[j] || (std::isnan(f[j]) && std::isnan(l[j]))) << "op " << i << " element " << j;
  }
}

// clamp(x, -1, 2) on values inside, outside and on each bound: the gradient passes at a bound
// itself (PyTorch's choice) and stops where the bound replaced x.
TEST(Clamp, ValuesAndGradientsByHand) {
  Tensor x = tensor({-3, -1, 0.5, 2, 7}, {5}, kFloat64).requires_grad_();
  Tensor y = clamp(x, -1.0, 2.0);
  EXPECT_TRUE(all_close(y, {-1, -1, 0.5, 2, 2}, 0));
  y.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {0, 1, 1, 1, 0}, 0));
  EXPECT_TRUE(all_close(x.clamp_min(0.0), {0, 0, 0.5, 2, 7}, 0));
  EXPECT_TRUE(all_close(x.clamp_max(0.0), {-3, -1, 0, 0, 0}, 0));
  EXPECT_TRUE(all_close(x.clamp(std::nullopt, 1.0), {-3, -1, 0.5, 1, 1}, 0));
  EXPECT_TRUE(all_close(clamp(x, 3.0, 1.0), {1, 1, 1, 1, 1}, 0));  // min > max: all max, as in PyTorch
  // A bound is rounded to x's dtype: 0.1 beside float32 is 0.1f.
  EXPECT_EQ(clamp(tensor({0.5}, {1}), std::nullopt, 0.1).item(), static_cast<double>(0.1f));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(clamp(tensor({nan}, {1}, kFloat64), 0.0, 1.0).item()));
}

TEST(Clamp, GradcheckBothModesAndSecondOrder) {
  Generator gen(33);
  Tensor x = normal_leaf({3, 5, 2}, gen);
  auto f = [](const std::vector<Tensor>& in) { return clamp(in[0] * in[0] * in[0], -0.3, 0.4); };
  EXPECT_TRUE(testing::gradcheck(f, {x}, {.check_forward_ad = true}));
  EXPECT_TRUE(testing::gradgradcheck(f, {x}));
}

TEST(Extremum, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { maximum(ones({2}), ones({3})); },
                                                 "maximum: shapes [2] and [3] cannot be broadcast"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { minimum(ones({2}), ones({2}, kFloat64)); },
                                                 "minimum: dtypes differ"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { maximum(arange(2), arange(2)); },
                                                 "maximum: expected a float32 or float64 tensor, got int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { clamp(ones({2, 3}), std::nullopt, std::nullopt); },
                                                 "clamp: give min, max or both (x has shape [2, 3])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { clamp(ones({2}), std::numeric_limits<double>::quiet_NaN(), 1.0); }, "clamp: a bound is NaN (min nan, max 1)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { clamp(arange(2), 0.0, 1.0); },
                                                 "clamp: expected a float32 or float64 tensor, got int64"));
}

}  // namespace
}  // namespace ag
