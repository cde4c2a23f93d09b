// Checks the ops of ops/nn_ops.h (in ops/fused/): linear, linear_gelu, embedding, layer_norm, dropout,
// cross_entropy.
#include <array>
#include <cmath>
#include <limits>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

// op(x, w, b) run in float64 and in float32 from the same float64 values, then backward with the
// same upstream gradient: index 0 holds float64's output and {dx, dw, db}, index 1 float32's.
struct BothDtypes {
  Tensor out[2];
  std::vector<Tensor> grads[2];
};
template <class Op>
BothDtypes run_in_both_dtypes(Op op, const Tensor& x64, const Tensor& w64, const Tensor& b64, const Tensor& dy64) {
  BothDtypes r;
  for (int k = 0; k < 2; ++k) {
    DType dtype = k == 0 ? kFloat64 : kFloat32;
    Tensor x = x64.to(dtype).requires_grad_(), w = w64.to(dtype).requires_grad_(), b = b64.to(dtype).requires_grad_();
    r.out[k] = op(x, w, b);
    (r.out[k] * dy64.to(dtype)).sum().backward();
    r.grads[k] = {x.grad(), w.grad(), b.grad()};
  }
  return r;
}

TEST(Linear, EqualsMatmulWithTransposePlusBias) {
  Generator gen(1);
  Tensor x = randn({2, 3, 5}, gen, kFloat64), w = randn({4, 5}, gen, kFloat64), b = randn({4}, gen, kFloat64);
  EXPECT_TRUE(all_close(linear(x, w, b), x.matmul(w.transpose(0, 1)) + b, 1e-12));
  EXPECT_TRUE(all_close(linear(x, w), x.matmul(w.transpose(0, 1)), 1e-12));
  // y = [1 2] [[1 0] [2 1] [0 3]]^T + [1 1 1] = [1+1, 2+2+1, 6+1]
  EXPECT_TRUE(all_close(linear(tensor({1, 2}, {1, 2}), tensor({1, 0, 2, 1, 0, 3}, {3, 2}), ones({3})), {2, 5, 7}, 0));
}

TEST(Linear, GradcheckWithAndWithoutBias) {
  Generator gen(2);
  Tensor x = normal_leaf({2, 3, 5}, gen), w = normal_leaf({4, 5}, gen), b = normal_leaf({4}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w}));
  Tensor x2 = normal_leaf({7, 5}, gen);
  EXPECT_TRUE(
      testing::gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x2, w, b}));
}

TEST(Linear, EmptyInputFeaturesGiveTheBias) {
  // in = 0: x W^T is an empty sum, so every row is b; db still sums dy over the rows.
  Tensor x = ones({5, 0}, kFloat64), w = ones({3, 0}, kFloat64).requires_grad_();
  Tensor b = tensor({1, 2, 3}, {3}, kFloat64).requires_grad_();
  Tensor y = linear(x, w, b);
  EXPECT_TRUE(all_close(y, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}, 0));
  y.sum().backward();
  EXPECT_TRUE(all_close(b.grad(), {5, 5, 5}, 0));
  EXPECT_TRUE(all_close(linear(x, w), std::vector<double>(15, 0.0), 0));
}

TEST(Linear, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        linear(ones({2, 3}), ones({4, 5}));
      },
      "linear: input of shape [2, 3] does not fit weight of shape [4, 5] (expected [..., 5])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        linear(ones({2, 5}), ones({4, 5}), ones({3}));
      },
      "linear: bias has shape [3], expected [4] for input of shape [2, 5]"));
}

// The float32 path (its bias gradient is compiled for AVX2 as well) against float64: odd sizes,
// and more rows than one thread's share, so the column sums run in chunks.
TEST(Linear, Float32ForwardAndBackwardMatchFloat64) {
  Generator gen(12);
  Tensor x64 = randn({3, 700, 23}, gen, kFloat64), w64 = randn({19, 23}, gen, kFloat64),
         b64 = randn({19}, gen, kFloat64), dy64 = randn({3, 700, 19}, gen, kFloat64);
  BothDtypes r = run_in_both_dtypes([](auto x, auto w, auto b) { return linear(x, w, b); }, x64, w64, b64, dy64);
  EXPECT_TRUE(all_close(r.out[1].to(kFloat64), r.out[0], 1e-4));
  // dW and db are sums over 2100 rows of terms of size about 1 (totals of about 50): float32's
  // rounding of such sums stays well under these bounds; a lost row would be off by about 1.
  double tol[3] = {1e-4, 2e-3, 1e-3};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(all_close(r.grads[1][i].to(kFloat64), r.grads[0][i], tol[i])) << "input " << i;
}

