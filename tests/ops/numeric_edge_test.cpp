// Numerical edge cases, in float32 and in float64: softmax and log_softmax of logits of size
// 1e4 and of rows that are partly or entirely -inf, cross-entropy at extreme logits, layer norm
// of a constant vector, attention over a single key, and empty batches.
//
// Every expected value is an analytic one (a closed form in a comment, or a formula applied to
// closed-form inputs), never the output of the code under test.
#include <cmath>
#include <limits>
#include <vector>

#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kE = std::exp(1.0);

class NumericEdge : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  // Relative tolerance: a few float32 or float64 ulps, with room for sums of a few terms.
  double tol() const { return dtype() == kFloat32 ? 2e-6 : 1e-13; }
  // cross_entropy keeps one float64 log-sum-exp per row (docs/cross_entropy.md). Near 1e4 the
  // spacing of float64 is 1.8e-12, so x - lse, and with it the loss and p, carry that much error.
  double ce_tol() const { return dtype() == kFloat32 ? tol() : 1e-11; }
  Tensor leaf(const std::vector<double>& values, const Shape& shape) const {
    return tensor(values, shape, dtype()).requires_grad_();
  }
  Tensor randn_leaf(const Shape& shape, Generator& gen) const { return randn(shape, gen, dtype()).requires_grad_(); }
};

INSTANTIATE_TEST_SUITE_P(Floats, NumericEdge, ::testing::Values(kFloat32, kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

std::vector<double> values(const Tensor& t) { return t.detach().to(kFloat64).to_vector<double>(); }

// Same element count, and each element within rel * max(1, |expected|) of the expected value
// (equal infinities pass).
::testing::AssertionResult near(const Tensor& t, const std::vector<double>& expected, double rel) {
  std::vector<double> got = values(t);
  if (got.size() != expected.size())
    return ::testing::AssertionFailure() << got.size() << " elements, expected " << expected.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == expected[i] || std::abs(got[i] - expected[i]) <= rel * std::max(1.0, std::abs(expected[i]))))
      return ::testing::AssertionFailure() << "element " << i << " is " << got[i] << ", expected " << expected[i]
                                           << " (relative tolerance " << rel << ")";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_finite(const Tensor& t) {
  if (!t.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  std::vector<double> v = values(t);
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return ::testing::AssertionFailure() << "element " << i << " is " << v[i];
  return ::testing::AssertionSuccess();
}

// dL/dx for y = softmax(x) along rows of length n and dL/dy = g, through the Jacobian itself:
// dy_k/dx_j = y_k ([k = j] - y_j), so dx_j = sum_k g_k y_k ([k = j] - y_j).
std::vector<double> softmax_vjp(const std::vector<double>& y, const std::vector<double>& g, std::size_t n) {
  std::vector<double> dx(y.size(), 0.0);
  for (std::size_t r = 0; r < y.size(); r += n)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t k = 0; k < n; ++k) dx[r + j] += g[r + k] * y[r + k] * ((k == j ? 1.0 : 0.0) - y[r + j]);
  return dx;
}

// The same for y = log_softmax(x), p = softmax(x): dy_k/dx_j = [k = j] - p_j.
std::vector<double> log_softmax_vjp(const std::vector<double>& p, const std::vector<double>& g, std::size_t n) {
  std::vector<double> dx(p.size(), 0.0);
  for (std::size_t r = 0; r < p.size(); r += n)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t k = 0; k < n; ++k) dx[r + j] += g[r + k] * ((k == j ? 1.0 : 0.0) - p[r + j]);
  return dx;
}

// --- softmax and log_softmax of huge logits -----------------------------------------------------

