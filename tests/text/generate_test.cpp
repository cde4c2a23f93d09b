// Checks text/generate.cpp and the KV cache: cached and uncached logits agree, sampling follows
// temperature and top-k, and the same seed gives the same text.
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;

nn::GPTConfig config() { return {.vocab_size = 9, .block_size = 10, .n_layer = 2, .n_head = 3, .n_embd = 12}; }

TEST(KVCache, CachedLogitsMatchTheFullForwardPass) {
  Generator gen(1);
  nn::GPT model(config(), gen);
  model.to(kFloat64);
  Tensor ids = from_vector<std::int64_t>({3, 1, 4, 1, 5, 8, 2, 6, 5, 3}, {1, 10});
  Tensor full = model.forward(ids);  // [1, 10, 9]
  // Feed a prompt of 4 tokens, then one token at a time, through the cache.
  std::vector<nn::KVCache> cache;
  Tensor first = model.forward(ids.slice(1, 0, 4), &cache);
  EXPECT_TRUE(all_close(first, full.slice(1, 0, 4), 1e-12));
  for (std::int64_t t = 4; t < 10; ++t) {
    Tensor step = model.forward(ids.slice(1, t, t + 1), &cache);
    EXPECT_TRUE(all_close(step, full.slice(1, t, t + 1), 1e-12)) << "position " << t;
  }
  EXPECT_EQ(cache[0].length(), 10);
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { model.forward(ids.slice(1, 0, 1), &cache); },
      "GPT: sequence length 11 (ids shape [1, 1], after 10 cached tokens) is longer than block_size 10"));
}

TEST(Generate, CachedAndUncachedSamplingAgree) {
  Generator gen(2);
  nn::GPT model(config(), gen);
  nn::SamplingOptions with{.max_new_tokens = 15, .temperature = 0.8, .top_k = 5, .use_cache = true};
  nn::SamplingOptions without = with;
  without.use_cache = false;
  Generator s1(9), s2(9);
  // 3 + 15 tokens outgrow block_size 10, so the windowed path is exercised too.
  auto a = nn::generate(model, {1, 2, 3}, with, s1);
  auto b = nn::generate(model, {1, 2, 3}, without, s2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 18u);
  EXPECT_TRUE(model.is_training());  // the mode is given back
}

TEST(SampleToken, TemperatureAndTopK) {
  Tensor logits = tensor({1.0, 3.0, 2.0, -1.0}, {4}, kFloat64);
  Generator gen(3);
  EXPECT_EQ(nn::sample_token(logits, 0.0, 0, gen), 1);  // temperature 0: the most likely token
  // top_k = 2 keeps tokens 1 and 2 only; with temperature 1 their odds are e^3 : e^2.
  int counts[4] = {0, 0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[nn::sample_token(logits, 1.0, 2, gen)];
  EXPECT_EQ(counts[0] + counts[3], 0);
  double p1 = std::exp(3.0) / (std::exp(3.0) + std::exp(2.0));  // 0.731
  EXPECT_NEAR(counts[1] / static_cast<double>(n), p1, 5 * std::sqrt(p1 * (1 - p1) / n));
  // A high temperature flattens the distribution: token 3 now shows up.
  int low = 0;
  for (int i = 0; i < 2000; ++i) low += nn::sample_token(logits, 100.0, 0, gen) == 3;
  EXPECT_GT(low, 300);  // ~ a quarter of 2000
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { nn::sample_token(logits, -1, 0, gen); }, "temperature must be >= 0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        nn::sample_token(ones({2, 2}), 1, 0, gen);
      },
      "expects one row of logits [V]"));
}

// Infinite temperature flattens the top k completely: each of the k is drawn with probability
// 1/k and nothing else is drawn (inf / inf once made every weight NaN, and the argmax came back
// every time). With a fixed seed the counts are fixed too; the bound is five standard deviations
// of the binomial count, n p (1 - p) under p = 1/k.
TEST(SampleToken, InfiniteTemperatureIsUniformOverTheTopK) {
  Tensor logits = tensor({0.5, 4.0, -2.0, 3.0, 1.0, 2.5, -1.0, 3.5, 0.0, 2.0}, {10}, kFloat64);
  const std::vector<std::int64_t> top5 = {1, 7, 3, 5, 9};  // 4.0, 3.5, 3.0, 2.5, 2.0
  Generator gen(11);
  const int n = 10000, k = 5;
  std::vector<int> counts(10, 0);
  for (int i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(nn::sample_token(logits, INFINITY, k, gen))];
  const double p = 1.0 / k, bound = 5 * std::sqrt(n * p * (1 - p));
  int in_top = 0;
  for (std::int64_t t : top5) {
    EXPECT_NEAR(counts[static_cast<std::size_t>(t)], n * p, bound) << "token " << t;
    in_top += counts[static_cast<std::size_t>(t)];
  }
  EXPECT_EQ(in_top, n) << "a token outside the top 5 was drawn";
  // top_k = 0 (or >= V): uniform over all ten.
  std::vector<int> all(10, 0);
  for (int i = 0; i < n; ++i) ++all[static_cast<std::size_t>(nn::sample_token(logits, INFINITY, 0, gen))];
  for (int t = 0; t < 10; ++t) EXPECT_NEAR(all[static_cast<std::size_t>(t)], n / 10.0, 5 * std::sqrt(n * 0.1 * 0.9));
  // Temperature 0 is the argmax whatever top_k says.
  for (std::int64_t top_k : {0, 1, 5, 20}) EXPECT_EQ(nn::sample_token(logits, 0.0, top_k, gen), 1);
}