// linear's gradients against the same product written with matmul, transpose and add, on 1, 2
// and 3 threads. With more than one thread dW and db are summed by bands of rows, one band per
// thread, and the bands' parts added afterwards: a part left out or added twice shows here.
TEST(Linear, GradientsMatchTheComposedProductOnAnyThreadCount) {
  Generator gen(17);
  Tensor x64 = randn({3, 37, 41}, gen, kFloat64), w64 = randn({67, 41}, gen, kFloat64),
         b64 = randn({67}, gen, kFloat64), dy64 = randn({3, 37, 67}, gen, kFloat64);
  for (int threads : {1, 2, 3}) {
    test::ThreadCount tc(threads);
    Tensor grads[2][3];
    for (int composed = 0; composed < 2; ++composed) {
      Tensor x = x64.detach().requires_grad_(), w = w64.detach().requires_grad_(), b = b64.detach().requires_grad_();
      Tensor y = composed ? x.matmul(w.transpose(0, 1)) + b : linear(x, w, b);
      (y * dy64).sum().backward();
      grads[composed][0] = x.grad();
      grads[composed][1] = w.grad();
      grads[composed][2] = b.grad();
    }
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(all_close(grads[0][i], grads[1][i], 1e-11)) << threads << " threads, input " << i;
  }
}

// linear_gelu against the two ops it fuses, gelu(linear(x, w, b)): values and all three
// gradients, with and without bias, both GELU forms, on 1, 2 and 3 threads. [3, 37, 41] -> 67
// is 111 rows and 305k multiply-adds, enough to be split into bands of rows on 2 and 3 threads.
TEST(LinearGelu, EqualsGeluOfLinearOnAnyThreadCount) {
  Generator gen(13);
  Tensor x64 = randn({3, 37, 41}, gen, kFloat64), w64 = randn({67, 41}, gen, kFloat64),
         b64 = randn({67}, gen, kFloat64), dy64 = randn({3, 37, 67}, gen, kFloat64);
  for (int threads : {1, 2, 3}) {
    test::ThreadCount tc(threads);
    for (GeluApproximation form : {GeluApproximation::None, GeluApproximation::Tanh})
      for (bool with_bias : {true, false}) {
        Tensor outs[2], grads[2][3];
        for (int fused = 0; fused < 2; ++fused) {
          Tensor x = x64.detach().requires_grad_(), w = w64.detach().requires_grad_(),
                 b = with_bias ? b64.detach().requires_grad_() : Tensor();
          outs[fused] = fused ? linear_gelu(x, w, b, form) : gelu(linear(x, w, b), form);
          (outs[fused] * dy64).sum().backward();
          grads[fused][0] = x.grad();
          grads[fused][1] = w.grad();
          if (with_bias) grads[fused][2] = b.grad();
        }
        SCOPED_TRACE(fmt::format("{} threads, {} GELU, bias {}", threads,
                                 form == GeluApproximation::None ? "exact" : "tanh", with_bias));
        EXPECT_TRUE(all_close(outs[1], outs[0], 1e-12));
        for (int i = 0; i < (with_bias ? 3 : 2); ++i) EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 1e-11));
      }
  }
}

TEST(LinearGelu, GradcheckEveryInputBothForms) {
  Generator gen(14);
  Tensor x = normal_leaf({2, 3, 5}, gen), w = normal_leaf({4, 5}, gen), b = normal_leaf({4}, gen);
  for (GeluApproximation form : {GeluApproximation::None, GeluApproximation::Tanh}) {
    EXPECT_TRUE(testing::gradcheck(
        [form](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2], form); }, {x, w, b}));
    EXPECT_TRUE(testing::gradcheck(
        [form](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], {}, form); }, {x, w}));
  }
  // Only the weight needs a gradient: the slope is still saved, and dx is not computed.
  Tensor x_const = randn({7, 5}, gen, kFloat64);
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return linear_gelu(x_const, in[0]); }, {w}));
}

