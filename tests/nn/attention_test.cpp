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
    Tensor output = mha.forward(query, memory, {.weights = &weights});

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
    EXPECT_TRUE(gradcheck_module(*mha, {x}, [&] { return mha->forward(x, x, {.attn_mask = mask}); }));
  }
  {
    SCOPED_TRACE("cross-attention, Tq != Tk");
    auto mha = make_mha(gen, {.cross = true});
    Tensor x = normal_leaf({kB, kTq, kD}, gen), memory = normal_leaf({kB, kTk, kD}, gen);
    EXPECT_TRUE(gradcheck_module(*mha, {x, memory}, [&] { return mha->forward(x, memory); }));
  }
  {
    SCOPED_TRACE("causal self-attention, no bias");
    auto mha = make_mha(gen, {.bias = false});
    Tensor x = normal_leaf({kB, kTk, kD}, gen);
    EXPECT_TRUE(gradcheck_module(*mha, {x}, [&] { return mha->forward(x, x, {.causal = true}); }));
  }
  {
    SCOPED_TRACE("causal self-attention with RoPE");
    auto mha = make_mha(gen, {.rotary = true, .max_len = 16});
    Tensor x = normal_leaf({kB, kTk, kD}, gen);
    EXPECT_TRUE(gradcheck_module(*mha, {x}, [&] { return mha->forward(x, x, {.causal = true}); }));
  }
}

// The experiment knob: an explicit scale. (Masking with 0 instead of -inf is not a knob of the
// module: the experiment calls attention_reference with masked_score = 0, tests/ops/attention_test.cpp.)
TEST(MultiHeadAttention, ScaleKnob) {
  Generator gen(12);
  auto mha = make_mha(gen);
  Tensor x = normal_leaf({kB, kTq, kD}, gen), memory = normal_leaf({kB, kTk, kD}, gen);
  nn::AttentionCall padded{.attn_mask = key_padding_mask({kTk, 4}, kTk)};
  Tensor standard = mha->forward(x, memory, padded);
  mha->scale = 1.0 / std::sqrt(static_cast<double>(mha->head_dim));  // the default, spelled out
  EXPECT_TRUE(all_close(mha->forward(x, memory, padded), standard, 1e-14));
  mha->scale = 1.0;
  EXPECT_FALSE(all_close(mha->forward(x, memory, padded), standard, 1e-6));
  EXPECT_TRUE(gradcheck_module(*mha, {x, memory}, [&] { return mha->forward(x, memory, padded); }));
}

TEST(MultiHeadAttention, CausalOutputIgnoresLaterTokens) {
  Generator gen(3);
  auto mha = make_mha(gen);
  Tensor x = randn({1, kTk, kD}, gen, kFloat64);
  Tensor y = mha->forward(x, x, {.causal = true});
  const std::int64_t t = 2;
  Tensor x2 = cat({x.slice(1, 0, t + 1), randn({1, kTk - t - 1, kD}, gen, kFloat64)}, 1);
  Tensor y2 = mha->forward(x2, x2, {.causal = true});
  EXPECT_TRUE(all_close(y2.slice(1, 0, t + 1), y.slice(1, 0, t + 1), 1e-14));
  EXPECT_FALSE(all_close(y2.slice(1, t + 1, kTk), y.slice(1, t + 1, kTk), 1e-3));
}

// Generation's path: a prompt, then one token at a time through the cache, with RoPE, whose
// positions must continue from the cache's length. Equal to one causal pass over everything.
TEST(MultiHeadAttention, CachedStepsWithRoPEMatchOneCausalPass) {
  Generator gen(10);
  auto mha = make_mha(gen, {.rotary = true, .max_len = 16});
  Tensor x = randn({kB, kTk, kD}, gen, kFloat64);
  Tensor whole = mha->forward(x, x, {.causal = true});
  nn::KVCache cache;
  Tensor prompt = x.slice(1, 0, 4);
  std::vector<Tensor> steps{mha->forward(prompt, prompt, {.causal = true, .cache = &cache})};
  for (std::int64_t t = 4; t < kTk; ++t) {
    Tensor token = x.slice(1, t, t + 1);
    steps.push_back(mha->forward(token, token, {.causal = true, .cache = &cache}));
  }
  EXPECT_EQ(cache.length(), kTk);
  EXPECT_TRUE(all_close(cat(steps, 1), whole, 1e-12));
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
  Tensor y = mha->forward(x, x);
  Tensor px = permute_positions(x, order);
  EXPECT_TRUE(all_close(mha->forward(px, px), permute_positions(y, order), 1e-13));
  // Add positions (sinusoidal) and the symmetry is gone.
  nn::SinusoidalPositionalEncoding pe(16, kD);
  pe.to(kFloat64);
  Tensor xp = pe.forward(x), pxp = pe.forward(px);
  EXPECT_FALSE(all_close(mha->forward(pxp, pxp), permute_positions(mha->forward(xp, xp), order), 1e-3));
}