TEST_P(NumericEdge, SoftmaxOfLogitsNear1e4IsExactAndFinite) {
  // Three rows, each with a closed form (e^-1e4 is about 10^-4343: zero in any float):
  //   [1e4, 0, -1e4]             -> [1, 0, 0]
  //   [1e4, 1e4 - 1, 1e4 - 2]    -> [1, e^-1, e^-2] / (1 + e^-1 + e^-2)   (shift by 1e4)
  //   [-1e4, -1e4, -1e4 + 1]     -> [1, 1, e] / (2 + e)                    (shift by -1e4)
  Tensor x = leaf({1e4, 0, -1e4, 1e4, 1e4 - 1, 1e4 - 2, -1e4, -1e4, -1e4 + 1}, {3, 3});
  double z1 = 1 + std::exp(-1.0) + std::exp(-2.0), z2 = 2 + kE;
  std::vector<double> p = {1, 0, 0, 1 / z1, std::exp(-1.0) / z1, std::exp(-2.0) / z1, 1 / z2, 1 / z2, kE / z2};
  EXPECT_NEAR(p[3], 0.6652409557748219, 1e-15);  // = softmax([2, 1, 0])[0], a known value

  Tensor y = softmax(x, 1);
  EXPECT_TRUE(all_finite(y));
  EXPECT_TRUE(near(y, p, tol()));
  EXPECT_TRUE(near(y.sum(1), {1, 1, 1}, tol()));

  std::vector<double> g = {1, 2, 3, -4, 5, 0.5, 7, -8, 9};
  (y * tensor(g, {3, 3}, dtype())).sum().backward();
  EXPECT_TRUE(all_finite(x.grad()));
  EXPECT_TRUE(near(x.grad(), softmax_vjp(p, g, 3), 10 * tol()));
  EXPECT_TRUE(near(x.grad().sum(1), {0, 0, 0}, 10 * tol()));  // shifting a row changes nothing
}

TEST_P(NumericEdge, LogSoftmaxOfLogitsNear1e4IsExactAndFinite) {
  // log_softmax(x)_k = x_k - logsumexp(x), with
  //   logsumexp([1e4, 0, -1e4])          = 1e4
  //   logsumexp([1e4, 1e4 - 1, 1e4 - 2]) = 1e4 + log(1 + e^-1 + e^-2)
  //   logsumexp([-1e4, -1e4, -1e4 + 1])  = -1e4 + log(2 + e)
  Tensor x = leaf({1e4, 0, -1e4, 1e4, 1e4 - 1, 1e4 - 2, -1e4, -1e4, -1e4 + 1}, {3, 3});
  double l1 = std::log(1 + std::exp(-1.0) + std::exp(-2.0)), l2 = std::log(2 + kE);
  std::vector<double> expected = {0, -1e4, -2e4, -l1, -1 - l1, -2 - l1, -l2, -l2, 1 - l2};
  Tensor y = log_softmax(x, -1);
  EXPECT_TRUE(all_finite(y));
  EXPECT_TRUE(near(y, expected, tol()));

  double z1 = 1 + std::exp(-1.0) + std::exp(-2.0), z2 = 2 + kE;
  std::vector<double> p = {1, 0, 0, 1 / z1, std::exp(-1.0) / z1, std::exp(-2.0) / z1, 1 / z2, 1 / z2, kE / z2};
  std::vector<double> g = {1, 2, 3, -4, 5, 0.5, 7, -8, 9};
  (y * tensor(g, {3, 3}, dtype())).sum().backward();
  EXPECT_TRUE(all_finite(x.grad()));
  EXPECT_TRUE(near(x.grad(), log_softmax_vjp(p, g, 3), 10 * tol()));
}

// --- rows that are partly or entirely -inf (docs/softmax.md, ops/softmax.h) ------------------------