TEST(LinearGelu, Float32MatchesFloat64) {
  Generator gen(15);
  Tensor x64 = randn({3, 70, 23}, gen, kFloat64), w64 = randn({19, 23}, gen, kFloat64),
         b64 = randn({19}, gen, kFloat64), dy64 = randn({3, 70, 19}, gen, kFloat64);
  BothDtypes r = run_in_both_dtypes([](auto x, auto w, auto b) { return linear_gelu(x, w, b); }, x64, w64, b64, dy64);
  EXPECT_TRUE(all_close(r.out[1].to(kFloat64), r.out[0], 1e-4));
  // As for linear above: dW and db sum 210 rows of terms of size about 1.
  double tol[3] = {1e-4, 1e-3, 1e-3};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(all_close(r.grads[1][i].to(kFloat64), r.grads[0][i], tol[i])) << "input " << i;
}

TEST(LinearGelu, WithoutGradModeSavesNothingAndGivesTheSameValues) {
  Generator gen(16);
  Tensor x = normal_leaf({4, 6}, gen), w = normal_leaf({5, 6}, gen), b = normal_leaf({5}, gen);
  Tensor expected = gelu(linear(x, w, b)).detach();
  NoGradGuard no_grad;
  Tensor y = linear_gelu(x, w, b);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(all_close(y, expected, 1e-15));
}

TEST(Embedding, LooksUpRowsAndAccumulatesRepeats) {
  Tensor w = tensor({0, 1, 10, 11, 20, 21}, {3, 2}, kFloat64).requires_grad_();
  Tensor ids = from_vector<std::int64_t>({2, 0, 2}, {3});
  Tensor y = embedding(w, ids);
  EXPECT_TRUE(all_close(y, {20, 21, 0, 1, 20, 21}, 0));
  y.backward(tensor({1, 2, 3, 4, 5, 6}, {3, 2}, kFloat64));
  // Row 2 was used at positions 0 and 2: its gradient is dy[0] + dy[2] = [1+5, 2+6].
  EXPECT_TRUE(all_close(w.grad(), {3, 4, 0, 0, 6, 8}, 0));
}

TEST(Embedding, GradcheckWithBatchedIds) {
  Generator gen(3);
  Tensor w = normal_leaf({5, 3}, gen);
  Tensor ids = from_vector<std::int64_t>({0, 4, 4, 1, 2, 0}, {2, 3});
  EXPECT_EQ(embedding(w, ids).shape(), (Shape{2, 3, 3}));
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids); }, {w}));
}

TEST(Embedding, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        embedding(ones({3, 2}), from_vector<std::int64_t>({1, 3}, {2}));
      },
      "embedding: id 3 at position 1 is outside the table's 3 rows"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        embedding(ones({3, 2}), from_vector<std::int64_t>({-1}, {1}));
      },
      "embedding: id -1 at position 0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        embedding(ones({3, 2}), ones({2}));
      },
      "embedding: ids must be int64, got float32"));
}

TEST(LayerNorm, HandComputedRow) {
  // Row [1, 2, 3]: mean 2, biased variance 2/3, so xhat = (x - 2) / sqrt(2/3 + eps).
  double rs = 1 / std::sqrt(2.0 / 3 + 1e-5);
  Tensor x = tensor({1, 2, 3}, {1, 3}, kFloat64);
  EXPECT_TRUE(all_close(layer_norm(x), {-rs, 0, rs}, 1e-15));
  Tensor w = tensor({2, 2, 2}, {3}, kFloat64), b = tensor({1, 1, 1}, {3}, kFloat64);
  EXPECT_TRUE(all_close(layer_norm(x, w, b), {1 - 2 * rs, 1, 1 + 2 * rs}, 1e-15));
}

