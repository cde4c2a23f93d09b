// Checks nn/recurrent.cpp: each cell against its equations computed by hand with <cmath>, float64
// gradcheck of the cells and of whole unrolled sequences (padding by lengths included), the
// lengths' meaning, PyTorch's parameter names and initialisation, and the refusals.
#include <cmath>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::gradcheck_module;
using test::normal_leaf;
using test::throws_with;

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

void set(Tensor& t, std::vector<double> values) { t.set_data(tensor(values, t.shape(), kFloat64)); }

TEST(Recurrent, OneUnitCellsMatchTheirEquationsByHand) {
  const double x = 0.7, h = -0.4, c = 0.9;
  Tensor xs = tensor({x}, {1, 1}, kFloat64), hs = tensor({h}, {1, 1}, kFloat64), cs = tensor({c}, {1, 1}, kFloat64);

  nn::RNNCell rnn(1, 1);
  rnn.to(kFloat64);
  set(rnn.weight_ih, {0.5});
  set(rnn.weight_hh, {-1.2});
  set(rnn.bias_ih, {0.1});
  set(rnn.bias_hh, {0.3});
  EXPECT_NEAR(rnn.forward(xs, hs).item(), std::tanh(0.5 * x + 0.1 - 1.2 * h + 0.3), 1e-15);

  // GRU rows r, z, n.
  nn::GRUCell gru(1, 1);
  gru.to(kFloat64);
  set(gru.weight_ih, {0.5, -0.3, 0.8});
  set(gru.weight_hh, {0.2, 0.7, -0.6});
  set(gru.bias_ih, {0.1, -0.2, 0.05});
  set(gru.bias_hh, {-0.1, 0.4, 0.25});
  double r = sigmoid(0.5 * x + 0.1 + 0.2 * h - 0.1), z = sigmoid(-0.3 * x - 0.2 + 0.7 * h + 0.4);
  double n = std::tanh(0.8 * x + 0.05 + r * (-0.6 * h + 0.25));
  EXPECT_NEAR(gru.forward(xs, hs).item(), (1 - z) * n + z * h, 1e-15);

  // LSTM rows i, f, g, o.
  nn::LSTMCell lstm(1, 1);
  lstm.to(kFloat64);
  set(lstm.weight_ih, {0.5, -0.3, 0.8, 0.1});
  set(lstm.weight_hh, {0.2, 0.7, -0.6, 0.9});
  set(lstm.bias_ih, {0.1, -0.2, 0.05, 0.3});
  set(lstm.bias_hh, {-0.1, 0.4, 0.25, -0.5});
  double i = sigmoid(0.5 * x + 0.1 + 0.2 * h - 0.1), f = sigmoid(-0.3 * x - 0.2 + 0.7 * h + 0.4);
  double g = std::tanh(0.8 * x + 0.05 - 0.6 * h + 0.25), o = sigmoid(0.1 * x + 0.3 + 0.9 * h - 0.5);
  double c2 = f * c + i * g;
  nn::LSTMState next = lstm.forward(xs, {hs, cs});
  EXPECT_NEAR(next.c.item(), c2, 1e-15);
  EXPECT_NEAR(next.h.item(), o * std::tanh(c2), 1e-15);
}

TEST(Recurrent, CellsGradcheckWithAndWithoutBias) {
  Generator gen(3);
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    Tensor x = normal_leaf({3, 5}, gen), h = normal_leaf({3, 4}, gen), c = normal_leaf({3, 4}, gen);
    nn::RNNCell rnn(5, 4, bias, gen);
    nn::GRUCell gru(5, 4, bias, gen);
    nn::LSTMCell lstm(5, 4, bias, gen);
    for (nn::Module* m : std::initializer_list<nn::Module*>{&rnn, &gru, &lstm}) m->to(kFloat64);
    EXPECT_TRUE(gradcheck_module(rnn, {x, h}, [&] { return rnn.forward(x, h); }));
    EXPECT_TRUE(gradcheck_module(gru, {x, h}, [&] { return gru.forward(x, h); }));
    EXPECT_TRUE(gradcheck_module(lstm, {x, h, c}, [&] {
      nn::LSTMState s = lstm.forward(x, {h, c});
      return cat({s.h, s.c}, 1);
    }));
    // No state given: zeros.
    EXPECT_TRUE(all_close(gru.forward(x, Tensor()), gru.forward(x, zeros({3, 4}, kFloat64)), 0.0));
  }
}

