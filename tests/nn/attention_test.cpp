// Checks nn/attention.cpp: MultiHeadAttention against a head-by-head computation, gradients
// w.r.t. inputs and parameters for self-, cross- and causal attention, and the properties
// attention must have.
#include <cmath>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::gradcheck_module;
using test::normal_leaf;
using test::throws_with;

// d_model 12, 3 heads, batch 2, Tq 5, Tk 7: the sizes the module tests use throughout.
constexpr std::int64_t kD = 12, kH = 3, kB = 2, kTq = 5, kTk = 7;

std::unique_ptr<nn::MultiHeadAttention> make_mha(Generator& gen, nn::MultiHeadAttentionOptions options = {}) {
  auto mha = std::make_unique<nn::MultiHeadAttention>(kD, kH, options, gen);
  mha->to(kFloat64);
  return mha;
}

TEST(MultiHeadAttention, MatchesAHeadByHeadComputation) {
  // Project with the module's own weights, then attend one head at a time over its slice of
  // channels with plain ops, concatenate the heads, and project out.
  Generator gen(1);
  nn::MultiHeadAttention self_module(kD, kH, {}, gen), cross_module(kD, kH, {.cross = true}, gen);
  self_module.to(kFloat64);
  cross_module.to(kFloat64);
  Tensor x = randn({kB, kTq, kD}, gen, kFloat64), y = randn({kB, kTk, kD}, gen, kFloat64);
  // Self-attention (one tensor for all three: one product, read in place), a self-attention
  // module given another sequence as memory (each input with its rows of the stacked weight),
  // and cross-attention (q_proj, and kv_proj as one product).
  struct Case {
    const char* name;
    nn::MultiHeadAttention& mha;
    Tensor query, memory;
  };
  for (Case c : {Case{"self-attention", self_module, x, x}, Case{"self module on a memory", self_module, x, y},
                 Case{"cross-attention", cross_module, x, y}}) {
    SCOPED_TRACE(c.name);
    nn::MultiHeadAttention& mha = c.mha;
    Tensor query = c.query, memory = c.memory;
    Tensor weights;
    Tensor output = mha.forward(query, memory, memory, {}, false, &weights);

    Tensor q = test::project_by_hand(mha, 0, query);
    Tensor k = test::project_by_hand(mha, 1, memory);
    Tensor v = test::project_by_hand(mha, 2, memory);
    std::int64_t dh = kD / kH;
    std::vector<Tensor> heads;
    for (std::int64_t h = 0; h < kH; ++h) {
      Tensor qh = q.slice(2, h * dh, (h + 1) * dh), kh = k.slice(2, h * dh, (h + 1) * dh),
             vh = v.slice(2, h * dh, (h + 1) * dh);
      Tensor w = softmax(qh.matmul(kh.transpose(1, 2)) / std::sqrt(static_cast<double>(dh)), -1);  // [B, Tq, Tk]
      EXPECT_TRUE(all_close(weights.slice(1, h, h + 1).squeeze(1), w, 1e-12));
      heads.push_back(w.matmul(vh));
    }
    Tensor expected = linear(cat(heads, 2), mha.out_proj->weight, mha.out_proj->bias);
    EXPECT_TRUE(all_close(output, expected, 1e-12));
    EXPECT_EQ(weights.shape(), (Shape{kB, kH, kTq, memory.size(1)}));  // [batch, heads, tgt_len, src_len]
  }
}

TEST(MultiHeadAttention, GradcheckSelfCrossCausalAndRotary) {
  Generator gen(2);
  {
    SCOPED_TRACE("self-attention with key padding");
    auto mha = make_mha(gen);
    Tensor x = normal_leaf({kB, kTq, kD}, gen);
    Tensor mask = key_padding_mask({kTq, 3}, kTq);
    EXPECT_TRUE(gradcheck_module(*mha, {x}, [&] { return mha->forward(x, x, x, mask); }));
  }
  {
    SCOPED_TRACE("cross-attention, Tq != Tk, separate key and value");
    auto mha = make_mha(gen);
    Tensor x = normal_leaf({kB, kTq, kD}, gen), key = normal_leaf({kB, kTk, kD}, gen),
           value = normal_leaf({kB, kTk, kD}, gen);
    EXPECT_TRUE(gradcheck_module(*mha, {x, key, value}, [&] { return mha->forward(x, key, value); }));
  }
  {
    SCOPED_TRACE("causal self-attention, no bias");
    auto mha = make_mha(gen, {.bias = false});
    Tensor x = normal_leaf({kB, kTk, kD}, gen);
    EXPECT_TRUE(gradcheck_module(*mha, {x}, [&] { return mha->forward(x, x, x, {}, true); }));
  }
  {
    SCOPED_TRACE("causal self-attention with RoPE");
    auto mha = make_mha(gen, {.rotary = true, .max_len = 16});
    Tensor x = normal_leaf({kB, kTk, kD}, gen);
    EXPECT_TRUE(gradcheck_module(*mha, {x}, [&] { return mha->forward(x, x, x, {}, true); }));
  }
}