TEST(LayerNorm, ConstantRowGivesBiasNotNaN) {
  Tensor x = full({2, 4}, 3.0, kFloat64).requires_grad_();
  Tensor b = tensor({1, 2, 3, 4}, {4}, kFloat64);
  Tensor y = layer_norm(x, Tensor(), b);
  EXPECT_TRUE(all_close(y, {1, 2, 3, 4, 1, 2, 3, 4}, 0));
  y.sum().backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_FALSE(std::isnan(g));
}

TEST(LayerNorm, GradcheckEveryInput) {
  Generator gen(4);
  Tensor x = normal_leaf({2, 3, 5}, gen), w = normal_leaf({5}, gen), b = normal_leaf({5}, gen);
  EXPECT_TRUE(
      testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); }, {x, w, b}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0]); }, {x}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1]); }, {x, w}));
}

// Rows of 21 and 37: the row sums run in blocks of 8 partial sums plus a tail, so both parts
// and every input's gradient are checked, with and without weight and bias.
TEST(LayerNorm, GradcheckRowsLongerThanOneSumBlock) {
  Generator gen(6);
  for (std::int64_t d : {21, 37}) {
    Tensor x = normal_leaf({3, 2, d}, gen), w = normal_leaf({d}, gen), b = normal_leaf({d}, gen);
    EXPECT_TRUE(
        testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); }, {x, w, b}))
        << "d = " << d;
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0]); }, {x}))
        << "d = " << d;
    EXPECT_TRUE(
        testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), in[1]); }, {x, b}))
        << "d = " << d;
  }
}

// The float32 path (compiled for AVX2 as well) against float64, forward and every gradient.
TEST(LayerNorm, Float32ForwardAndBackwardMatchFloat64) {
  Generator gen(7);
  Tensor x64 = randn({5, 37}, gen, kFloat64) * 2.0 + 0.5, w64 = randn({37}, gen, kFloat64),
         b64 = randn({37}, gen, kFloat64), dy64 = randn({5, 37}, gen, kFloat64);
  BothDtypes r = run_in_both_dtypes([](auto x, auto w, auto b) { return layer_norm(x, w, b); }, x64, w64, b64, dy64);
  EXPECT_TRUE(all_close(r.out[1].to(kFloat64), r.out[0], 1e-5));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(r.grads[1][i].to(kFloat64), r.grads[0][i], 1e-4)) << "input " << i;
}

TEST(LayerNorm, Float32MatchesFloat64) {
  Generator gen(5);
  Tensor x = randn({4, 16}, gen, kFloat64) * 3.0 + 1.0;
  EXPECT_TRUE(all_close(layer_norm(x.to(kFloat32)), layer_norm(x), 1e-5));
}

TEST(LayerNorm, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        layer_norm(ones({2, 3}), ones({4}));
      },
      "layer_norm: weight has shape [4], expected [3] for input of shape [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        layer_norm(ones({2, 0}));
      },
      "layer_norm: cannot normalise over an empty last dim (shape [2, 0])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        layer_norm(ones({2, 3}), {}, {}, 0.0);
      },
      "layer_norm: eps must be positive"));
}

TEST(RmsNorm, HandComputedRow) {
  // Row [3, 4]: mean square (9 + 16) / 2 = 12.5, so xhat = x / sqrt(12.5 + eps).
  double r = 1 / std::sqrt(12.5 + 1e-6);
  Tensor x = tensor({3, 4}, {1, 2}, kFloat64);
  EXPECT_TRUE(all_close(rms_norm(x), {3 * r, 4 * r}, 1e-15));
  Tensor w = tensor({2, -1}, {2}, kFloat64);
  EXPECT_TRUE(all_close(rms_norm(x, w), {6 * r, -4 * r}, 1e-15));
  // No centring: a constant row normalises to ones (layer norm would give zeros).
  EXPECT_TRUE(all_close(rms_norm(full({1, 4}, 5.0, kFloat64), {}, 1e-300), {1, 1, 1, 1}, 1e-15));
}