TEST_P(NumericEdge, FullyMaskedRowIsTheDocumentedZerosAndPartlyMaskedRowsIgnoreTheMask) {
  // ops/softmax.h: a row of all -inf gives zeros from softmax (-inf from log_softmax) and a zero
  // gradient. A row with some -inf is the softmax of the other entries, with exact zeros there:
  //   [-inf, 1, -inf, 3] -> [0, e, 0, e^3] / (e + e^3)
  Tensor x = leaf({-kInf, -kInf, -kInf, -kInf, -kInf, 1, -kInf, 3}, {2, 4});
  double z = kE + std::pow(kE, 3);
  std::vector<double> p = {0, 0, 0, 0, 0, kE / z, 0, std::pow(kE, 3) / z};
  Tensor y = softmax(x, 1);
  EXPECT_TRUE(near(y, p, tol()));
  std::vector<double> yv = values(y);
  for (std::size_t j : {0, 1, 2, 3, 4, 6}) EXPECT_EQ(yv[j], 0.0) << "entry " << j << " is exactly 0, not merely small";
  EXPECT_TRUE(near(y.sum(1), {0, 1}, tol()));

  std::vector<double> g = {1, -2, 3, 4, 5, 6, -7, 8};
  (y * tensor(g, {2, 4}, dtype())).sum().backward();
  EXPECT_TRUE(all_finite(x.grad()));
  EXPECT_TRUE(near(x.grad(), softmax_vjp(p, g, 4), 10 * tol()));  // row 0: all zero (y = 0)

  // The same along dim 0 of the transpose: the rule holds for a strided row too.
  Tensor xt = x.detach().transpose(0, 1);
  EXPECT_TRUE(near(softmax(xt, 0), {0, 0, 0, kE / z, 0, 0, 0, std::pow(kE, 3) / z}, tol()));
}

TEST_P(NumericEdge, LogSoftmaxOfMaskedRows) {
  // All -inf: -inf everywhere and a zero gradient (ops/softmax.h). Partly -inf:
  //   [-inf, 1, -inf, 3] -> [-inf, 1 - lse, -inf, 3 - lse],  lse = log(e + e^3) = 3 + log(1 + e^-2)
  // and dx_j = g_j - p_j sum(g), which is g_j at a masked entry (p_j = 0): finite.
  Tensor x = leaf({-kInf, -kInf, -kInf, -kInf, -kInf, 1, -kInf, 3}, {2, 4});
  double lse = 3 + std::log(1 + std::exp(-2.0));
  Tensor y = log_softmax(x, 1);
  EXPECT_TRUE(near(y, {-kInf, -kInf, -kInf, -kInf, -kInf, 1 - lse, -kInf, 3 - lse}, tol()));

  std::vector<double> g = {1, -2, 3, 4, 5, 6, -7, 8};
  y.backward(tensor(g, {2, 4}, dtype()));
  EXPECT_TRUE(all_finite(x.grad()));
  double z = kE + std::pow(kE, 3);
  std::vector<double> expected = log_softmax_vjp({0, 0, 0, 0, 0, kE / z, 0, std::pow(kE, 3) / z}, g, 4);
  for (int j = 0; j < 4; ++j) expected[static_cast<std::size_t>(j)] = 0;  // the fully masked row: no gradient
  EXPECT_TRUE(near(x.grad(), expected, 10 * tol()));
}

// --- cross-entropy at extreme logits -------------------------------------------------------------