// Every output of a sequence module, flattened into one tensor for gradcheck.
Tensor flat(const nn::RecurrentOutput& out) {
  std::vector<Tensor> parts{out.states.reshape({-1}), out.last.reshape({-1})};
  if (out.last_cell.defined()) parts.push_back(out.last_cell.reshape({-1}));
  return cat(parts, 0);
}

TEST(Recurrent, UnrolledSequencesGradcheckWithPadding) {
  Generator gen(4);
  Tensor lengths = from_vector<std::int64_t>({6, 2, 4}, {3});
  for (bool bias : {true, false})
    for (bool padded : {false, true}) {
      SCOPED_TRACE(fmt::format("bias {} padded {}", bias, padded));
      Tensor x = normal_leaf({3, 6, 5}, gen), h0 = normal_leaf({3, 4}, gen), c0 = normal_leaf({3, 4}, gen);
      Tensor len = padded ? lengths : Tensor();
      nn::RNN rnn(5, 4, bias, gen);
      nn::GRU gru(5, 4, bias, gen);
      nn::LSTM lstm(5, 4, bias, gen);
      for (nn::Module* m : std::initializer_list<nn::Module*>{&rnn, &gru, &lstm}) m->to(kFloat64);
      EXPECT_TRUE(gradcheck_module(rnn, {x, h0}, [&] { return flat(rnn.forward(x, h0, len)); }));
      EXPECT_TRUE(gradcheck_module(gru, {x, h0}, [&] { return flat(gru.forward(x, h0, len)); }));
      EXPECT_TRUE(gradcheck_module(lstm, {x, h0, c0}, [&] { return flat(lstm.forward(x, {h0, c0}, len)); }));
    }
}

// A sequence of length L in a padded batch gives what it gives alone, cut to its L steps: the
// same states for its first L steps, zeros after, and the state at step L - 1 as its last.
TEST(Recurrent, LengthsStopEachSequenceWhereItEnds) {
  Generator gen(5);
  std::vector<std::int64_t> len{6, 2, 0, 4};
  nn::GRU gru(5, 4, true, gen);
  nn::LSTM lstm(5, 4, true, gen);
  gru.to(kFloat64);
  lstm.to(kFloat64);
  Tensor x = randn({4, 6, 5}, gen, kFloat64), h0 = randn({4, 4}, gen, kFloat64), c0 = randn({4, 4}, gen, kFloat64);
  nn::RecurrentOutput g = gru.forward(x, h0, from_vector<std::int64_t>(len, {4}));
  nn::RecurrentOutput l = lstm.forward(x, {h0, c0}, from_vector<std::int64_t>(len, {4}));
  for (std::int64_t b = 0; b < 4; ++b) {
    SCOPED_TRACE(fmt::format("sequence {}", b));
    std::int64_t n = len[static_cast<std::size_t>(b)];
    Tensor xb = x.slice(0, b, b + 1).slice(1, 0, n), hb = h0.slice(0, b, b + 1), cb = c0.slice(0, b, b + 1);
    nn::RecurrentOutput ga = gru.forward(xb, hb), la = lstm.forward(xb, {hb, cb});
    EXPECT_TRUE(all_close(g.states.slice(0, b, b + 1).slice(1, 0, n), ga.states, 1e-14));
    EXPECT_TRUE(all_close(g.last.slice(0, b, b + 1), ga.last, 1e-14));
    EXPECT_TRUE(all_close(l.last.slice(0, b, b + 1), la.last, 1e-14));
    EXPECT_TRUE(all_close(l.last_cell.slice(0, b, b + 1), la.last_cell, 1e-14));
    Tensor after = g.states.slice(0, b, b + 1).slice(1, n, 6);
    EXPECT_EQ((after * after).sum().item(), 0.0);
  }
  // Length 0: the last state is the initial one.
  EXPECT_TRUE(all_close(g.last.slice(0, 2, 3), h0.slice(0, 2, 3), 0.0));
}