// The derivative of a row's output with respect to its own input, by hand for D = 2 at x = [3, 4]
// with eps -> 0: y = x / |x| sqrt(2), so dy_0/dx_0 = sqrt(2) x_1^2 / |x|^3 = sqrt(2) 16 / 125.
TEST(RmsNorm, HandComputedSlope) {
  Tensor x = tensor({3, 4}, {1, 2}, kFloat64).requires_grad_();
  rms_norm(x, {}, 1e-300).slice(1, 0, 1).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {std::sqrt(2.0) * 16 / 125, -std::sqrt(2.0) * 12 / 125}, 1e-15));
}

TEST(RmsNorm, GradcheckEveryInput) {
  Generator gen(14);
  for (std::int64_t d : {5, 21, 37}) {  // rows shorter and longer than one block of the row sums
    Tensor x = normal_leaf({3, 2, d}, gen), w = normal_leaf({d}, gen);
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); }, {x, w}))
        << "d = " << d;
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], {}, 1e-3); }, {x}))
        << "d = " << d;
  }
}

TEST(RmsNorm, Float32ForwardAndBackwardMatchFloat64) {
  Generator gen(15);
  Tensor x64 = randn({5, 37}, gen, kFloat64) * 2.0 + 0.5, w64 = randn({37}, gen, kFloat64),
         b64 = randn({37}, gen, kFloat64), dy64 = randn({5, 37}, gen, kFloat64);
  BothDtypes r = run_in_both_dtypes([](auto x, auto w, auto) { return rms_norm(x, w); }, x64, w64, b64, dy64);
  EXPECT_TRUE(all_close(r.out[1].to(kFloat64), r.out[0], 1e-5));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(all_close(r.grads[1][i].to(kFloat64), r.grads[0][i], 1e-4)) << "input " << i;
}

TEST(RmsNorm, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        rms_norm(ones({2, 3}), ones({4}));
      },
      "rms_norm: weight has shape [4], expected [3] for input of shape [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        rms_norm(ones({2, 0}));
      },
      "rms_norm: cannot normalise over an empty last dim (shape [2, 0])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        rms_norm(ones({2, 3}), {}, -1.0);
      },
      "rms_norm: eps must be positive, got -1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { rms_norm(scalar(1.0)); }, "rms_norm: needs at least one dim"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { rms_norm(ones({2, 3}, kInt64)); }, "rms_norm: expected a float"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { rms_norm(ones({2, 3}), ones({3}, kFloat64)); }, "rms_norm"));
}

// One row, in = 2, hidden = 1, out = 1, by hand: h1 = x . g, h3 = x . u, a = h1 sigmoid(h1) h3,
// y = d a. With x = [1, 2], g = [0.5, -0.25] (h1 = 0), u = [1, 1] (h3 = 3): silu(0) = 0, so
// y = 0; silu'(0) = sigmoid(0) = 1/2, so dy/dx = d (silu'(h1) h3 g + silu(h1) u) = 2 * 1.5 g.
TEST(Swiglu, HandComputedRow) {
  Tensor x = tensor({1, 2}, {1, 2}, kFloat64).requires_grad_();
  Tensor g = tensor({0.5, -0.25}, {1, 2}, kFloat64), u = tensor({1, 1}, {1, 2}, kFloat64),
         d = tensor({2}, {1, 1}, kFloat64);
  Tensor y = swiglu(x, g, u, d);
  EXPECT_TRUE(all_close(y, {0.0}, 1e-15));
  y.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {2 * 1.5 * 0.5, 2 * 1.5 * -0.25}, 1e-15));
  // h1 = 2 (g = [2, 0]): silu(2) = 2 / (1 + e^-2), y = 2 silu(2) 3.
  Tensor g2 = tensor({2, 0}, {1, 2}, kFloat64);
  EXPECT_TRUE(all_close(swiglu(x.detach(), g2, u, d), {2 * (2 / (1 + std::exp(-2.0))) * 3}, 1e-15));
}