TEST_P(NumericEdge, CrossEntropyAtExtremeLogits) {
  // loss = logsumexp(x) - x_target, gradient = softmax(x) - onehot(target) for one row.
  struct Case {
    const char* name;
    std::vector<double> logits;
    std::int64_t target;
    double loss;            // analytic
    std::vector<double> p;  // softmax(logits), analytic
  };
  double s = 1 / (1 + std::exp(-1.0));  // softmax([a, a - 1])[0]
  std::vector<Case> cases = {
      // logsumexp = 1e4 + log(1 + 2e^-1e4) = 1e4 in any float
      {"right class at +1e4", {1e4, 0, 0}, 0, 0.0, {1, 0, 0}},
      {"wrong class at +1e4", {0, 1e4, 0}, 0, 1e4, {0, 1, 0}},
      // logsumexp = 1e4 + log(1 + e^-1), minus the target's 1e4 - 1
      {"runner-up at 1e4 - 1", {1e4, 1e4 - 1, 0}, 1, 1 + std::log(1 + std::exp(-1.0)), {s, 1 - s, 0}},
      {"every logit -1e4", {-1e4, -1e4, -1e4}, 2, std::log(3.0), {1 / 3.0, 1 / 3.0, 1 / 3.0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = leaf(c.logits, {1, 3});
    Tensor loss = cross_entropy(x, from_vector<std::int64_t>({c.target}, {1}));
    EXPECT_TRUE(all_finite(loss));
    EXPECT_TRUE(near(loss, {c.loss}, ce_tol()));
    loss.backward();
    std::vector<double> grad = c.p;
    grad[static_cast<std::size_t>(c.target)] -= 1;
    EXPECT_TRUE(all_finite(x.grad()));
    EXPECT_TRUE(near(x.grad(), grad, ce_tol()));
  }

  // All three extreme rows in one batch: the mean of the three losses, gradients divided by 3.
  Tensor x = leaf({1e4, 0, 0, 0, 1e4, 0, 1e4, 1e4 - 1, 0}, {3, 3});
  Tensor loss = cross_entropy(x, from_vector<std::int64_t>({0, 0, 1}, {3}));
  EXPECT_TRUE(near(loss, {(0 + 1e4 + 1 + std::log(1 + std::exp(-1.0))) / 3}, ce_tol()));
  loss.backward();
  EXPECT_TRUE(near(x.grad(), {0, 0, 0, -1 / 3.0, 1 / 3.0, 0, s / 3, -s / 3, 0}, ce_tol()));
}

TEST_P(NumericEdge, CrossEntropyOfEqualLogitsIsLogC) {
  // Equal logits: softmax is uniform, 1/C, so the loss is log C whatever the value, and the
  // gradient (1/C - onehot) / rows.
  for (double value : {0.0, 7.0, 1e4, -1e4}) {
    SCOPED_TRACE(value);
    Tensor x = tensor(std::vector<double>(10, value), {2, 5}, dtype()).requires_grad_();
    Tensor loss = cross_entropy(x, from_vector<std::int64_t>({0, 4}, {2}));
    EXPECT_TRUE(near(loss, {std::log(5.0)}, ce_tol()));
    loss.backward();
    EXPECT_TRUE(near(x.grad(), {-0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, -0.4}, ce_tol()));
  }
}

// --- layer norm of a constant vector -------------------------------------------------------------

TEST_P(NumericEdge, LayerNormOfAConstantVectorIsTheBias) {
  // A constant row has x - mean = 0 and variance 0, so xhat = 0 (not 0/0: eps keeps
  // rstd = 1/sqrt(eps) finite) and y = xhat w + b = b. The variance's derivative
  // 2 (x_j - mean) / D vanishes too, so dy_k/dx_j = w_k rstd ([k = j] - 1/D), and for
  // L = sum(y r):
  //   dx_j = rstd (r_j w_j - mean_k(r_k w_k)),   dw_j = sum over rows of r_j xhat_j = 0,
  //   db_j = sum over rows of r_j.
  const double eps = 1e-5, rstd = 1 / std::sqrt(eps);
  std::vector<double> w = {0.5, -1, 2, 3}, b = {0.25, -0.5, 1, 0};
  std::vector<double> r = {1, 2, 3, 4, -1, 0.5, 2, -3};
  Tensor x = tensor({0.1, 0.1, 0.1, 0.1, -2500, -2500, -2500, -2500}, {2, 4}, dtype()).requires_grad_();
  Tensor weight = leaf(w, {4}), bias = leaf(b, {4});
  Tensor y = layer_norm(x, weight, bias, eps);
  EXPECT_TRUE(all_finite(y));
  EXPECT_TRUE(near(y, {0.25, -0.5, 1, 0, 0.25, -0.5, 1, 0}, tol()));

  (y * tensor(r, {2, 4}, dtype())).sum().backward();
  std::vector<double> dx(8);
  for (std::size_t row = 0; row < 2; ++row) {
    double mean_rw = 0;
    for (std::size_t j = 0; j < 4; ++j) mean_rw += r[row * 4 + j] * w[j] / 4;
    for (std::size_t j = 0; j < 4; ++j) dx[row * 4 + j] = rstd * (r[row * 4 + j] * w[j] - mean_rw);
  }
  EXPECT_TRUE(all_finite(x.grad()));
  EXPECT_TRUE(near(x.grad(), dx, 10 * tol()));
  EXPECT_TRUE(near(weight.grad(), {0, 0, 0, 0}, 10 * tol()));
  EXPECT_TRUE(near(bias.grad(), {0, 2.5, 5, 1}, tol()));

  // And finite differences agree, at the constant vector itself (gradcheck runs in float64).
  Tensor c = tensor({0.1, 0.1, 0.1, 0.1}, {1, 4}, dtype()).requires_grad_();
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], eps); },
                                 {c, leaf(w, {4}), leaf(b, {4})}));
}

