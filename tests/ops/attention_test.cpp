// Checks ops/fused/attention.cpp: the fused op against a hand computation, against the composed
// reference (values and gradients, float64), finite differences for every mask combination,
// the causal property, the [B, T, H, d] and packed-qkv layouts against the first, and the
// reference with another masked score.
#include <cmath>
#include <limits>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

TEST(Attention, HandComputedSingleQuery) {
  // d = 1, q = 2, keys 1 and 0, values 10 and 20. Scores (scale 1/sqrt(1)) are 2 and 0, so the
  // weights are e^2 / (e^2 + 1) and 1 / (e^2 + 1), and the output their average of 10 and 20.
  Tensor q = tensor({2}, {1, 1, 1, 1}, kFloat64);
  Tensor k = tensor({1, 0}, {1, 1, 2, 1}, kFloat64);
  Tensor v = tensor({10, 20}, {1, 1, 2, 1}, kFloat64);
  double w0 = std::exp(2.0) / (std::exp(2.0) + 1), w1 = 1 / (std::exp(2.0) + 1);
  AttentionResult r = scaled_dot_product_attention(q, k, v, {}, false, true);
  EXPECT_TRUE(all_close(r.weights, {w0, w1}, 1e-15));
  EXPECT_TRUE(all_close(r.output, {10 * w0 + 20 * w1}, 1e-13));
  EXPECT_NEAR(10 * w0 + 20 * w1, 11.19202922, 1e-8);
}

struct MaskCase {
  const char* name;
  Tensor mask;
  bool causal;
};

// Used with B = 2, H = 3, d = 4, dv = 6 and Tq != Tk: every size different, so a mixed-up dim
// shows.
std::vector<MaskCase> mask_cases(std::int64_t tq, std::int64_t tk) {
  // An irregular pattern with at least one allowed key per query (j = 0 when i % 4 != 0 ...).
  std::vector<bool> pattern;
  for (std::int64_t i = 0; i < tq; ++i)
    for (std::int64_t j = 0; j < tk; ++j) pattern.push_back((i * 3 + j * 5) % 4 != 0);
  Tensor arbitrary = from_vector(pattern, {tq, tk});
  return {
      {"no mask", Tensor(), false},
      {"causal", Tensor(), true},
      {"key padding", key_padding_mask({tk, 4}, tk), false},
      {"arbitrary [Tq, Tk]", arbitrary, false},
      {"key padding + causal", key_padding_mask({tk, tk - 2}, tk), true},
      {"a fully masked sequence", key_padding_mask({0, tk - 1}, tk), false},
  };
}

// For every mask case at these lengths: the fused op's output, weights and three gradients
// against the composed reference, in float64.
void expect_fused_matches_reference(std::int64_t tq, std::int64_t tk, std::int64_t h, std::int64_t dv, Generator& gen) {
  for (const MaskCase& c : mask_cases(tq, tk)) {
    SCOPED_TRACE(fmt::format("{} Tq={} Tk={}", c.name, tq, tk));
    Tensor q = normal_leaf({2, h, tq, 4}, gen), k = normal_leaf({2, h, tk, 4}, gen),
           v = normal_leaf({2, h, tk, dv}, gen);
    AttentionResult fused = scaled_dot_product_attention(q, k, v, c.mask, c.causal, true);
    AttentionResult ref = attention_reference(q, k, v, c.mask, c.causal);
    EXPECT_TRUE(all_close(fused.output, ref.output, 1e-12));
    EXPECT_TRUE(all_close(fused.weights, ref.weights, 1e-12));
    Tensor g = randn(fused.output.shape(), gen, kFloat64);
    fused.output.backward(g);
    std::vector<Tensor> fused_grads = {q.grad(), k.grad(), v.grad()};
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    ref.output.backward(g);
    EXPECT_TRUE(all_close(fused_grads[0], q.grad(), 1e-12));
    EXPECT_TRUE(all_close(fused_grads[1], k.grad(), 1e-12));
    EXPECT_TRUE(all_close(fused_grads[2], v.grad(), 1e-12));
  }
}