TEST(Swiglu, GradcheckEveryInput) {
  Generator gen(16);
  for (auto [in, hidden, out] : {std::array<std::int64_t, 3>{5, 7, 3}, {4, 1, 6}, {1, 9, 2}}) {
    Tensor x = normal_leaf({3, 2, in}, gen), g = normal_leaf({hidden, in}, gen), u = normal_leaf({hidden, in}, gen),
           d = normal_leaf({out, hidden}, gen);
    EXPECT_TRUE(
        testing::gradcheck([](const std::vector<Tensor>& t) { return swiglu(t[0], t[1], t[2], t[3]); }, {x, g, u, d}))
        << in << " -> " << hidden << " -> " << out;
  }
  Tensor v = normal_leaf({5}, gen), g = normal_leaf({3, 5}, gen), u = normal_leaf({3, 5}, gen),
         d = normal_leaf({2, 3}, gen);  // a 1-d input: one row
  EXPECT_TRUE(
      testing::gradcheck([](const std::vector<Tensor>& t) { return swiglu(t[0], t[1], t[2], t[3]); }, {v, g, u, d}));
  EXPECT_EQ(swiglu(v, g, u, d).shape(), (Shape{2}));
}

TEST(Swiglu, Float32ForwardAndBackwardMatchFloat64) {
  Generator gen(17);
  Tensor x64 = randn({6, 11}, gen, kFloat64), g64 = randn({13, 11}, gen, kFloat64),
         u64 = randn({13, 11}, gen, kFloat64), d64 = randn({7, 13}, gen, kFloat64) * 0.3;
  std::vector<Tensor> out, grads[2];
  for (DType dtype : {kFloat64, kFloat32}) {
    std::vector<Tensor> in;
    for (const Tensor& t : {x64, g64, u64, d64}) in.push_back(t.to(dtype).requires_grad_());
    Tensor y = swiglu(in[0], in[1], in[2], in[3]);
    Generator w(3);
    (y * randn(y.shape(), w, dtype)).sum().backward();
    out.push_back(y.detach().to(kFloat64));
    for (const Tensor& t : in) grads[dtype == kFloat64 ? 0 : 1].push_back(t.grad().to(kFloat64));
  }
  EXPECT_TRUE(all_close(out[1], out[0], 1e-4));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 1e-4)) << "input " << i;
}

// Large |h1|: silu(v) -> v for v >> 0 and -> 0 (not NaN) for v << 0, in both dtypes, with a
// finite gradient.
TEST(Swiglu, SaturatedGatesStayFinite) {
  for (DType dtype : {kFloat64, kFloat32}) {
    Tensor x = tensor({1}, {1, 1}, dtype).requires_grad_();
    Tensor g = tensor({-1e4, 1e4}, {2, 1}, dtype), u = tensor({1, 1}, {2, 1}, dtype), d = tensor({1, 1}, {1, 2}, dtype);
    Tensor y = swiglu(x, g, u, d);
    EXPECT_TRUE(all_close(y.to(kFloat64), {1e4}, 1e-6)) << dtype_name(dtype);
    y.sum().backward();
    EXPECT_TRUE(all_close(x.grad().to(kFloat64), {2e4}, 1e-6)) << dtype_name(dtype);
  }
}

TEST(Swiglu, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        swiglu(ones({2, 3}), ones({4, 5}), ones({4, 5}), ones({3, 4}));
      },
      "swiglu: input of shape [2, 3] does not fit w_gate of shape [4, 5] (expected [hidden, 3])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        swiglu(ones({2, 3}), ones({4, 3}), ones({5, 3}), ones({3, 4}));
      },
      "swiglu: w_up has shape [5, 3], expected w_gate's [4, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        swiglu(ones({2, 3}), ones({4, 3}), ones({4, 3}), ones({3, 5}));
      },
      "swiglu: w_down has shape [3, 5], expected [out, 4] for the hidden size of w_gate [4, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        swiglu(scalar(1.0), ones({4, 1}), ones({4, 1}), ones({1, 4}));
      },
      "swiglu: input of shape []"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        swiglu(ones({2, 3}), ones({4, 3}, kFloat64), ones({4, 3}), ones({3, 4}));
      },
      "swiglu"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        swiglu(ones({2, 3}, kInt64), ones({4, 3}, kInt64), ones({4, 3}, kInt64), ones({3, 4}, kInt64));
      },
      "swiglu: expected a float"));
  // Empty sizes compute (zeros where a sum is empty) rather than fail.
  EXPECT_TRUE(
      all_close(swiglu(ones({2, 0}, kFloat64), ones({4, 0}, kFloat64), ones({4, 0}, kFloat64), ones({3, 4}, kFloat64)),
                std::vector<double>(6, 0.0), 0));
  EXPECT_EQ(swiglu(ones({0, 3}), ones({4, 3}), ones({4, 3}), ones({2, 4})).shape(), (Shape{0, 2}));
}

