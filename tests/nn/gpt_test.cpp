// Checks nn/gpt.cpp: nanoGPT's layout and initialisation, gradients, causality, errors.
#include <cmath>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::gradcheck_module;
using test::throws_with;

nn::GPTConfig tiny() { return {.vocab_size = 11, .block_size = 6, .n_layer = 2, .n_head = 3, .n_embd = 12}; }

TEST(GPT, ParameterCountMatchesTheFormula) {
  // Per block: 2 LayerNorms (2 * 2C), attention (3C^2 + 3C) + (C^2 + C), MLP (4C^2 + 4C) + (4C^2 + C);
  // plus wte V*C, wpe T*C and ln_f 2C. The head is wte itself: no extra parameters.
  nn::GPTConfig c = tiny();
  nn::GPT model(c);
  std::int64_t C = c.n_embd;
  std::int64_t per_block = 4 * C + 4 * (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
  EXPECT_EQ(model.parameter_count(), c.vocab_size * C + c.block_size * C + 2 * C + c.n_layer * per_block);
  auto named = model.named_parameters();
  EXPECT_EQ(named.front().first, "wte.weight");
  EXPECT_EQ(named[2].first, "blocks.0.ln_1.weight");
  EXPECT_EQ(named[4].first, "blocks.0.attn.qkv_proj.weight");  // q, k and v stacked: [3C, C]
  EXPECT_EQ(named[4].second.shape(), (Shape{3 * C, C}));
  EXPECT_EQ(named.back().first, "ln_f.bias");
}

TEST(GPT, InitialisationAndInitialLoss) {
  Generator gen(1);
  nn::GPTConfig c{.vocab_size = 65, .block_size = 32, .n_layer = 2, .n_head = 4, .n_embd = 64};
  nn::GPT model(c, gen);
  // wte ~ N(0, 0.02): its sample standard deviation over 4160 draws is within a few percent.
  Tensor w = model.wte->weight.to(kFloat64);
  double sd = std::sqrt((w * w).mean().item());
  EXPECT_NEAR(sd, 0.02, 0.002);
  EXPECT_TRUE(all_close(model.blocks->operator[](0).attn->qkv_proj->bias, std::vector<double>(3 * 64, 0.0), 0));
  // With tiny weights the logits are near 0, so the predicted distribution is near uniform and
  // the loss near ln(vocab).
  Tensor ids = from_vector<std::int64_t>(std::vector<std::int64_t>(64, 7), {2, 32});
  Tensor targets = arange(64).reshape({2, 32});
  EXPECT_NEAR(model.loss(ids, targets).item(), std::log(65.0), 0.05);
}

TEST(GPT, GradcheckEveryParameter) {
  Generator gen(2);
  nn::GPT model(tiny(), gen);
  model.to(kFloat64);
  Tensor ids = from_vector<std::int64_t>({1, 5, 10, 0, 3, 3, 2, 8, 8}, {3, 3});
  Tensor targets = from_vector<std::int64_t>({5, 10, 0, 3, 3, 2, 8, 8, 1}, {3, 3});
  EXPECT_TRUE(gradcheck_module(model, {}, [&] { return model.forward(ids); }));
  EXPECT_TRUE(gradcheck_module(model, {}, [&] { return model.loss(ids, targets); }));
  // Without biases (nanoGPT's bias = False): LayerNorms and Linears lose theirs.
  nn::GPTConfig no_bias = tiny();
  no_bias.bias = false;
  nn::GPT plain(no_bias, gen);
  plain.to(kFloat64);
  for (const auto& [name, _] : plain.named_parameters()) EXPECT_FALSE(name.ends_with(".bias")) << name;
  EXPECT_TRUE(gradcheck_module(plain, {}, [&] { return plain.loss(ids, targets); }));
}

TEST(GPT, TiedHeadGetsGradientFromBothEnds) {
  // wte is both the input embedding and the output head, so a token that never appears in the
  // input still gets gradient through the head.
  nn::GPT model(tiny());
  Tensor ids = from_vector<std::int64_t>({1, 2, 3}, {1, 3});
  model.loss(ids, from_vector<std::int64_t>({2, 3, 4}, {1, 3})).backward();
  Tensor g = model.wte->weight.grad();
  EXPECT_GT((g.slice(0, 9, 10) * g.slice(0, 9, 10)).sum().item(), 0.0);
}

TEST(GPT, PredictionsDoNotSeeTheFuture) {
  Generator gen(3);
  nn::GPT model(tiny(), gen);
  model.to(kFloat64);
  Tensor a = model.forward(from_vector<std::int64_t>({1, 2, 3, 4, 5, 6}, {1, 6}));
  Tensor b = model.forward(from_vector<std::int64_t>({1, 2, 3, 9, 9, 9}, {1, 6}));
  EXPECT_TRUE(all_close(a.slice(1, 0, 3), b.slice(1, 0, 3), 1e-13));
  EXPECT_FALSE(all_close(a.slice(1, 3, 6), b.slice(1, 3, 6), 1e-6));
}

TEST(GPT, Errors) {
  nn::GPT model(tiny());
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        model.forward(arange(7).reshape({1, 7}));
      },
      "GPT: sequence length 7 (ids shape [1, 7], after 0 cached tokens) is longer than block_size 6"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        model.forward(from_vector<std::int64_t>({1, 11}, {1, 2}));
      },
      "embedding: id 11 at position 1 is outside the table's 11 rows"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { model.forward(arange(3)); }, "GPT: ids must be int64 [B, T], got [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::GPT({.n_head = 3, .n_embd = 16}); },
                                                 "MultiHeadAttention: d_model 16 is not divisible into 3 heads"));
}

}  // namespace
}  // namespace ag
