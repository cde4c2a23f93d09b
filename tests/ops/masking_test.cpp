// Checks ops/masking.cpp: masked_fill and the mask builders.
#include "../../ops/call_counts.h"
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
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

}  // namespace
}  // namespace ag