TEST(Dropout, EvalAndZeroProbabilityAreIdentity) {
  Generator gen(6);
  Tensor x = randn({10}, gen);
  EXPECT_EQ(dropout(x, 0.5, false, gen).raw_data(), x.raw_data());
  EXPECT_EQ(dropout(x, 0.0, true, gen).raw_data(), x.raw_data());
}

TEST(Dropout, DropsAboutPAndRescalesSurvivors) {
  Generator gen(7);
  const int n = 100000;
  Tensor x = ones({n}, kFloat64).requires_grad_();
  Tensor y = dropout(x, 0.25, true, gen);
  auto v = y.to_vector<double>();
  int zeros_seen = 0;
  for (double e : v) {
    if (e == 0)
      ++zeros_seen;
    else
      EXPECT_DOUBLE_EQ(e, 1 / 0.75);
  }
  // Binomial(n, 0.25): standard deviation sqrt(n * 0.25 * 0.75) ~ 137; allow 5 of them.
  EXPECT_NEAR(zeros_seen, n / 4, 5 * std::sqrt(n * 0.25 * 0.75));
  // The gradient uses the same mask and scale.
  y.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), y.detach(), 0));
}

TEST(Dropout, Gradcheck) {
  // A fresh generator with the same seed on every call draws the same mask each time, so the
  // function is deterministic and finite differences apply.
  Generator gen(12);
  Tensor x = normal_leaf({3, 4, 5}, gen);
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        Generator mask_gen(99);
        return dropout(in[0], 0.3, true, mask_gen);
      },
      {x}));
}

TEST(Dropout, SameSeedSameMaskAndErrors) {
  Generator a(8), b(8);
  Tensor x = ones({50});
  EXPECT_EQ(dropout(x, 0.5, true, a).to_vector<float>(), dropout(x, 0.5, true, b).to_vector<float>());
  EXPECT_TRUE(all_close(dropout(x, 1.0, true, a), std::vector<double>(50, 0.0), 0));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { dropout(x, 1.5, true, a); },
                                                 "dropout: probability must be in [0, 1], got 1.5"));
}

// -log softmax(logits)[target], composed from primitive ops: the independent reference.
Tensor cross_entropy_reference(const Tensor& logits, const std::vector<std::int64_t>& targets) {
  Tensor lsm = log_softmax(logits, -1);
  Tensor total = scalar(0.0, logits.dtype());
  for (std::size_t r = 0; r < targets.size(); ++r) {
    auto row = static_cast<std::int64_t>(r);
    total = total - lsm.slice(0, row, row + 1).slice(1, targets[r], targets[r] + 1).sum();
  }
  return total / static_cast<double>(targets.size());
}

TEST(CrossEntropy, HandComputedAndComposedReference) {
  // logits [1, 2, 3], target 2: loss = log(e + e^2 + e^3) - 3
  Tensor logits = tensor({1, 2, 3}, {1, 3}, kFloat64);
  double expected = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3;
  EXPECT_NEAR(cross_entropy(logits, from_vector<std::int64_t>({2}, {1})).item(), expected, 1e-15);
  EXPECT_NEAR(expected, 0.40760596444438, 1e-13);
  Generator gen(9);
  Tensor x = randn({4, 6}, gen, kFloat64);
  std::vector<std::int64_t> t = {5, 0, 3, 3};
  EXPECT_NEAR(cross_entropy(x, from_vector(t, {4})).item(), cross_entropy_reference(x, t).item(), 1e-14);
}