TEST(MultiHeadAttention, CrossAttentionIgnoresTheOrderOfKeyValuePairs) {
  Generator gen(5);
  auto mha = make_mha(gen);
  Tensor query = randn({kB, kTq, kD}, gen, kFloat64), memory = randn({kB, kTk, kD}, gen, kFloat64);
  std::vector<std::int64_t> order = {6, 2, 0, 5, 1, 3, 4};
  Tensor pm = permute_positions(memory, order);
  EXPECT_TRUE(all_close(mha->forward(query, pm), mha->forward(query, memory), 1e-13));
}

TEST(MultiHeadAttention, FullyMaskedQueryAttendsToNothing) {
  Generator gen(6);
  auto mha = make_mha(gen);
  Tensor x = randn({kB, kTq, kD}, gen, kFloat64);
  Tensor mask = key_padding_mask({0, kTq}, kTq);  // sequence 0: every key is padding
  Tensor weights;
  Tensor output = mha->forward(x, x, {.attn_mask = mask, .weights = &weights});
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
        mha.forward(x, x, {.attn_mask = full({4, 4}, 1, kBool)});
      },
      "MultiHeadAttention: attn_mask of shape [4, 4] does not broadcast to the scores' shape [2, 3, 5, 5] = "
      "[B, H, Tq, Tk]"));
  // The same check when key_value is another tensor, which takes the unpacked op.
  Tensor kv = ones({kB, kTq, kD});
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, kv, {.attn_mask = full({4, 4}, 1, kBool)});
      },
      "MultiHeadAttention: attn_mask of shape [4, 4] does not broadcast to the scores' shape [2, 3, 5, 5]"));
  // With a cache, Tk counts the cached keys: 5 cached + 5 new.
  nn::KVCache cache{ones({kB, kTq, kH, kD / kH}), ones({kB, kTq, kH, kD / kH})};
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, x, {.attn_mask = full({5, 5}, 1, kBool), .cache = &cache});
      },
      "MultiHeadAttention: attn_mask of shape [5, 5] does not broadcast to the scores' shape [2, 3, 5, 10]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, x, {.attn_mask = ones({5, 5})});
      },
      "MultiHeadAttention: attn_mask must be bool (true = may attend), got float32 with shape [5, 5]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(ones({kB, kTq, 8}), x);
      },
      "MultiHeadAttention: query and key_value must be [B, T, 12], got shapes [2, 5, 8] and [2, 5, 12]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, ones({3, kTq, kD}));
      },
      "MultiHeadAttention: batch sizes differ: query [2, 5, 12], key_value [3, 5, 12]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { mha.forward(x, Tensor()); }, "MultiHeadAttention: query and key_value must both be defined tensors"));
}

TEST(MultiHeadAttention, ReturnsTheOutputAndTheWeightsOnlyWhenAsked) {
  Generator gen(8);
  auto mha = make_mha(gen);
  Tensor x = randn({kB, kTq, kD}, gen, kFloat64);
  Tensor weights;
  Tensor with = mha->forward(x, x, {.causal = true, .weights = &weights});
  Tensor without = mha->forward(x, x, {.causal = true});
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
  auto call = [&] { mha.forward(x, memory, {.attn_mask = padding}); };
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      call,
      "MultiHeadAttention: attn_mask of shape [2, 7] does not broadcast to the scores' shape [2, 3, 5, 7] = "
      "[B, H, Tq, Tk]; expected [Tq, Tk] = [5, 7] (one pattern for the batch), [B, 1, 1, Tk] = [2, 1, 1, 7] (key "
      "padding) or [B, 1, Tq, Tk] = [2, 1, 5, 7]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      call, "build it with ag::key_padding_mask(lengths, 7), or reshape yours with mask.reshape({2, 1, 1, 7})"));
  // Any other misfit names key_padding_mask too.
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        mha.forward(x, memory, {.attn_mask = ones({3, 7}, kBool)});
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
  Tensor reshaped = mha.forward(x, memory, {.attn_mask = padding.reshape({kB, 1, 1, kTk})});
  EXPECT_TRUE(all_close(reshaped, mha.forward(x, memory, {.attn_mask = key_padding_mask({4, 7}, kTk)}), 0));
  EXPECT_FALSE(all_close(reshaped, mha.forward(x, memory), 1e-6));  // the mask does something
}

}  // namespace
}  // namespace ag