// The experiment knobs: an explicit scale, and masking with 0 instead of -inf.
TEST(MultiHeadAttention, ScaleAndZeroFillKnobs) {
  Generator gen(12);
  auto mha = make_mha(gen);
  Tensor x = normal_leaf({kB, kTq, kD}, gen), memory = normal_leaf({kB, kTk, kD}, gen);
  Tensor mask = key_padding_mask({kTk, 4}, kTk);
  Tensor standard = mha->forward(x, memory, memory, mask);
  mha->scale = 1.0 / std::sqrt(static_cast<double>(mha->head_dim));  // the default, spelled out
  EXPECT_TRUE(all_close(mha->forward(x, memory, memory, mask), standard, 1e-14));
  mha->scale = 1.0;
  EXPECT_FALSE(all_close(mha->forward(x, memory, memory, mask), standard, 1e-6));
  EXPECT_TRUE(gradcheck_module(*mha, {x, memory}, [&] { return mha->forward(x, memory, memory, mask); }));

  // Zero fill: each masked score counts as exp(0 - m) next to the allowed ones. Checked against
  // softmax over the scores with the masked ones replaced by 0, built from the projections.
  mha->scale.reset();
  mha->zero_fill_mask = true;
  Tensor weights;
  mha->forward(x, x, x, {}, true, &weights);
  Tensor q = test::project_by_hand(*mha, 0, x).reshape({kB, kTq, kH, kD / kH}).transpose(1, 2);
  Tensor k = test::project_by_hand(*mha, 1, x).reshape({kB, kTq, kH, kD / kH}).transpose(1, 2);
  Tensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(kD / kH));
  Tensor expected = softmax(masked_fill(scores, logical_not(causal_mask(kTq, kTq)), 0.0), -1);
  EXPECT_TRUE(all_close(weights, expected, 1e-13));
  EXPECT_TRUE(gradcheck_module(*mha, {x}, [&] { return mha->forward(x, x, x, {}, true); }));
  EXPECT_TRUE(gradcheck_module(*mha, {x, memory}, [&] { return mha->forward(x, memory, memory, mask, false); }));
}

TEST(MultiHeadAttention, CausalOutputIgnoresLaterTokens) {
  Generator gen(3);
  auto mha = make_mha(gen);
  Tensor x = randn({1, kTk, kD}, gen, kFloat64);
  Tensor y = mha->forward(x, x, x, {}, true);
  const std::int64_t t = 2;
  Tensor x2 = cat({x.slice(1, 0, t + 1), randn({1, kTk - t - 1, kD}, gen, kFloat64)}, 1);
  Tensor y2 = mha->forward(x2, x2, x2, {}, true);
  EXPECT_TRUE(all_close(y2.slice(1, 0, t + 1), y.slice(1, 0, t + 1), 1e-14));
  EXPECT_FALSE(all_close(y2.slice(1, t + 1, kTk), y.slice(1, t + 1, kTk), 1e-3));
}

// Reorders dim 1 of x by `order`.
Tensor permute_positions(const Tensor& x, const std::vector<std::int64_t>& order) {
  std::vector<Tensor> rows;
  for (auto i : order) rows.push_back(x.slice(1, i, i + 1));
  return cat(rows, 1);
}

TEST(MultiHeadAttention, SelfAttentionIsPermutationEquivariantWithoutPositions) {
  Generator gen(4);
  auto mha = make_mha(gen);
  Tensor x = randn({kB, kTq, kD}, gen, kFloat64);
  std::vector<std::int64_t> order = {3, 0, 4, 1, 2};
  Tensor y = mha->forward(x, x, x);
  Tensor px = permute_positions(x, order);
  EXPECT_TRUE(all_close(mha->forward(px, px, px), permute_positions(y, order), 1e-13));
  // Add positions (sinusoidal) and the symmetry is gone.
  nn::SinusoidalPositionalEncoding pe(16, kD);
  pe.to(kFloat64);
  Tensor xp = pe.forward(x), pxp = pe.forward(px);
  EXPECT_FALSE(all_close(mha->forward(pxp, pxp, pxp), permute_positions(mha->forward(xp, xp, xp), order), 1e-3));
}

TEST(MultiHeadAttention, CrossAttentionIgnoresTheOrderOfKeyValuePairs) {
  Generator gen(5);
  auto mha = make_mha(gen);
  Tensor query = randn({kB, kTq, kD}, gen, kFloat64), memory = randn({kB, kTk, kD}, gen, kFloat64);
  std::vector<std::int64_t> order = {6, 2, 0, 5, 1, 3, 4};
  Tensor pm = permute_positions(memory, order);
  EXPECT_TRUE(all_close(mha->forward(query, pm, pm), mha->forward(query, memory, memory), 1e-13));
}