// A sequence module is its cell applied step by step (the same weights, named with _l0).
TEST(Recurrent, SequenceIsItsCellStepByStep) {
  Generator gen(6);
  nn::GRU gru(3, 2, true, gen);
  nn::GRUCell cell(3, 2, true, gen);
  gru.to(kFloat64);
  cell.to(kFloat64);
  for (auto [name, p] : gru.named_parameters()) {
    std::string cell_name = name.substr(0, name.size() - 3);  // without _l0
    bool found = false;
    for (auto [cn, cp] : cell.named_parameters())
      if (cn == cell_name) {
        Tensor(cp).set_data(p.detach().clone());
        found = true;
      }
    EXPECT_TRUE(found) << name;
  }
  Tensor x = randn({2, 5, 3}, gen, kFloat64), h = randn({2, 2}, gen, kFloat64);
  nn::RecurrentOutput out = gru.forward(x, h);
  for (std::int64_t t = 0; t < 5; ++t) {
    h = cell.forward(x.slice(1, t, t + 1).reshape({2, 3}), h);
    EXPECT_TRUE(all_close(out.states.slice(1, t, t + 1).reshape({2, 2}), h, 1e-14)) << "step " << t;
  }
  EXPECT_TRUE(all_close(out.last, h, 1e-14));
}

TEST(Recurrent, PyTorchNamesShapesAndInitialisation) {
  Generator gen(7);
  nn::LSTM lstm(6, 32, true, gen);
  std::vector<std::string> names;
  for (auto [name, p] : lstm.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}));
  EXPECT_EQ(lstm.weight_ih.shape(), (Shape{128, 6}));
  EXPECT_EQ(lstm.weight_hh.shape(), (Shape{128, 32}));
  EXPECT_EQ(nn::GRUCell(6, 32).weight_ih.shape(), (Shape{96, 6}));
  EXPECT_EQ(nn::RNNCell(6, 32, false).named_parameters().size(), 2u);
  double bound = 1 / std::sqrt(32.0), largest = 0;
  for (float w : lstm.weight_hh.to_vector<float>()) largest = std::max(largest, std::abs(static_cast<double>(w)));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.95 * bound);  // 4096 draws fill the range
}

TEST(Recurrent, BadInputIsRefusedNamingTheModule) {
  nn::GRU gru(5, 4);
  Tensor x = randn({3, 6, 5});
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gru.forward(randn({3, 6, 7})); }, "GRU: input must be"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gru.forward(randn({3, 5})); }, "got [3, 5]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gru.forward(x.to(kFloat64)); }, "input is float64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gru.forward(x, randn({3, 5})); }, "the initial state h0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { gru.forward(x, Tensor(), from_vector<std::int64_t>({6, 7, 1}, {3})); }, "lengths[1] = 7 is outside"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { gru.forward(x, Tensor(), from_vector<std::int64_t>({6, -1, 1}, {3})); }, "lengths[1] = -1"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { gru.forward(x, Tensor(), randn({3})); }, "lengths must be int64 [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { nn::LSTMCell(0, 4); }, "LSTMCell: sizes must be positive"));
  nn::LSTMCell cell(5, 4);
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { cell.forward(randn({2, 5}), {randn({2, 4}), randn({3, 4})}); }, "c must"));
  // T = 0: no states, and the initial state is the last.
  Tensor h0 = randn({3, 4});
  nn::RecurrentOutput empty = gru.forward(randn({3, 0, 5}), h0);
  EXPECT_EQ(empty.states.shape(), (Shape{3, 0, 4}));
  EXPECT_TRUE(all_close(empty.last, h0, 0.0));
}

}  // namespace
}  // namespace ag