TEST(Attention, FusedMatchesComposedReference) {
  Generator gen(1);
  for (auto [tq, tk] : {std::pair<std::int64_t, std::int64_t>{5, 7}, {7, 7}, {7, 5}})
    expect_fused_matches_reference(tq, tk, 3, 6, gen);
}

// Long enough that the kernels work in several query blocks (64 rows each), with the causal
// limit falling inside a block, before the last key, and (Tq > Tk) leaving queries with no key.
TEST(Attention, SeveralQueryBlocksMatchComposedReference) {
  Generator gen(11);
  for (auto [tq, tk] : {std::pair<std::int64_t, std::int64_t>{70, 150}, {150, 150}, {150, 70}})
    expect_fused_matches_reference(tq, tk, 2, 3, gen);
}

TEST(Attention, GradcheckEveryMaskCombination) {
  Generator gen(2);
  for (const MaskCase& c : mask_cases(5, 7)) {
    SCOPED_TRACE(c.name);
    Tensor q = normal_leaf({2, 3, 5, 4}, gen), k = normal_leaf({2, 3, 7, 4}, gen), v = normal_leaf({2, 3, 7, 6}, gen);
    EXPECT_TRUE(testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.causal).output;
        },
        {q, k, v}));
    EXPECT_TRUE(testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return attention_reference(in[0], in[1], in[2], c.mask, c.causal).output;
        },
        {q, k, v}));
  }
}

// [B, T, H, d] inputs give the same outputs and gradients as their [B, H, T, d] transposes.
TEST(Attention, HeadsLastLayoutMatchesHeadsFirst) {
  Generator gen(6);
  for (const MaskCase& c : mask_cases(5, 7)) {
    SCOPED_TRACE(c.name);
    Tensor q = normal_leaf({2, 5, 3, 4}, gen), k = normal_leaf({2, 7, 3, 4}, gen), v = normal_leaf({2, 7, 3, 6}, gen);
    AttentionResult last = scaled_dot_product_attention_bthd(q, k, v, c.mask, c.causal, true);
    Tensor qf = q.detach().transpose(1, 2).requires_grad_(), kf = k.detach().transpose(1, 2).requires_grad_(),
           vf = v.detach().transpose(1, 2).requires_grad_();
    AttentionResult first = scaled_dot_product_attention(qf, kf, vf, c.mask, c.causal, true);
    EXPECT_TRUE(all_close(last.output, first.output.transpose(1, 2), 1e-14));
    EXPECT_TRUE(all_close(last.weights, first.weights, 1e-14));
    Tensor g = randn(last.output.shape(), gen, kFloat64);
    last.output.backward(g);
    first.output.backward(g.transpose(1, 2));
    EXPECT_TRUE(all_close(q.grad(), qf.grad().transpose(1, 2), 1e-13));
    EXPECT_TRUE(all_close(k.grad(), kf.grad().transpose(1, 2), 1e-13));
    EXPECT_TRUE(all_close(v.grad(), vf.grad().transpose(1, 2), 1e-13));
    EXPECT_TRUE(testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention_bthd(in[0], in[1], in[2], c.mask, c.causal).output;
        },
        {q, k, v}));
  }
}

