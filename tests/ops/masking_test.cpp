// Checks ops/masking.cpp: masked_fill, where and the mask builders.
#include "../../ops/call_counts.h"
#include "../test_util.h"

#include <limits>

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

TEST(Masking, MaskedFillBroadcastsTheMask) {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64);
  Tensor column_mask = from_vector<bool>({false, true, false}, {3});
  EXPECT_TRUE(all_close(masked_fill(x, column_mask, -1), {1, -1, 3, 4, -1, 6}, 0));
  Tensor row_mask = from_vector<bool>({true, false}, {2, 1});
  EXPECT_TRUE(all_close(masked_fill(x, row_mask, 0), {0, 0, 0, 4, 5, 6}, 0));
}

TEST(Masking, NoGradientThroughFilledPositions) {
  Tensor x = tensor({1, 2, 3}, {3}, kFloat64).requires_grad_();
  Tensor mask = from_vector<bool>({false, true, false}, {3});
  masked_fill(x, mask, 7).backward(tensor({10, 20, 30}, {3}, kFloat64));
  EXPECT_TRUE(all_close(x.grad(), {10, 0, 30}, 0));
  Generator gen(1);
  Tensor leaf = test::normal_leaf({2, 3, 4}, gen);
  Tensor m = from_vector<bool>({true, false, false, true}, {4});
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return masked_fill(in[0], m, 0.5); }, {leaf}));
}

TEST(Masking, CausalMaskAlignsTheLastQueryWithTheLastKey) {
  // Tq = Tk: the lower triangle.
  EXPECT_EQ(causal_mask(3, 3).to_vector<bool>(),
            (std::vector<bool>{true, false, false, true, true, false, true, true, true}));
  // Tq = 2 queries continuing a prefix of 2 cached keys (Tk = 4): query 0 is position 2.
  EXPECT_EQ(causal_mask(2, 4).to_vector<bool>(), (std::vector<bool>{true, true, true, false, true, true, true, true}));
}

TEST(Masking, KeyPaddingMask) {
  Tensor m = key_padding_mask({2, 3}, 3);
  EXPECT_EQ(m.shape(), (Shape{2, 1, 1, 3}));
  EXPECT_EQ(m.to_vector<bool>(), (std::vector<bool>{true, true, false, true, true, true}));
}

TEST(Masking, LogicalOps) {
  Tensor a = from_vector<bool>({true, false}, {2});
  EXPECT_EQ(logical_not(a).to_vector<bool>(), (std::vector<bool>{false, true}));
  Tensor b = from_vector<bool>({true, true, false, true}, {2, 2});
  EXPECT_EQ(logical_and(a, b).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
}

TEST(Masking, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        masked_fill(ones({2, 3}), ones({3}), 0);
      },
      "masked_fill: mask must be bool, got float32 with shape [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        masked_fill(ones({2, 3}), full({2}, 1, kBool), 0);
      },
      "masked_fill: shapes [2] and [2, 3] cannot be broadcast"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        masked_fill(ones({3}), full({2, 3}, 1, kBool), 0);
      },
      "masked_fill: mask of shape [2, 3] does not broadcast to shape [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { key_padding_mask({4}, 3); },
                                                 "key_padding_mask: length 4 of sequence 0 is outside 0..3"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { key_padding_mask({2, -1}, 3); },
                                                 "key_padding_mask: length -1 of sequence 1 is outside 0..3"));
}

