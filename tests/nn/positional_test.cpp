// Checks nn/positional.cpp: the sinusoidal table, learned positions, and RoPE's relative-
// position property.
#include <cmath>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::gradcheck_module;
using test::normal_leaf;
using test::throws_with;

TEST(Sinusoidal, TableValues) {
  nn::SinusoidalPositionalEncoding pe(10, 6);
  // Position 0: sin 0 = 0 on even channels, cos 0 = 1 on odd ones.
  EXPECT_TRUE(all_close(pe.table.slice(0, 0, 1), {0, 1, 0, 1, 0, 1}, 0));
  // Position 3, channel pair i uses frequency 10000^(-2i/6).
  std::vector<double> row3;
  for (int c = 0; c < 6; ++c) {
    double angle = 3.0 / std::pow(10000.0, (c - c % 2) / 6.0);
    row3.push_back(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
  }
  EXPECT_TRUE(all_close(pe.table.slice(0, 3, 4), row3, 1e-15));
  Tensor x = zeros({2, 4, 6});
  EXPECT_TRUE(all_close(pe.forward(x).slice(0, 1, 2).squeeze(0), pe.table.slice(0, 0, 4).to(kFloat32), 0));
  EXPECT_TRUE(pe.parameters().empty());  // fixed, not trained
}

TEST(Sinusoidal, GradcheckAndFloat32) {
  Generator gen(4);
  nn::SinusoidalPositionalEncoding pe(8, 4);
  Tensor x = normal_leaf({2, 3, 4}, gen);
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return pe.forward(in[0], 1); }, {x}));
  EXPECT_EQ(pe.forward(ones({1, 2, 4})).dtype(), kFloat32);  // the table follows the input's dtype
}

TEST(Learned, GradcheckAndOffset) {
  Generator gen(1);
  nn::LearnedPositionalEmbedding pos(8, 4, gen);
  pos.to(kFloat64);
  Tensor x = normal_leaf({2, 3, 4}, gen);
  EXPECT_TRUE(gradcheck_module(pos, {x}, [&] { return pos.forward(x, 2); }));
  Tensor y = pos.forward(zeros({1, 3, 4}, kFloat64), 5);
  EXPECT_TRUE(all_close(y.squeeze(0), pos.table->weight.slice(0, 5, 8), 0));
}

TEST(Rotary, DotProductDependsOnlyOnRelativePosition) {
  // <R(t) q, R(s) k> = <R(t + c) q, R(s + c) k>: rotate a query at t and a key at s, then both
  // shifted by c; the scores agree.
  Generator gen(2);
  nn::RotaryEmbedding rope(8, 32);
  rope.to(kFloat64);
  Tensor q = randn({1, 1, 1, 8}, gen, kFloat64), k = randn({1, 1, 1, 8}, gen, kFloat64);
  auto score = [&](std::int64_t t, std::int64_t s) { return (rope.forward(q, t) * rope.forward(k, s)).sum().item(); };
  EXPECT_NEAR(score(3, 1), score(13, 11), 1e-12);
  EXPECT_NEAR(score(0, 5), score(20, 25), 1e-12);
  EXPECT_GT(std::abs(score(3, 1) - score(3, 2)), 1e-6);  // but it does depend on t - s
  // A rotation keeps lengths.
  EXPECT_NEAR((rope.forward(q, 7) * rope.forward(q, 7)).sum().item(), (q * q).sum().item(), 1e-12);
}

TEST(Rotary, Gradcheck) {
  Generator gen(3);
  nn::RotaryEmbedding rope(4, 16);
  rope.to(kFloat64);
  Tensor x = normal_leaf({2, 3, 5, 4}, gen);
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return rope.forward(in[0], 3); }, {x}));
}

TEST(Positional, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        nn::SinusoidalPositionalEncoding(4, 6).forward(zeros({1, 5, 6}));
      },
      "SinusoidalPositionalEncoding: positions 0 to 4 (input shape [1, 5, 6]) run past the table's 4 positions"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        nn::LearnedPositionalEmbedding(4, 6).forward(zeros({1, 3, 6}), 2);
      },
      "LearnedPositionalEmbedding: positions 2 to 4 (input shape [1, 3, 6]) run past the table's 4 positions"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::RotaryEmbedding(5, 8); },
                                                 "RotaryEmbedding: head_dim must be positive and even"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        nn::RotaryEmbedding(4, 8).forward(zeros({1, 1, 9, 4}));
      },
      "RotaryEmbedding: positions 0 to 8 (input shape [1, 1, 9, 4]) run past the table's 8 positions"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        nn::SinusoidalPositionalEncoding(4, 6).forward(zeros({1, 2, 5}));
      },
      "SinusoidalPositionalEncoding: expects [B, T, 6], got shape [1, 2, 5]"));
}

}  // namespace
}  // namespace ag