// --- attention over a single key ------------------------------------------------------------------

TEST_P(NumericEdge, AttentionOverASingleKeyCopiesTheValue) {
  // With Tk = 1 each query's one weight is softmax([s]) = 1 whatever the score, so the output row
  // is the value row itself, q and k get no gradient (the weight does not move) and dV is the sum
  // of dO over the queries.
  Generator gen(1);
  Tensor q = randn_leaf({2, 2, 3, 4}, gen), k = randn_leaf({2, 2, 1, 4}, gen), v = randn_leaf({2, 2, 1, 5}, gen);
  AttentionResult r = scaled_dot_product_attention(q, k, v, {}, false, true);
  EXPECT_TRUE(test::all_close(r.weights, std::vector<double>(12, 1.0), 0));
  EXPECT_TRUE(test::all_close(r.output, broadcast_to(v.detach(), {2, 2, 3, 5}), 0));

  Tensor g = randn({2, 2, 3, 5}, gen, dtype());
  r.output.backward(g);
  EXPECT_TRUE(test::all_close(q.grad(), std::vector<double>(48, 0.0), 0));
  EXPECT_TRUE(test::all_close(k.grad(), std::vector<double>(16, 0.0), 0));
  EXPECT_TRUE(near(v.grad(), values(g.sum(2, true)), 10 * tol()));

  // The composed reference agrees, in the [B, T, H, d] layout too.
  EXPECT_TRUE(test::all_close(attention_reference(q, k, v).output, broadcast_to(v.detach(), {2, 2, 3, 5}), 0));
  Tensor out_bthd = scaled_dot_product_attention_bthd(q.detach().transpose(1, 2), k.detach().transpose(1, 2),
                                                      v.detach().transpose(1, 2))
                        .output;
  EXPECT_TRUE(test::all_close(out_bthd, broadcast_to(v.detach(), {2, 2, 3, 5}).transpose(1, 2), 0));
}