// The masks come from the backend: the naive loops give the same bytes, and really run.
TEST(Masking, NaiveBackendBuildsTheSameMasks) {
  Tensor a = from_vector<bool>({true, false, true}, {3, 1});
  Tensor b = from_vector<bool>({true, true, false, false}, {1, 4});
  std::vector<std::vector<bool>> fast = {causal_mask(3, 5).to_vector<bool>(), causal_mask(5, 3).to_vector<bool>(),
                                         key_padding_mask({0, 2, 4}, 4).to_vector<bool>(),
                                         logical_not(a).to_vector<bool>(), logical_and(a, b).to_vector<bool>()};
  testing::CountCalls counting;
  KernelGuard naive(Kernels::Naive);
  std::vector<std::vector<bool>> loops = {causal_mask(3, 5).to_vector<bool>(), causal_mask(5, 3).to_vector<bool>(),
                                          key_padding_mask({0, 2, 4}, 4).to_vector<bool>(),
                                          logical_not(a).to_vector<bool>(), logical_and(a, b).to_vector<bool>()};
  EXPECT_GE(counting.naive(), 5);
  EXPECT_EQ(loops, fast);
  EXPECT_EQ(causal_mask(0, 4).numel(), 0);
  EXPECT_EQ(key_padding_mask({}, 3).shape(), (Shape{0, 1, 1, 3}));
}

TEST(Masking, MaskedFillMethodIsTheFreeFunction) {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64);
  Tensor mask = from_vector<bool>({true, false, true}, {3});
  EXPECT_TRUE(all_close(x.masked_fill(mask, -1), {-1, 2, -1, -1, 5, -1}, 0));
  EXPECT_TRUE(all_close(x.masked_fill(mask, 9), masked_fill(x, mask, 9), 0));
  Generator gen(33);
  Tensor leaf = test::normal_leaf({3, 5}, gen);
  Tensor m = from_vector<bool>({true, false, false, true, false}, {5});
  EXPECT_TRUE(
      testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].masked_fill(m, 0.5) * in[0]; }, {leaf}));
}

// The naive backend's masked_fill gives the same values and gradients, and really runs; its
// backward is masked_fill again, so a gradient taken with create_graph differentiates again.
TEST(Masking, NaiveBackendAndSecondOrder) {
  Generator gen(2);
  Tensor leaf = test::normal_leaf({2, 3, 4}, gen);
  Tensor m = from_vector<bool>({true, false, false, true}, {4});
  Tensor fast = masked_fill(leaf, m, -2.5);
  testing::CountCalls counting;
  {
    KernelGuard naive(Kernels::Naive);
    EXPECT_TRUE(all_close(masked_fill(leaf, m, -2.5), fast, 0));
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return masked_fill(in[0], m, 0.5); }, {leaf},
                                   {.check_forward_ad = true}));
  }
  EXPECT_GE(counting.naive(), 2);
  EXPECT_TRUE(testing::gradgradcheck(
      [&](const std::vector<Tensor>& in) { return masked_fill(in[0] * in[0], m, 0.5) * in[0]; }, {leaf}));
}

// or by hand, with broadcasting, and the operators.
TEST(Masking, LogicalOpsByHand) {
  Tensor a = from_vector<bool>({true, false, true, false}, {2, 2}), col = from_vector<bool>({false, true}, {2, 1});
  EXPECT_EQ(logical_or(a, col).to_vector<bool>(), (std::vector<bool>{1, 0, 1, 1}));
  EXPECT_EQ((a | col).to_vector<bool>(), (std::vector<bool>{1, 0, 1, 1}));
  EXPECT_EQ((a & col).to_vector<bool>(), (std::vector<bool>{0, 0, 1, 0}));
  EXPECT_EQ((~a).to_vector<bool>(), (std::vector<bool>{0, 1, 0, 1}));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { logical_or(a, ones({2})); },
                                                 "logical_or: mask must be bool, got float32 with shape [2]"));
}