TEST(CrossEntropy, GradientIsSoftmaxMinusOneHot) {
  Tensor logits = tensor({1, 2, 3}, {1, 3}, kFloat64).requires_grad_();
  cross_entropy(logits, from_vector<std::int64_t>({0}, {1})).backward();
  Tensor p = softmax(logits.detach(), 1);
  EXPECT_TRUE(all_close(logits.grad(), {p.at<double>({0, 0}) - 1, p.at<double>({0, 1}), p.at<double>({0, 2})}, 1e-15));
  Generator gen(10);
  Tensor x = normal_leaf({2, 3, 5}, gen);  // [B, T, C]
  Tensor targets = from_vector<std::int64_t>({4, 0, 2, 2, 1, 3}, {2, 3});
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); }, {x}));
}

// 65 classes, as in the character-level GPT: the row sums run in blocks of eight plus a tail,
// and float32's exponentials go through the SIMD path. float32 loss and gradient against float64,
// and a float64 gradcheck at 21 classes.
TEST(CrossEntropy, Float32MatchesFloat64AtSixtyFiveClasses) {
  Generator gen(11);
  Tensor x64 = randn({3, 7, 65}, gen, kFloat64) * 4.0;
  std::vector<std::int64_t> t(21);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int64_t>((i * 29 + 3) % 65);
  Tensor targets = from_vector(t, {3, 7});
  Tensor loss[2], grad[2];
  for (int k = 0; k < 2; ++k) {
    Tensor x = x64.to(k == 0 ? kFloat64 : kFloat32).requires_grad_();
    loss[k] = cross_entropy(x, targets);
    loss[k].backward();
    grad[k] = x.grad();
  }
  EXPECT_NEAR(loss[1].item(), loss[0].item(), 1e-6 * loss[0].item());
  EXPECT_TRUE(all_close(grad[1].to(kFloat64), grad[0], 1e-8));  // entries are p / 21, at most 0.05

  Tensor x = normal_leaf({2, 5, 21}, gen);
  Tensor targets21 = from_vector<std::int64_t>({0, 20, 7, 13, 1, 2, 19, 8, 8, 4}, {2, 5});
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets21); }, {x}));
}

TEST(CrossEntropy, IgnoreIndex) {
  Generator gen(11);
  Tensor x = normal_leaf({3, 4}, gen);
  Tensor targets = from_vector<std::int64_t>({1, -100, 3}, {3});
  // The ignored row counts in neither the sum nor the mean.
  Tensor kept = cat({x.detach().slice(0, 0, 1), x.detach().slice(0, 2, 3)}, 0);
  EXPECT_NEAR(cross_entropy(x, targets).item(), cross_entropy_reference(kept, {1, 3}).item(), 1e-14);
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); }, {x}));
  cross_entropy(x, targets).backward();
  EXPECT_TRUE(all_close(x.grad().slice(0, 1, 2), {0, 0, 0, 0}, 0));
  // A custom ignore_index, and every row ignored: 0, not NaN.
  Tensor all_ignored = from_vector<std::int64_t>({7, 7, 7}, {3});
  EXPECT_EQ(cross_entropy(x, all_ignored, 7).item(), 0.0);
}

TEST(CrossEntropy, ExtremeLogitsStayFinite) {
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor x = tensor({1e4, -1e4, 0}, {1, 3}, dtype).requires_grad_();
    Tensor right = cross_entropy(x, from_vector<std::int64_t>({0}, {1}));
    EXPECT_NEAR(right.item(), 0.0, 1e-6);
    Tensor wrong = cross_entropy(x, from_vector<std::int64_t>({1}, {1}));
    EXPECT_NEAR(wrong.item(), 2e4, 1e-2);
    wrong.backward();
    for (double g : x.grad().to(kFloat64).to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
  }
}

TEST(CrossEntropy, Errors) {
  Tensor x = ones({2, 3});
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        cross_entropy(x, from_vector<std::int64_t>({0, 3}, {2}));
      },
      "cross_entropy: target 3 at position 1 is outside [0, 3) and is not ignore_index (-100)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        cross_entropy(x, from_vector<std::int64_t>({0, 1, 2}, {3}));
      },
      "cross_entropy: logits of shape [2, 3] need targets of shape [2], got [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { cross_entropy(x, ones({2})); },
                                                 "cross_entropy: targets must be int64 class indices, got float32"));
}

}  // namespace
}  // namespace ag