// qkv [B, T, 3 * H * d] against the [B, T, H, d] op on its three thirds: output, weights and
// gradient, for every self-attention mask case (T = 7, with T = 70 for several query blocks),
// and finite differences at T = 7.
TEST(Attention, PackedMatchesTheThreeThirds) {
  Generator gen(12);
  const std::int64_t h = 3, d = 4, width = h * d;
  for (std::int64_t t : {7, 70})
    for (const MaskCase& c : mask_cases(t, t)) {
      SCOPED_TRACE(fmt::format("{} T={}", c.name, t));
      Tensor q = normal_leaf({2, t, h, d}, gen), k = normal_leaf({2, t, h, d}, gen), v = normal_leaf({2, t, h, d}, gen);
      Tensor qkv =
          cat({q.detach().reshape({2, t, width}), k.detach().reshape({2, t, width}), v.detach().reshape({2, t, width})},
              2)
              .requires_grad_();
      AttentionResult packed = scaled_dot_product_attention_packed(qkv, h, c.mask, c.causal, true);
      AttentionResult thirds = scaled_dot_product_attention_bthd(q, k, v, c.mask, c.causal, true);
      EXPECT_EQ(packed.output.shape(), (Shape{2, t, h, d}));
      EXPECT_TRUE(all_close(packed.output, thirds.output, 1e-14));
      EXPECT_TRUE(all_close(packed.weights, thirds.weights, 1e-14));
      Tensor g = randn(packed.output.shape(), gen, kFloat64);
      packed.output.backward(g);
      thirds.output.backward(g);
      Tensor expected =
          cat({q.grad().reshape({2, t, width}), k.grad().reshape({2, t, width}), v.grad().reshape({2, t, width})}, 2);
      EXPECT_TRUE(all_close(qkv.grad(), expected, 1e-13));
      if (t == 7) {
        EXPECT_TRUE(testing::gradcheck(
            [&](const std::vector<Tensor>& in) {
              return scaled_dot_product_attention_packed(in[0], h, c.mask, c.causal).output;
            },
            {qkv.detach().requires_grad_()}));
      }
    }
}

TEST(Attention, PackedErrors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        scaled_dot_product_attention_packed(ones({2, 5, 20}), 3);
      },
      "scaled_dot_product_attention_packed: qkv must be [B, T, 3 * heads * d] with heads >= 1, got shape [2, 5, 20] "
      "and 3 heads"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        scaled_dot_product_attention_packed(ones({5, 18}), 3);
      },
      "got shape [5, 18] and 3 heads"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        scaled_dot_product_attention_packed(ones({2, 5, 18}), 0);
      },
      "got shape [2, 5, 18] and 0 heads"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        scaled_dot_product_attention_packed(ones({2, 5, 18}), 3, full({4, 5}, 1, kBool));
      },
      "scaled_dot_product_attention_packed: attn_mask of shape [4, 5] does not broadcast to the scores' shape "
      "[2, 3, 5, 5]"));
}

TEST(Attention, FullyMaskedQueryGivesZeroNotNaN) {
  Generator gen(3);
  Tensor q = normal_leaf({2, 1, 3, 4}, gen), k = normal_leaf({2, 1, 5, 4}, gen), v = normal_leaf({2, 1, 5, 4}, gen);
  Tensor mask = key_padding_mask({0, 5}, 5);  // sequence 0 has no valid key at all
  AttentionResult r = scaled_dot_product_attention(q, k, v, mask, false, true);
  EXPECT_TRUE(all_close(r.output.slice(0, 0, 1), std::vector<double>(12, 0.0), 0));
  EXPECT_TRUE(all_close(r.weights.slice(0, 0, 1), std::vector<double>(15, 0.0), 0));
  r.output.sum().backward();
  for (const Tensor& g : {q.grad(), k.grad(), v.grad()})
    for (double x : g.to_vector<double>()) EXPECT_FALSE(std::isnan(x));
}

// attention_reference's masked_score: 0 instead of -inf (the mistake examples/experiments
// mask-fill trains with) leaves every masked key the weight exp(0 - m) / sum. Checked against
// softmax over the scores with the masked ones replaced by 0, and by finite differences.
TEST(Attention, ReferenceWithAnotherMaskedScore) {
  Generator gen(7);
  Tensor q = normal_leaf({2, 3, 5, 4}, gen), k = normal_leaf({2, 3, 7, 4}, gen), v = normal_leaf({2, 3, 7, 6}, gen);
  Tensor mask = key_padding_mask({7, 4}, 7);
  AttentionResult r = attention_reference(q, k, v, mask, true, {}, 0.0);
  Tensor hidden = logical_not(logical_and(mask, causal_mask(5, 7)));  // [2, 1, 5, 7]
  Tensor scores = q.matmul(k.transpose(-2, -1)) / 2.0;                // the default scale, 1 / sqrt(4)
  Tensor expected = softmax(masked_fill(scores, hidden, 0.0), -1);
  EXPECT_TRUE(all_close(r.weights, expected, 1e-14));
  EXPECT_TRUE(all_close(r.output, expected.matmul(v), 1e-13));
  EXPECT_GT((r.weights * hidden.to(kFloat64)).sum().item(), 0.1);  // the leak
  double minus_inf = -std::numeric_limits<double>::infinity();
  EXPECT_TRUE(all_close(attention_reference(q, k, v, mask, true, {}, minus_inf).output,
                        scaled_dot_product_attention(q, k, v, mask, true).output, 1e-12));  // the default
  EXPECT_TRUE(testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return attention_reference(in[0], in[1], in[2], mask, true, {}, 0.0).output;
      },
      {q, k, v}));
}