// where picks by the condition after broadcasting all three; the side not chosen never reaches
// the result, so its inf and NaN do no harm (a * c + b * (1 - c) would give NaN there).
TEST(Where, ValuesByHand) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor c = from_vector<bool>({true, false}, {2, 1});
    Tensor a = tensor({1, 2, inf}, {3}, dtype), b = tensor({-1, nan, -3}, {3}, dtype);
    Tensor y = where(c, a, b);  // [2, 3]: row 0 from a, row 1 from b
    EXPECT_EQ(y.shape(), (Shape{2, 3}));
    EXPECT_EQ(y.dtype(), dtype);
    std::vector<double> got = y.to(kFloat64).to_vector<double>();
    EXPECT_EQ(got[0], 1);
    EXPECT_EQ(got[1], 2);
    EXPECT_EQ(got[2], inf);
    EXPECT_EQ(got[3], -1);
    EXPECT_TRUE(std::isnan(got[4]));
    EXPECT_EQ(got[5], -3);
    Tensor column = from_vector<bool>({false, true, false}, {3});
    EXPECT_TRUE(all_close(where(column, a, b).masked_fill(logical_not(column), 0), {0, 2, 0}, 0));
    EXPECT_TRUE(all_close(where(column, 7.0, tensor({1, 1, 1}, {3}, dtype)), {1, 7, 1}, 0));
    EXPECT_TRUE(all_close(tensor({1, 2, 3}, {3}, dtype).where(column, -5.0), {-5, 2, -5}, 0));
  }
}

// y = where(c, a, b) with a [2, 3] and b [3] broadcast: a's gradient is 1 where c holds, b's the
// count of rows where c fails, column by column (by hand: c's columns fail 1, 0 and 2 times).
TEST(Where, GradientsByHand) {
  Tensor c = from_vector<bool>({true, true, false, false, true, false}, {2, 3});
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64).requires_grad_();
  Tensor b = tensor({10, 20, 30}, {3}, kFloat64).requires_grad_();
  where(c, a, b).sum().backward();
  EXPECT_TRUE(all_close(a.grad(), {1, 1, 0, 0, 1, 0}, 0));
  EXPECT_TRUE(all_close(b.grad(), {1, 0, 2}, 0));
}

TEST(Where, GradcheckBothModesAndSecondOrder) {
  Generator gen(21);
  Tensor c = (rand({3, 1, 5}, gen) < 0.5);
  Tensor a = normal_leaf({1, 4, 5}, gen), b = normal_leaf({4, 1}, gen);  // broadcast to [3, 4, 5]
  auto f = [c](const std::vector<Tensor>& in) { return where(c, in[0] * in[0], in[1].exp()); };
  EXPECT_TRUE(testing::gradcheck(f, {a, b}, {.check_forward_ad = true}));
  EXPECT_TRUE(testing::gradgradcheck(f, {a, b}));
  // One side a constant: only the other gets a gradient, and the tangent of the constant is 0.
  Tensor k = randn({4, 5}, gen, kFloat64);
  EXPECT_TRUE(testing::gradcheck([c, k](const std::vector<Tensor>& in) { return where(c, k, in[0] * 2.0); }, {a},
                                 {.check_forward_ad = true}));
  EXPECT_TRUE(testing::gradcheck([c, k](const std::vector<Tensor>& in) { return where(c, in[0].tanh(), k); }, {b},
                                 {.check_forward_ad = true}));
}

TEST(Where, NaiveBackendServesIt) {
  testing::CountCalls counting;
  Generator gen(22);
  Tensor c = (rand({4, 3}, gen) < 0.5);
  Tensor a = randn({4, 3}, gen, kFloat64), b = randn({3}, gen, kFloat64);
  Tensor fast = where(c, a, b);
  KernelGuard naive(Kernels::Naive);
  counting.reset();
  Tensor loops = where(c, a, b);
  EXPECT_GE(counting.naive(), 1);
  EXPECT_EQ(loops.to_vector<double>(), fast.to_vector<double>());
}

TEST(Where, Errors) {
  Tensor c = from_vector<bool>({true, false}, {2});
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { where(ones({2}), ones({2}), ones({2})); },
                                                 "where: mask must be bool, got float32 with shape [2]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { where(c, ones({2}), ones({2}, kFloat64)); },
                                                 "where: dtypes differ"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { where(c, ones({3}), ones({2})); },
                                                 "where: shapes [2] and [3] cannot be broadcast"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { where(c, arange(2), 0.0); },
                                                 "where: expected a float32 or float64 tensor, got int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { where(Tensor(), ones({2}), ones({2})); },
                                                 "where: got an undefined tensor"));
}

}  // namespace
}  // namespace ag