TEST_P(NumericEdge, CausalAttentionAtOneStepAndWithMoreQueriesThanKeys) {
  Generator gen(2);
  // T = 1 with the causal mask: the query sees its own key, weight 1, output = v.
  Tensor q = randn_leaf({2, 2, 1, 4}, gen), k = randn_leaf({2, 2, 1, 4}, gen), v = randn_leaf({2, 2, 1, 3}, gen);
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "attention_reference" : "scaled_dot_product_attention");
    AttentionResult r =
        reference ? attention_reference(q, k, v, {}, true) : scaled_dot_product_attention(q, k, v, {}, true, true);
    EXPECT_TRUE(test::all_close(r.weights, std::vector<double>(4, 1.0), 0));
    EXPECT_TRUE(test::all_close(r.output, v.detach(), 0));
    r.output.sum().backward();
    EXPECT_TRUE(all_finite(q.grad()));
    EXPECT_TRUE(all_finite(k.grad()));
    EXPECT_TRUE(test::all_close(v.grad(), std::vector<double>(12, 1.0), 0));
    for (Tensor t : {q, k, v}) t.zero_grad();
  }
  // Tq = 3, Tk = 1 with the causal mask: query i sees key j when j <= i + (Tk - Tq) = i - 2, so
  // queries 0 and 1 see nothing (zero output, the fully masked rule) and query 2 sees the key.
  Tensor q3 = randn_leaf({1, 1, 3, 4}, gen), k1 = randn_leaf({1, 1, 1, 4}, gen), v1 = leaf({1, -2, 3}, {1, 1, 1, 3});
  AttentionResult r = scaled_dot_product_attention(q3, k1, v1, {}, true, true);
  EXPECT_TRUE(test::all_close(r.weights, {0, 0, 1}, 0));
  EXPECT_TRUE(test::all_close(r.output, {0, 0, 0, 0, 0, 0, 1, -2, 3}, 0));
  r.output.sum().backward();
  EXPECT_TRUE(all_finite(q3.grad()));
  EXPECT_TRUE(test::all_close(v1.grad(), {1, 1, 1}, 0));  // only query 2 reads it
  // A single key that the mask hides: zero weights, zero output, zero gradients.
  Tensor hidden = full({1, 1, 1, 1}, 0, kBool);
  AttentionResult masked = scaled_dot_product_attention(q3, k1, v1, hidden, false, true);
  EXPECT_TRUE(test::all_close(masked.output, std::vector<double>(9, 0.0), 0));
}

// gradcheck runs in float64 whatever the inputs' dtype, so this one is not repeated per dtype.
TEST(NumericEdgeFloat64, SingleKeyAttentionGradcheck) {
  Generator gen(3);
  Tensor q = test::normal_leaf({1, 2, 3, 4}, gen), k = test::normal_leaf({1, 2, 1, 4}, gen),
         v = test::normal_leaf({1, 2, 1, 5}, gen);
  Tensor q1 = test::normal_leaf({1, 2, 1, 4}, gen);
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2]).output; },
      {q, k, v}));
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], {}, true).output; },
      {q1, k, v}));
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], {}, true).output; },
      {q, k, v}));
}

TEST_P(NumericEdge, MultiHeadAttentionOverOneTokenIsTheValueAndOutputProjections) {
  // Self-attention over T = 1: every head's weight is 1, so the output is out_proj(V(x)).
  Generator gen(4);
  nn::MultiHeadAttention attention(8, 2, {}, gen);
  attention.to(dtype());
  Tensor x = randn({3, 1, 8}, gen, dtype());
  Tensor expected =
      linear(test::project_by_hand(attention, 2, x), attention.out_proj->weight, attention.out_proj->bias);
  EXPECT_TRUE(near(attention.forward(x, x, {.causal = true}), values(expected), 10 * tol()));
}

// --- empty batches --------------------------------------------------------------------------------