TEST(MultiHeadAttention, FullyMaskedQueryAttendsToNothing) {
  Generator gen(6);
  auto mha = make_mha(gen);
  Tensor x = randn({kB, kTq, kD}, gen, kFloat64);
  Tensor mask = key_padding_mask({0, kTq}, kTq);  // sequence 0: every key is padding
  Tensor weights;
  Tensor output = mha->forward(x, x, x, mask, false, &weights);
  EXPECT_TRUE(all_close(weights.slice(0, 0, 1), std::vector<double>(kH * kTq * kTq, 0.0), 0));
  // Zero attention output, so the module's output is just the output projection's bias.
  Tensor bias_rows = broadcast_to(mha->out_proj->bias, {1, kTq, kD});
  EXPECT_TRUE(all_close(output.slice(0, 0, 1), bias_rows, 0));
}

TEST(MultiHeadAttention, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::MultiHeadAttention(10, 3); },
                                                 "MultiHeadAttention: d_model 10 is not divisible into 3 heads"));
  nn::MultiHeadAttention mha(kD, kH);
  Tensor x = ones({kB, kTq, kD});
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, ones({kB, kTk, kD}), ones({kB, 6, kD}));
      },
      "MultiHeadAttention: key length 7 and value length 6 differ (shapes [2, 7, 12] and [2, 6, 12])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, x, x, full({4, 4}, 1, kBool));
      },
      "MultiHeadAttention: mask of shape [4, 4] does not broadcast to [B, H, Tq, Tk] = [2, 3, 5, 5]"));
  // The same check when key and value are distinct tensors, which take the unpacked op.
  Tensor kv = ones({kB, kTq, kD});
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, kv, kv, full({4, 4}, 1, kBool));
      },
      "MultiHeadAttention: mask of shape [4, 4] does not broadcast to [B, H, Tq, Tk] = [2, 3, 5, 5]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(ones({kB, kTq, 8}), x, x);
      },
      "MultiHeadAttention: query, key and value must be [B, T, 12], got shapes [2, 5, 8]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, ones({3, kTq, kD}), ones({3, kTq, kD}));
      },
      "MultiHeadAttention: batch sizes differ"));
}

TEST(MultiHeadAttention, ReturnsTheOutputAndTheWeightsOnlyWhenAsked) {
  Generator gen(8);
  auto mha = make_mha(gen);
  Tensor x = randn({kB, kTq, kD}, gen, kFloat64);
  Tensor weights;
  Tensor with = mha->forward(x, x, x, {}, true, &weights);
  Tensor without = mha->forward(x, x, x, {}, true);
  EXPECT_EQ(with.shape(), (Shape{kB, kTq, kD}));
  EXPECT_TRUE(all_close(with, without, 0));
  ASSERT_TRUE(weights.defined());
  EXPECT_EQ(weights.shape(), (Shape{kB, kH, kTq, kTq}));
  EXPECT_TRUE(all_close(weights.sum(-1), std::vector<double>(kB * kH * kTq, 1.0), 1e-14));  // rows are distributions
}

TEST(MultiHeadAttention, ABatchByKeyMaskIsRefusedWithTheKeyPaddingSpelling) {
  nn::MultiHeadAttention mha(kD, kH, {.cross = true});
  Tensor x = ones({kB, kTq, kD}), memory = ones({kB, kTk, kD});
  Tensor padding = from_vector<bool>(std::vector<bool>(kB * kTk, true), {kB, kTk});  // [B, Tk] = [2, 7]
  auto call = [&] { mha.forward(x, memory, memory, padding); };
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      call,
      "MultiHeadAttention: mask of shape [2, 7] does not broadcast to [B, H, Tq, Tk] = [2, 3, 5, 7]; expected "
      "[Tq, Tk] = [5, 7] (one pattern for the batch), [B, 1, 1, Tk] = [2, 1, 1, 7] (key padding) or [B, 1, Tq, Tk] "
      "= [2, 1, 5, 7]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      call, "build it with ag::key_padding_mask(lengths, 7), or reshape yours with mask.reshape({2, 1, 1, 7})"));
  // Any other misfit names key_padding_mask too.
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, memory, memory, ones({3, 7}, kBool));
      },
      "for key padding use ag::key_padding_mask(lengths, 7)"));
}

TEST(MultiHeadAttention, TheSuggestedReshapeIsKeyPaddingMask) {
  Generator gen(9);
  nn::MultiHeadAttention mha(kD, kH, {.cross = true}, gen);
  mha.to(kFloat64);
  Tensor x = randn({kB, kTq, kD}, gen, kFloat64), memory = randn({kB, kTk, kD}, gen, kFloat64);
  std::vector<bool> keep;
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t t = 0; t < kTk; ++t) keep.push_back(t < (b == 0 ? 4 : 7));
  Tensor padding = from_vector<bool>(keep, {kB, kTk});
  Tensor reshaped = mha.forward(x, memory, memory, padding.reshape({kB, 1, 1, kTk}));
  EXPECT_TRUE(all_close(reshaped, mha.forward(x, memory, memory, key_padding_mask({4, 7}, kTk)), 0));
  EXPECT_FALSE(all_close(reshaped, mha.forward(x, memory, memory), 1e-6));  // the mask does something
}

}  // namespace
}  // namespace ag