TEST(Attention, CausalOutputIgnoresTheFuture) {
  // Changing keys and values after position t leaves outputs 0..t unchanged.
  Generator gen(4);
  Tensor q = randn({1, 2, 6, 4}, gen, kFloat64), k = randn({1, 2, 6, 4}, gen, kFloat64),
         v = randn({1, 2, 6, 4}, gen, kFloat64);
  Tensor out = scaled_dot_product_attention(q, k, v, {}, true).output;
  const std::int64_t t = 3;
  Tensor k2 = cat({k.slice(2, 0, t + 1), randn({1, 2, 6 - t - 1, 4}, gen, kFloat64)}, 2);
  Tensor v2 = cat({v.slice(2, 0, t + 1), randn({1, 2, 6 - t - 1, 4}, gen, kFloat64)}, 2);
  Tensor out2 = scaled_dot_product_attention(q, k2, v2, {}, true).output;
  EXPECT_TRUE(all_close(out2.slice(2, 0, t + 1), out.slice(2, 0, t + 1), 0));
  EXPECT_FALSE(all_close(out2.slice(2, t + 1, 6), out.slice(2, t + 1, 6), 1e-3));
}

TEST(Attention, WeightsRowsSumToOneAndFloat32Agrees) {
  Generator gen(5);
  Tensor q = randn({2, 2, 4, 8}, gen, kFloat64), k = randn({2, 2, 6, 8}, gen, kFloat64),
         v = randn({2, 2, 6, 8}, gen, kFloat64);
  AttentionResult r = scaled_dot_product_attention(q, k, v, {}, false, true);
  EXPECT_TRUE(all_close(r.weights.sum(-1), std::vector<double>(16, 1.0), 1e-14));
  AttentionResult r32 = scaled_dot_product_attention(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32));
  EXPECT_TRUE(all_close(r32.output, r.output, 1e-5));
  EXPECT_FALSE(r32.weights.defined());  // not asked for
}

TEST(Attention, Errors) {
  Tensor q = ones({2, 3, 5, 4}), k = ones({2, 3, 7, 4}), v = ones({2, 3, 7, 4});
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        scaled_dot_product_attention(q, k, ones({2, 3, 6, 4}));
      },
      "scaled_dot_product_attention: key length 7 and value length 6 differ"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        scaled_dot_product_attention(q, ones({2, 3, 7, 3}), v);
      },
      "scaled_dot_product_attention: query and key dims differ: q [2, 3, 5, 4] and k [2, 3, 7, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        scaled_dot_product_attention(ones({5, 4}), k, v);
      },
      "scaled_dot_product_attention: q, k and v must be [B, H, T, d]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        scaled_dot_product_attention(q, k, v, full({5, 6}, 1, kBool));
      },
      "scaled_dot_product_attention: attn_mask of shape [5, 6] does not broadcast to the scores' shape [2, 3, 5, 7]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        scaled_dot_product_attention(q, k, v, ones({5, 7}));
      },
      "scaled_dot_product_attention: attn_mask must be bool"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        scaled_dot_product_attention(q, ones({1, 3, 7, 4}), v);
      },
      "scaled_dot_product_attention: q, k and v must agree in batch and heads"));
}

}  // namespace
}  // namespace ag