TEST_P(NumericEdge, EmptyBatchesAreRejectedByTheModelAndLossEntryPoints) {
  nn::GPT model({.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8});
  model.to(dtype());
  Tensor no_rows = from_vector<std::int64_t>({}, {0, 4}), no_steps = from_vector<std::int64_t>({}, {2, 0});
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { model.forward(no_rows); }, "GPT: ids of shape [0, 4] hold no tokens"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { model.forward(no_steps); }, "GPT: ids of shape [2, 0] hold no tokens"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { model.loss(no_rows, no_rows); },
                                                 "GPT: ids of shape [0, 4] hold no tokens"));

  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        cross_entropy(zeros({0, 5}, dtype()), from_vector<std::int64_t>({}, {0}));
      },
      "cross_entropy: logits of shape [0, 5] hold no positions"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        cross_entropy(zeros({2, 0, 5}, dtype()), from_vector<std::int64_t>({}, {2, 0}));
      },
      "cross_entropy: logits of shape [2, 0, 5] hold no positions"));

  // scaled_dot_product_attention, with B, H, Tq or Tk zero in turn.
  const std::vector<std::vector<Shape>> qkv = {{{0, 2, 3, 4}, {0, 2, 5, 4}, {0, 2, 5, 6}},
                                               {{1, 0, 3, 4}, {1, 0, 5, 4}, {1, 0, 5, 6}},
                                               {{1, 2, 0, 4}, {1, 2, 5, 4}, {1, 2, 5, 6}},
                                               {{1, 2, 3, 4}, {1, 2, 0, 4}, {1, 2, 0, 6}}};
  for (const auto& s : qkv) {
    SCOPED_TRACE(shape_str(s[0]) + " " + shape_str(s[1]));
    Tensor q = zeros(s[0], dtype()), k = zeros(s[1], dtype()), v = zeros(s[2], dtype());
    const char* expected = "q, k and v need at least one batch entry, head, query and key";
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { scaled_dot_product_attention(q, k, v); }, expected));
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { attention_reference(q, k, v, {}, true); }, expected));
    EXPECT_TRUE(throws_with<std::invalid_argument>(
        [&] { scaled_dot_product_attention_bthd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)); }, expected));
  }
  nn::MultiHeadAttention attention(8, 2);
  attention.to(dtype());
  for (const Shape& shape : {Shape{0, 3, 8}, Shape{2, 0, 8}}) {
    Tensor x = zeros(shape, dtype());
    EXPECT_TRUE(throws_with<std::invalid_argument>(
        [&] { attention.forward(x, x); },
        "MultiHeadAttention (query " + shape_str(shape) + ", key_value " + shape_str(shape) +
            "): scaled_dot_product_attention_packed: q, k and v need at least one batch entry"));
    // The packed op itself, on the [B, T, 3 * 8] its projection would give.
    EXPECT_TRUE(throws_with<std::invalid_argument>(
        [&] {
          scaled_dot_product_attention_packed(zeros({shape[0], shape[1], 24}, dtype()), 2);
        },
        "scaled_dot_product_attention_packed: q, k and v need at least one batch entry, head, query and key, got qkv "
        "of shape " +
            shape_str({shape[0], shape[1], 24})));
  }
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        scaled_dot_product_attention_packed(zeros({2, 3, 0}, dtype()), 2);
      },
      "scaled_dot_product_attention_packed: q and k have head dim 0 (qkv of shape [2, 3, 0], 2 heads)"));
}

TEST_P(NumericEdge, RowWiseOpsGiveEmptyResultsForNoRows) {
  // layer_norm, linear and softmax work row by row: no rows is a well-defined empty answer
  // (only an empty normalised dim is an error, in tests/ops/bad_calls_test.cpp).
  for (const Shape& shape : {Shape{0, 4}, Shape{2, 0, 4}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = zeros(shape, dtype()).requires_grad_();
    Tensor w = ones({4}, dtype()).requires_grad_(), b = zeros({4}, dtype()).requires_grad_();
    Tensor y = layer_norm(x, w, b);
    EXPECT_EQ(y.shape(), shape);
    y.sum().backward();
    EXPECT_EQ(x.grad().shape(), shape);
    EXPECT_TRUE(test::all_close(w.grad(), {0, 0, 0, 0}, 0));  // an empty sum over rows
    EXPECT_TRUE(test::all_close(b.grad(), {0, 0, 0, 0}, 0));
    Shape out = shape;
    out.back() = 3;
    EXPECT_EQ(linear(x, ones({3, 4}, dtype())).shape(), out);
    EXPECT_EQ(softmax(x, -1).shape(), shape);
  }
}

}  // namespace
}  // namespace ag