TEST(SampleToken, InfinitiesAndNaN) {
  Generator gen(12);
  // -inf logits (masked tokens) are never drawn, even at infinite temperature.
  Tensor masked = tensor({-INFINITY, 1.0, -INFINITY, 0.0}, {4}, kFloat64);
  for (double t : {0.5, 1.0, 1e6, static_cast<double>(INFINITY)})
    for (int i = 0; i < 200; ++i) {
      std::int64_t id = nn::sample_token(masked, t, 0, gen);
      ASSERT_TRUE(id == 1 || id == 3) << "temperature " << t << " drew " << id;
    }
  // A +inf logit takes all the weight, shared equally with any other +inf.
  Tensor two_inf = tensor({INFINITY, 5.0, INFINITY}, {3}, kFloat64);
  int first = 0;
  for (int i = 0; i < 2000; ++i) {
    std::int64_t id = nn::sample_token(two_inf, 1.0, 0, gen);
    ASSERT_NE(id, 1);
    first += id == 0;
  }
  EXPECT_NEAR(first, 1000, 5 * std::sqrt(2000 * 0.25));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        nn::sample_token(tensor({1.0, NAN}, {2}, kFloat64), 1.0, 0, gen);
      },
      "logit 1 of 2 is NaN"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        nn::sample_token(tensor({-INFINITY, -INFINITY}, {2}, kFloat64), 1.0, 0, gen);
      },
      "every one of the 2 logits is -inf"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { nn::sample_token(masked, NAN, 0, gen); }, "temperature must be >= 0"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { nn::sample_token(masked, 1.0, -1, gen); }, "top_k must be >= 0"));
}

// generate refuses bad sampling options before it runs the model, not at the first token.
TEST(Generate, RefusesBadSamplingOptionsUpFront) {
  nn::GPT model(config());
  Generator gen(13);
  nn::SamplingOptions nan_temperature{.max_new_tokens = 5, .temperature = NAN};
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { nn::generate(model, {0}, nan_temperature, gen); },
                                                 "generate: temperature must be >= 0"));
  nn::SamplingOptions negative_k{.max_new_tokens = 5, .top_k = -3};
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { nn::generate(model, {0}, negative_k, gen); },
                                                 "generate: top_k must be >= 0, got -3 (0: every token)"));
  // Infinite temperature runs, and draws only tokens of the vocabulary.
  nn::SamplingOptions flat{.max_new_tokens = 30, .temperature = INFINITY, .top_k = 3};
  for (std::int64_t id : nn::generate(model, {0}, flat, gen)) EXPECT_TRUE(id >= 0 && id < 9);
}

// generate runs the model in eval mode and hands it back in the mode it found, also when the
// model throws partway: here a prompt token past the vocabulary of 9, which the embedding
// refuses at the first forward pass.
TEST(Generate, LeavesTheModelInItsModeEvenWhenItThrows) {
  nn::GPT model(config());
  Generator gen(14);
  nn::SamplingOptions o{.max_new_tokens = 3};
  for (bool training : {true, false}) {
    model.train(training);
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { nn::generate(model, {0, 100}, o, gen); }, "100"));
    EXPECT_EQ(model.is_training(), training);
    nn::generate(model, {0}, o, gen);
    EXPECT_EQ(model.is_training(), training);
  }
}

TEST(Generate, SameSeedSameText) {
  nn::GPT model(config());
  Generator a(5), b(5), c(6);
  nn::SamplingOptions o{.max_new_tokens = 20};
  EXPECT_EQ(nn::generate(model, {0}, o, a), nn::generate(model, {0}, o, b));
  EXPECT_NE(nn::generate(model, {0}, o, a), nn::generate(model, {0}, o, c));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { nn::generate(model, {}, o, a); },
                                                 "generate: the prompt must hold at least one token"));
}

}  // namespace
}  // namespace ag
