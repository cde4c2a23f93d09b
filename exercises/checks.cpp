// The checks of every exercise (checks.h). Each is independent of the learner's answer: a value
// by the library's own op (itself held to finite differences and PyTorch by the test suite),
// central finite differences, an identity the answer must keep (rows sum to 1), or a property
// (a masked key gets exactly 0; a later token changes no earlier output).
#include "checks.h"

#include <attograd/attograd.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "workbook.h"

namespace workbook {

namespace {

using ag::Tensor;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The coordinates of flat index i in shape s, as "[1, 0, 3]".
std::string coordinates(std::int64_t i, const ag::Shape& s) {
  std::vector<std::int64_t> at(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    at[d] = i % s[d];
    i /= s[d];
  }
  return fmt::format("[{}]", fmt::join(at, ", "));
}

// got against want, element by element: passes when |got - want| <= tol (1 + |want|), with an
// infinity equal only to itself and NaN never equal. On failure, names the input, the first
// element at fault, and both values.
std::optional<Text> compare(const Text& input, const Tensor& got, const Tensor& want, double tol) {
  if (!got.defined())
    return Text{fmt::format("{}: your function returned an undefined tensor", input.en),
                fmt::format("{}：你的函数返回了未定义的张量", input.zh)};
  if (got.shape() != want.shape())
    return Text{
        fmt::format("{}: expected shape {}, got {}", input.en, ag::shape_str(want.shape()), ag::shape_str(got.shape())),
        fmt::format("{}：形状应为 {}，实际为 {}", input.zh, ag::shape_str(want.shape()), ag::shape_str(got.shape()))};
  std::vector<double> g = got.to(ag::kFloat64).to_vector<double>(), w = want.to(ag::kFloat64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    bool same = std::isinf(w[i]) ? g[i] == w[i] : std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i]));
    if (same) continue;
    std::string at = coordinates(static_cast<std::int64_t>(i), want.shape());
    return Text{fmt::format("{}: element {}: expected {:.6g}, got {:.6g}", input.en, at, w[i], g[i]),
                fmt::format("{}：元素 {}：应为 {:.6g}，实际为 {:.6g}", input.zh, at, w[i], g[i])};
  }
  return std::nullopt;
}

std::optional<Text> compare_numbers(const Text& what, const std::vector<double>& got, const std::vector<double>& want,
                                    double tol) {
  if (got.size() != want.size())
    return Text{fmt::format("{}: expected {} numbers, got {}", what.en, want.size(), got.size()),
                fmt::format("{}：应有 {} 个数，实际为 {} 个", what.zh, want.size(), got.size())};
  return compare(what, ag::tensor(got, {static_cast<std::int64_t>(got.size())}, ag::kFloat64),
                 ag::tensor(want, {static_cast<std::int64_t>(want.size())}, ag::kFloat64), tol);
}

// A float64 gradcheck of f at inputs; the library's report (in English) on failure.
std::optional<Text> check_gradients(const ag::TensorFunction& f, const std::vector<Tensor>& inputs) {
  ag::GradcheckResult r = ag::gradcheck(f, inputs);
  if (r.passed) return std::nullopt;
  return Text{"the gradient of your function disagrees with finite differences:\n" + r.report,
              "你的函数的梯度与有限差分不一致（以下为英文报告）：\n" + r.report};
}

Tensor randn(const ag::Shape& shape, std::uint64_t seed) {
  ag::Generator gen(seed);
  return ag::randn(shape, gen, ag::kFloat64);
}

Tensor leaf(const ag::Shape& shape, std::uint64_t seed) { return randn(shape, seed).requires_grad_(); }

// Fails unless the answer got is finite everywhere: names the first element that is not.
std::optional<Text> finite(const Text& input, const Tensor& got) {
  std::vector<double> g = got.to(ag::kFloat64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!std::isfinite(g[i])) {
      std::string at = coordinates(static_cast<std::int64_t>(i), got.shape());
      return Text{fmt::format("{}: element {} is {}", input.en, at, g[i]),
                  fmt::format("{}：元素 {} 为 {}", input.zh, at, g[i])};
    }
  return std::nullopt;
}

// Fails unless got is defined and has the shape want.
std::optional<Text> expect_shape(const Text& input, const Tensor& got, const ag::Shape& want) {
  if (got.defined() && got.shape() == want) return std::nullopt;
  std::string en = got.defined() ? ag::shape_str(got.shape()) : "an undefined tensor";
  std::string zh = got.defined() ? ag::shape_str(got.shape()) : "未定义的张量";
  return Text{fmt::format("{}: expected shape {}, got {}", input.en, ag::shape_str(want), en),
              fmt::format("{}：形状应为 {}，实际为 {}", input.zh, ag::shape_str(want), zh)};
}

// x [B, T, D] split into heads by a loop: out[b, h, t, c] = x[b, t, h * D/H + c].
Tensor split_by_loop(const Tensor& x, std::int64_t heads) {
  std::int64_t b = x.size(0), t = x.size(1), d = x.size(2), dh = d / heads;
  std::vector<double> xs = x.to_vector<double>(), out(xs.size());
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t s = 0; s < t; ++s)
        for (std::int64_t c = 0; c < dh; ++c)
          out[static_cast<std::size_t>(((i * heads + h) * t + s) * dh + c)] =
              xs[static_cast<std::size_t>((i * t + s) * d + h * dh + c)];
  return ag::tensor(out, {b, heads, t, dh}, ag::kFloat64);
}

// t [B, T, ...] with its tokens in a new order: token i of the result is token order[i] of t.
Tensor gather_rows(const Tensor& t, const std::vector<std::int64_t>& order) {
  std::vector<Tensor> rows;
  for (std::int64_t i : order) rows.push_back(t.slice(1, i, i + 1));
  return ag::cat(rows, 1);
}

// ---- 1. The notes' worked example ------------------------------------------------------------

// The example's tensors: the query of "cat" and the keys of "The", "cat", "sat".
Tensor example_q() { return ag::tensor({1, 0, 1, 0}, {1, 4}, ag::kFloat64); }
Tensor example_k() { return ag::tensor({1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0}, {3, 4}, ag::kFloat64); }
Tensor example_scores() { return example_q().matmul(example_k().t()).reshape({3}); }

Exercise worked_example_exercise() {
  const Text where{"docs/attention.md, \"A worked example, and two figures checked\"",
                   "docs/attention.md 的 “A worked example, and two figures checked”"};
  auto hint = [&](const char* en, const char* zh) {
    return Text{fmt::format("{}; {}", en, where.en), fmt::format("{}；{}", zh, where.zh)};
  };
  return {
      1,
      {"the notes' worked example, by hand", "笔记中的手算例子"},
      "01_worked_example.cpp",
      {
          {"1.scores",
           {"the scores q . k_j", "分数 q · k_j"},
           hint("a dot product adds the products of matching entries: (1,0,1,0) . (1,1,0,0) = 1",
                "点积是对应元素乘积之和：(1,0,1,0) · (1,1,0,0) = 1"),
           [] {
             return compare_numbers({"scores", "分数"}, worked_example().scores, example_scores().to_vector<double>(),
                                    0);
           }},
          {"1.scaled",
           {"the scores divided by sqrt(d_k)", "分数除以 sqrt(d_k)"},
           hint("divide by the square root of d_k = 4, which is 2, not by 4", "除以 d_k = 4 的平方根，即 2，而不是 4"),
           [] {
             return compare_numbers({"scaled scores", "缩放后的分数"}, worked_example().scaled,
                                    (example_scores() / 2.0).to_vector<double>(), 0);
           }},
          {"1.weights",
           {"the weights, to 4 decimals", "权重（4 位小数）"},
           hint("softmax: e^(s_j) / sum_i e^(s_i) over the three scaled scores",
                "softmax：e^(s_j) / Σ_i e^(s_i)，对三个缩放后的分数计算"),
           [] {
             return compare_numbers({"weights", "权重"}, worked_example().weights,
                                    ag::softmax(example_scores() / 2.0, 0).to_vector<double>(), 5e-4);
           }},
      },
  };
}

// ---- 2. Stable softmax -----------------------------------------------------------------------

Exercise stable_softmax_exercise() {
  const std::string doc = "docs/softmax.md, \"The forward pass, and why it subtracts the maximum\"";
  const std::string doc_zh = "docs/softmax.md 的 “The forward pass, and why it subtracts the maximum”";
  return {
      2,
      {"a softmax that does not overflow", "不会溢出的 softmax"},
      "02_stable_softmax.cpp",
      {
          {"2.equals-softmax",
           {"equal to ag::softmax on a [3, 5] input and a [2, 3, 4] one",
            "在 [3, 5] 与 [2, 3, 4] 的输入上与 ag::softmax 相等"},
           {"softmax(x)_i = exp(x_i) / sum_j exp(x_j), over the last dim; " + doc,
            "softmax(x)_i = exp(x_i) / Σ_j exp(x_j)，沿最后一维；" + doc_zh},
           []() -> std::optional<Text> {
             for (const ag::Shape& s : {ag::Shape{3, 5}, ag::Shape{2, 3, 4}}) {
               Tensor x = randn(s, 21);
               if (auto f = compare({"x " + ag::shape_str(s), "输入 x " + ag::shape_str(s)}, stable_softmax(x),
                                    ag::softmax(x, -1), 1e-12))
                 return f;
             }
             return std::nullopt;
           }},
          {"2.rows-sum-to-1",
           {"each row sums to 1", "每行之和为 1"},
           {"divide by the sum over the last dim (keep that dim: sum(-1, true))",
            "除以沿最后一维的和（保留该维：sum(-1, true)）"},
           []() -> std::optional<Text> {
             Tensor x = randn({4, 7}, 22);
             return compare({"row sums", "每行之和"}, stable_softmax(x).sum(-1), ag::ones({4}, ag::kFloat64), 1e-12);
           }},
          {"2.large-scores",
           {"scores near 1000 stay finite", "接近 1000 的分数仍为有限值"},
           {"exp(1000) is inf in float64: subtract each row's max first, softmax(x) = softmax(x - c); " + doc,
            "float64 中 exp(1000) 为 inf：先减去每行的最大值，softmax(x) = softmax(x − c)；" + doc_zh},
           []() -> std::optional<Text> {
             Tensor x = randn({2, 5}, 23) + 1000.0;
             Tensor y = stable_softmax(x);
             if (auto f = finite({"x near 1000", "接近 1000 的输入 x"}, y)) return f;
             return compare({"x near 1000", "接近 1000 的输入 x"}, y, ag::softmax(x, -1), 1e-12);
           }},
          {"2.minus-inf",
           {"a −inf score gets weight exactly 0", "−inf 的分数得到恰好为 0 的权重"},
           {"exp(−inf − max) = 0 exactly; keep −inf as it is", "exp(−inf − max) 恰好为 0；不要改动 −inf"},
           []() -> std::optional<Text> {
             Tensor x = ag::tensor({0.5, -kInf, 1.5, -kInf, 2.0, 0.0}, {2, 3}, ag::kFloat64);
             return compare({"x with −inf", "含 −inf 的输入 x"}, stable_softmax(x), ag::softmax(x, -1), 1e-12);
           }},
          {"2.gradcheck",
           {"float64 gradcheck on a [3, 4] input", "[3, 4] 输入上的 float64 梯度检验"},
           {"write it with ops (exp, sum, max, -, /), so that autograd can differentiate it",
            "用算子（exp、sum、max、-、/）来写，自动微分才能求导"},
           [] {
             return check_gradients([](const std::vector<Tensor>& in) { return stable_softmax(in[0]); },
                                    {leaf({3, 4}, 24)});
           }},
      },
  };
}

// ---- 3. Softmax backward ---------------------------------------------------------------------

Exercise softmax_backward_exercise() {
  const std::string doc = "docs/softmax.md, \"Backward without the Jacobian\"";
  const std::string doc_zh = "docs/softmax.md 的 “Backward without the Jacobian”";
  return {
      3,
      {"softmax's backward, derived by hand", "手推 softmax 的反向传播"},
      "03_softmax_backward.cpp",
      {
          {"3.autograd",
           {"equal to autograd's gradient of ag::softmax, on [3, 5] and [2, 2, 6]",
            "在 [3, 5] 与 [2, 2, 6] 上与自动微分的梯度相等"},
           {"dx_j = sum_i dy_i y_i (δ_ij − y_j) = y_j (dy_j − sum_i dy_i y_i); " + doc,
            "dx_j = Σ_i dy_i y_i (δ_ij − y_j) = y_j (dy_j − Σ_i dy_i y_i)；" + doc_zh},
           []() -> std::optional<Text> {
             for (const ag::Shape& s : {ag::Shape{3, 5}, ag::Shape{2, 2, 6}}) {
               Tensor x = leaf(s, 31), dy = randn(s, 32);
               Tensor y = ag::softmax(x, -1);
               Tensor want = ag::grad({y}, {x}, {dy})[0];
               if (auto f = compare({"y, dy " + ag::shape_str(s), "y、dy " + ag::shape_str(s)},
                                    softmax_backward(y.detach(), dy), want, 1e-12))
                 return f;
             }
             return std::nullopt;
           }},
          {"3.finite-differences",
           {"equal to central finite differences of ag::softmax", "与 ag::softmax 的中心差分相等"},
           {"dL/dx_j ≈ (L(x + h e_j) − L(x − h e_j)) / 2h with L = sum(dy * softmax(x)); " + doc,
            "dL/dx_j ≈ (L(x + h e_j) − L(x − h e_j)) / 2h，其中 L = Σ dy · softmax(x)；" + doc_zh},
           []() -> std::optional<Text> {
             Tensor x = randn({2, 5}, 33), dy = randn({2, 5}, 34);
             std::vector<double> xs = x.to_vector<double>(), numeric(xs.size());
             const double h = 1e-6;
             for (std::size_t j = 0; j < xs.size(); ++j) {
               auto loss = [&](double shift) {
                 std::vector<double> moved = xs;
                 moved[j] += shift;
                 return (ag::softmax(ag::tensor(moved, {2, 5}, ag::kFloat64), -1) * dy).sum().item();
               };
               numeric[j] = (loss(h) - loss(-h)) / (2 * h);
             }
             return compare({"y, dy [2, 5]", "y、dy [2, 5]"}, softmax_backward(ag::softmax(x, -1), dy),
                            ag::tensor(numeric, {2, 5}, ag::kFloat64), 1e-6);
           }},
          {"3.rows-sum-to-0",
           {"each row of dx sums to 0", "dx 每行之和为 0"},
           {"softmax ignores a shift shared by a row, so the gradient has no component along (1, ..., 1)",
            "softmax 对同一行的整体平移不敏感，所以梯度在 (1, ..., 1) 方向上的分量为 0"},
           []() -> std::optional<Text> {
             Tensor y = ag::softmax(randn({3, 6}, 35), -1), dy = randn({3, 6}, 36);
             return compare({"row sums of dx", "dx 每行之和"}, softmax_backward(y, dy).sum(-1),
                            ag::zeros({3}, ag::kFloat64), 1e-12);
           }},
      },
  };
}

// ---- 4. Masked softmax -----------------------------------------------------------------------

Exercise masked_softmax_exercise() {
  const std::string doc = "docs/attention.md, \"Why −inf, and not 0\"";
  const std::string doc_zh = "docs/attention.md 的 “Why −inf, and not 0”";
  // Scores [2, 4, 4] with a causal mask and a padding mask that hides key 3 of batch 1.
  auto scores = [] { return randn({2, 4, 4}, 41); };
  auto keep = [] { return ag::logical_and(ag::causal_mask(4, 4), ag::key_padding_mask({4, 3}, 4).reshape({2, 1, 4})); };
  return {
      4,
      {"masks: −inf against 0", "掩码：−inf 与 0"},
      "04_masked_softmax.cpp",
      {
          {"4.shape",
           {"the output has the scores' shape", "输出与分数形状相同"},
           {"softmax keeps the shape: one weight per score", "softmax 不改变形状：每个分数对应一个权重"},
           [=] {
             return expect_shape({"scores [2, 4, 4]", "分数 [2, 4, 4]"}, masked_softmax(scores(), keep()), {2, 4, 4});
           }},
          {"4.masked-zero",
           {"every masked key gets weight exactly 0", "每个被遮住的键权重恰好为 0"},
           {"a masked score of 0 still gives exp(0) = 1; it must be −inf, so that exp gives 0; " + doc,
            "被遮住的分数若为 0，exp(0) = 1 仍有权重；必须设为 −inf，exp 才得 0；" + doc_zh},
           [=]() -> std::optional<Text> {
             Tensor got = masked_softmax(scores(), keep());
             // got where masked, 0 where kept, against all zeros: a masked weight that is not 0 fails.
             Tensor at_masked = got.masked_fill(keep(), 0.0);
             return compare({"scores [2, 4, 4], causal and padded", "分数 [2, 4, 4]，因果加填充掩码"}, at_masked,
                            ag::zeros({2, 4, 4}, ag::kFloat64), 0);
           }},
          {"4.equals-softmax",
           {"equal to ag::softmax of the masked scores", "与 ag::softmax 对遮住后分数的结果相等"},
           {"fill with −inf where keep is false (ag::masked_fill, ag::logical_not), then softmax",
            "在 keep 为 false 处填入 −inf（ag::masked_fill、ag::logical_not），再做 softmax"},
           [=]() -> std::optional<Text> {
             Tensor s = scores();
             return compare({"scores [2, 4, 4], causal and padded", "分数 [2, 4, 4]，因果加填充掩码"},
                            masked_softmax(s, keep()), ag::softmax(s.masked_fill(ag::logical_not(keep()), -kInf), -1),
                            1e-12);
           }},
          {"4.causality",
           {"changing a masked (future) score changes no weight", "改变被遮住（未来）位置的分数不改变任何权重"},
           {"a masked score must not reach the output at all: −inf, then exp = 0",
            "被遮住的分数完全不能影响输出：−inf，exp 后为 0"},
           [=]() -> std::optional<Text> {
             Tensor s = scores();
             Tensor moved = s + randn({2, 4, 4}, 42).masked_fill(keep(), 0.0) * 10.0;  // only masked scores move
             return compare({"scores with the masked ones changed", "改变了被遮住分数后的分数"},
                            masked_softmax(moved, keep()), masked_softmax(s, keep()), 0);
           }},
          {"4.fully-masked",
           {"a query with every key masked gets zeros, not NaN", "所有键都被遮住的查询得到 0，而不是 NaN"},
           {"−inf − (−inf) is NaN: shift that row by 0 and divide by 1 instead; docs/attention.md, \"Fully masked "
            "rows\"",
            "−inf − (−inf) 是 NaN：这一行改为减 0、除以 1；docs/attention.md 的 “Fully masked rows”"},
           []() -> std::optional<Text> {
             Tensor s = randn({3, 4}, 43);
             Tensor keep_rows = ag::tensor({1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}, {3, 4}, ag::kFloat64).to(ag::kBool);
             Tensor want = ag::softmax(s.masked_fill(ag::logical_not(keep_rows), -kInf), -1);  // row 1: zeros
             return compare({"scores [3, 4], row 1 all masked", "分数 [3, 4]，第 1 行全部遮住"},
                            masked_softmax(s, keep_rows), want, 1e-12);
           }},
          {"4.gradcheck",
           {"float64 gradcheck on [2, 4, 4] with the masks", "带掩码的 [2, 4, 4] 上的 float64 梯度检验"},
           {"write it with ops, so that autograd can differentiate it", "用算子来写，自动微分才能求导"},
           [=] {
             return check_gradients([=](const std::vector<Tensor>& in) { return masked_softmax(in[0], keep()); },
                                    {scores().requires_grad_()});
           }},
      },
  };
}

// ---- 5. Scaled dot-product attention ---------------------------------------------------------

// The library's attention on [B, T, d] tensors (it takes [B, H, T, d]: one head).
Tensor library_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  return ag::scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), {}, causal).output.squeeze(1);
}

Exercise attention_exercise() {
  const std::string doc = "docs/attention.md, \"Scaled dot-product attention\"";
  const std::string doc_zh = "docs/attention.md 的 “Scaled dot-product attention”";
  // q [2, 3, 4], k and v over 5 keys (dv = 6); for causal ones, 5 queries.
  return {
      5,
      {"scaled dot-product attention, forward", "缩放点积注意力（前向）"},
      "05_attention.cpp",
      {
          {"5.shape",
           {"the output is [B, Tq, dv]", "输出形状为 [B, Tq, dv]"},
           {"S = Q Kᵀ is [B, Tq, Tk]; P V is [B, Tq, dv]: transpose K's last two dims (k.transpose(-2, -1))",
            "S = Q Kᵀ 的形状为 [B, Tq, Tk]；P V 为 [B, Tq, dv]：转置 K 的最后两维（k.transpose(-2, -1)）"},
           [] {
             return expect_shape({"q [2, 3, 4], k [2, 5, 4], v [2, 5, 6]", "q [2, 3, 4]、k [2, 5, 4]、v [2, 5, 6]"},
                                 attention(randn({2, 3, 4}, 51), randn({2, 5, 4}, 52), randn({2, 5, 6}, 53), false),
                                 {2, 3, 6});
           }},
          {"5.equals-library",
           {"equal to ag::scaled_dot_product_attention", "与 ag::scaled_dot_product_attention 相等"},
           {"softmax(Q Kᵀ / sqrt(d)) V: divide the scores by sqrt(d), d the query's size; " + doc,
            "softmax(Q Kᵀ / sqrt(d)) V：分数除以 sqrt(d)，d 为查询向量的维数；" + doc_zh},
           []() -> std::optional<Text> {
             Tensor q = randn({2, 3, 4}, 51), k = randn({2, 5, 4}, 52), v = randn({2, 5, 6}, 53);
             return compare({"q [2, 3, 4], k [2, 5, 4], v [2, 5, 6]", "q [2, 3, 4]、k [2, 5, 4]、v [2, 5, 6]"},
                            attention(q, k, v, false), library_attention(q, k, v, false), 1e-12);
           }},
          {"5.causal",
           {"with causal, equal to the library's causal attention", "causal 时与库的因果注意力相等"},
           {"mask the scores with −inf where j > i before the softmax (exercise 4; ag::causal_mask)",
            "softmax 之前在 j > i 处把分数设为 −inf（练习 4；ag::causal_mask）"},
           []() -> std::optional<Text> {
             Tensor q = randn({2, 5, 4}, 54), k = randn({2, 5, 4}, 55), v = randn({2, 5, 3}, 56);
             return compare({"q, k [2, 5, 4], v [2, 5, 3], causal", "q、k [2, 5, 4]，v [2, 5, 3]，因果"},
                            attention(q, k, v, true), library_attention(q, k, v, true), 1e-12);
           }},
          {"5.causality",
           {"changing the last token's key and value changes no earlier output",
            "改变最后一个词元的键和值，不改变更早位置的输出"},
           {"a query must not see a later key: the causal mask", "查询不能看到之后的键：因果掩码"},
           []() -> std::optional<Text> {
             Tensor q = randn({1, 5, 4}, 57), k = randn({1, 5, 4}, 58), v = randn({1, 5, 3}, 59);
             Tensor k2 = ag::cat({k.slice(1, 0, 4), randn({1, 1, 4}, 60)}, 1);
             Tensor v2 = ag::cat({v.slice(1, 0, 4), randn({1, 1, 3}, 61)}, 1);
             return compare({"outputs 0..3 after changing token 4", "改变词元 4 之后的输出 0..3"},
                            attention(q, k2, v2, true).slice(1, 0, 4), attention(q, k, v, true).slice(1, 0, 4), 1e-12);
           }},
          {"5.within-values",
           {"each output lies between the smallest and largest value", "每个输出都在值的最小与最大之间"},
           {"the weights are positive and sum to 1, so each output is a weighted mean of the values",
            "权重为正且和为 1，所以每个输出都是值的加权平均"},
           []() -> std::optional<Text> {
             Tensor v = randn({1, 6, 2}, 63);
             Tensor got = attention(randn({1, 4, 3}, 62), randn({1, 6, 3}, 64), v, false);
             Tensor lo = v.amin(1, true).broadcast_to({1, 4, 2}), hi = v.amax(1, true).broadcast_to({1, 4, 2});
             std::vector<double> g = got.to_vector<double>(), l = lo.to_vector<double>(), h = hi.to_vector<double>();
             for (std::size_t i = 0; i < g.size(); ++i)
               if (!(g[i] >= l[i] - 1e-12 && g[i] <= h[i] + 1e-12)) {
                 std::string at = coordinates(static_cast<std::int64_t>(i), got.shape());
                 return Text{
                     fmt::format("output element {} is {:.6g}, outside the values' range [{:.6g}, {:.6g}]", at, g[i],
                                 l[i], h[i]),
                     fmt::format("输出元素 {} 为 {:.6g}，不在值的范围 [{:.6g}, {:.6g}] 之内", at, g[i], l[i], h[i])};
               }
             return std::nullopt;
           }},
          {"5.gradcheck",
           {"float64 gradcheck in q, k and v, causal", "对 q、k、v 的 float64 梯度检验（因果）"},
           {"write it with ops, so that autograd can differentiate it", "用算子来写，自动微分才能求导"},
           [] {
             return check_gradients([](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], true); },
                                    {leaf({1, 3, 2}, 65), leaf({1, 3, 2}, 66), leaf({1, 3, 3}, 67)});
           }},
      },
  };
}

// ---- 6. Attention's backward -------------------------------------------------------------------

Exercise attention_backward_exercise() {
  const std::string doc = "docs/attention.md, \"The backward pass of the fused op\"";
  const std::string doc_zh = "docs/attention.md 的 “The backward pass of the fused op”";
  // One head: q [3, 4], k [5, 4], v [5, 2], dO [3, 2]; autograd's gradients through the fused op.
  struct Case {
    Tensor q, k, v, dout, dq, dk, dv;
  };
  auto make = [] {
    Case c{leaf({3, 4}, 71), leaf({5, 4}, 72), leaf({5, 2}, 73), randn({3, 2}, 74), {}, {}, {}};
    auto four = [](const Tensor& t) { return t.unsqueeze(0).unsqueeze(0); };
    Tensor out = ag::scaled_dot_product_attention(four(c.q), four(c.k), four(c.v)).output;
    std::vector<Tensor> g = ag::grad({out}, {c.q, c.k, c.v}, {four(c.dout)});
    c.dq = g[0], c.dk = g[1], c.dv = g[2];
    return c;
  };
  const Text input{"q [3, 4], k [5, 4], v [5, 2], dO [3, 2]", "q [3, 4]、k [5, 4]、v [5, 2]、dO [3, 2]"};
  auto grads = [](const Case& c) { return attention_backward(c.q.detach(), c.k.detach(), c.v.detach(), c.dout); };
  return {
      6,
      {"attention's backward: dQ, dK, dV", "注意力的反向传播：dQ、dK、dV"},
      "06_attention_backward.cpp",
      {
          {"6.dv",
           {"dV equals autograd's", "dV 与自动微分的结果相等"},
           {"O = P V, so dV = Pᵀ dO (the matmul rule, docs/autograd.md (c)); " + doc,
            "O = P V，所以 dV = Pᵀ dO（矩阵乘法的规则，docs/autograd.md (c)）；" + doc_zh},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"dV, " + input.en, "dV，" + input.zh}, grads(c).dv, c.dv, 1e-12);
           }},
          {"6.dq",
           {"dQ equals autograd's", "dQ 与自动微分的结果相等"},
           {"dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = scale · dS K, with scale = 1/sqrt(d); " + doc,
            "dP = dO Vᵀ，dS = P ⊙ (dP − rowsum(dP ⊙ P))，dQ = scale · dS K，其中 scale = 1/sqrt(d)；" + doc_zh},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"dQ, " + input.en, "dQ，" + input.zh}, grads(c).dq, c.dq, 1e-12);
           }},
          {"6.dk",
           {"dK equals autograd's", "dK 与自动微分的结果相等"},
           {"dK = scale · dSᵀ Q: the other operand of S = scale · Q Kᵀ; " + doc,
            "dK = scale · dSᵀ Q：S = scale · Q Kᵀ 的另一个因子；" + doc_zh},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"dK, " + input.en, "dK，" + input.zh}, grads(c).dk, c.dk, 1e-12);
           }},
          {"6.keys-sum-to-0",
           {"the rows of dK sum to 0", "dK 的各行之和为 0"},
           {"each row of dS sums to 0 (a softmax gradient), so sum_j dK_j = scale · (sum_j dS_ij) Q = 0",
            "dS 的每一行之和为 0（softmax 的梯度），所以 Σ_j dK_j = scale · (Σ_j dS_ij) Q = 0"},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"the sum of dK's rows", "dK 各行之和"}, grads(c).dk.sum(0), ag::zeros({4}, ag::kFloat64),
                            1e-12);
           }},
      },
  };
}

// ---- 7. From averaging the past to a masked softmax --------------------------------------------

// W [t, t] by a loop: 1/(i+1) at j <= i, 0 after.
Tensor average_weights_by_loop(std::int64_t t) {
  std::vector<double> w(static_cast<std::size_t>(t * t), 0.0);
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = 0; j <= i; ++j) w[static_cast<std::size_t>(i * t + j)] = 1.0 / static_cast<double>(i + 1);
  return ag::tensor(w, {t, t}, ag::kFloat64);
}

Exercise average_the_past_exercise() {
  const std::string doc = "docs/attention.md, \"Causal mask\"";
  const std::string doc_zh = "docs/attention.md 的 “Causal mask”";
  return {
      7,
      {"from averaging the past to a masked softmax", "从对过去取平均到带掩码的 softmax"},
      "07_average_the_past.cpp",
      {
          {"7.lower-triangular",
           {"W is lower triangular: exactly 0 above the diagonal", "W 是下三角矩阵：对角线以上恰好为 0"},
           {"score −inf above the diagonal (ag::causal_mask is true on and below it), so exp gives 0; " + doc,
            "对角线以上的分数设为 −inf（ag::causal_mask 在对角线及以下为 true），exp 后为 0；" + doc_zh},
           []() -> std::optional<Text> {
             Tensor w = causal_average_weights(5);
             if (auto f = expect_shape({"W for T = 5", "T = 5 时的 W"}, w, {5, 5})) return f;
             return compare({"W above the diagonal, T = 5", "T = 5 时 W 对角线以上"},
                            w.masked_fill(ag::causal_mask(5, 5), 0.0), ag::zeros({5, 5}, ag::kFloat64), 0);
           }},
          {"7.weights",
           {"row t of W holds 1/(t+1) at columns 0..t", "W 的第 t 行在第 0..t 列为 1/(t+1)"},
           {"softmax of t+1 equal scores gives each 1/(t+1)", "t+1 个相等的分数做 softmax，每个得到 1/(t+1)"},
           []() -> std::optional<Text> {
             return compare({"W for T = 5", "T = 5 时的 W"}, causal_average_weights(5), average_weights_by_loop(5),
                            1e-15);
           }},
          {"7.means",
           {"the means equal a loop over the past", "平均值与逐个累加的结果相等"},
           {"O = W X: row t of O is the mean of rows 0..t of X", "O = W X：O 的第 t 行是 X 第 0..t 行的平均"},
           []() -> std::optional<Text> {
             Tensor x = randn({6, 3}, 75);
             std::vector<double> xs = x.to_vector<double>(), means(xs.size(), 0.0);
             for (std::size_t t = 0; t < 6; ++t)
               for (std::size_t c = 0; c < 3; ++c) {
                 for (std::size_t s = 0; s <= t; ++s) means[t * 3 + c] += xs[s * 3 + c];
                 means[t * 3 + c] /= static_cast<double>(t + 1);
               }
             return compare({"x [6, 3]", "x [6, 3]"}, average_the_past(x), ag::tensor(means, {6, 3}, ag::kFloat64),
                            1e-12);
           }},
          {"7.causality",
           {"changing the last token changes no earlier mean", "改变最后一个词元不改变更早位置的平均值"},
           {"row t of W must be 0 after column t", "W 的第 t 行在第 t 列之后必须为 0"},
           []() -> std::optional<Text> {
             Tensor x = randn({6, 3}, 76);
             Tensor changed = ag::cat({x.slice(0, 0, 5), randn({1, 3}, 77)}, 0);
             return compare({"means 0..4 after changing token 5", "改变词元 5 之后的平均值 0..4"},
                            average_the_past(changed).slice(0, 0, 5), average_the_past(x).slice(0, 0, 5), 1e-15);
           }},
      },
  };
}

// ---- 8. Multi-head split and merge -------------------------------------------------------------

Exercise heads_exercise() {
  const std::string doc = "docs/attention.md, \"Heads: split and merge\"";
  const std::string doc_zh = "docs/attention.md 的 “Heads: split and merge”";
  const Text input{"x [2, 3, 6], 2 heads", "x [2, 3, 6]，2 个头"};
  return {
      8,
      {"multi-head attention's split and merge", "多头注意力的拆分与合并"},
      "08_heads.cpp",
      {
          {"8.shape",
           {"split gives [B, H, T, D/H], merge gives [B, T, D]", "split 得到 [B, H, T, D/H]，merge 得到 [B, T, D]"},
           {"[2, 3, 6] with 2 heads is [2, 2, 3, 3]", "[2, 3, 6] 分成 2 个头是 [2, 2, 3, 3]"},
           [=]() -> std::optional<Text> {
             if (auto f = expect_shape({"split, " + input.en, "split，" + input.zh},
                                       split_heads(randn({2, 3, 6}, 81), 2), {2, 2, 3, 3}))
               return f;
             return expect_shape({"merge of [2, 2, 3, 3]", "合并 [2, 2, 3, 3]"}, merge_heads(randn({2, 2, 3, 3}, 82)),
                                 {2, 3, 6});
           }},
          {"8.split",
           {"split puts x[b, t, h·D/H + c] at [b, h, t, c]", "split 把 x[b, t, h·D/H + c] 放到 [b, h, t, c]"},
           {"reshape to [B, T, H, D/H] first, then swap the token and head dims (transpose(1, 2)); " + doc,
            "先 reshape 成 [B, T, H, D/H]，再交换词元维和头维（transpose(1, 2)）；" + doc_zh},
           [=]() -> std::optional<Text> {
             Tensor x = randn({2, 3, 6}, 83);
             return compare(input, split_heads(x, 2), split_by_loop(x, 2), 0);
           }},
          {"8.round-trip",
           {"merge(split(x)) = x", "merge(split(x)) = x"},
           {"merge undoes split's two steps in the other order", "merge 以相反的顺序撤销 split 的两步"},
           [=]() -> std::optional<Text> {
             Tensor x = randn({2, 3, 6}, 84);
             return compare(input, merge_heads(split_heads(x, 2)), x, 0);
           }},
          {"8.heads-apart",
           {"attention on the split heads equals each head's channels attended apart",
            "在拆开的头上做注意力，等于对每个头的通道分别做注意力"},
           {"head h must hold channels h·D/H .. (h+1)·D/H − 1 of the same token",
            "第 h 个头必须是同一个词元的第 h·D/H .. (h+1)·D/H − 1 个通道"},
           [=]() -> std::optional<Text> {
             Tensor q = randn({2, 4, 6}, 85), k = randn({2, 4, 6}, 86), v = randn({2, 4, 6}, 87);
             Tensor got = merge_heads(
                 ag::scaled_dot_product_attention(split_heads(q, 3), split_heads(k, 3), split_heads(v, 3)).output);
             std::vector<Tensor> per_head;
             for (std::int64_t h = 0; h < 3; ++h) {
               auto cut = [h](const Tensor& t) { return t.slice(2, 2 * h, 2 * h + 2).unsqueeze(1); };
               per_head.push_back(ag::scaled_dot_product_attention(cut(q), cut(k), cut(v)).output.squeeze(1));
             }
             return compare({"q, k, v [2, 4, 6], 3 heads", "q、k、v [2, 4, 6]，3 个头"}, got, ag::cat(per_head, 2),
                            1e-12);
           }},
          {"8.gradcheck",
           {"float64 gradcheck through split and merge", "经过 split 与 merge 的 float64 梯度检验"},
           {"write them with reshape and transpose, so that autograd can differentiate them",
            "用 reshape 与 transpose 来写，自动微分才能求导"},
           [] {
             Tensor w = randn({2, 2, 3, 3}, 89);
             return check_gradients(
                 [w](const std::vector<Tensor>& in) { return merge_heads(split_heads(in[0], 2) * w); },
                 {leaf({2, 3, 6}, 88)});
           }},
      },
  };
}

// ---- 9. Sinusoidal positions -------------------------------------------------------------------

Exercise positions_exercise() {
  const std::string doc = "docs/attention.md, \"Positions\"";
  const std::string doc_zh = "docs/attention.md 的 “Positions”";
  return {
      9,
      {"sinusoidal positions", "正弦位置编码"},
      "09_positions.cpp",
      {
          {"9.shape",
           {"the table is [T, D]", "表的形状为 [T, D]"},
           {"one row per position, one column per channel", "每个位置一行，每个通道一列"},
           [] {
             return expect_shape({"T = 7, D = 6", "T = 7，D = 6"}, sinusoidal_positions(7, 6), {7, 6});
           }},
          {"9.formula",
           {"every entry follows the formula", "每个元素都符合公式"},
           {"PE[t, 2i] = sin(t / 10000^(2i/D)), PE[t, 2i+1] = cos(t / 10000^(2i/D)): the exponent is 2i/D; " + doc,
            "PE[t, 2i] = sin(t / 10000^(2i/D))，PE[t, 2i+1] = cos(t / 10000^(2i/D))：指数是 2i/D；" + doc_zh},
           []() -> std::optional<Text> {
             std::vector<double> want(7 * 6);
             for (int t = 0; t < 7; ++t)
               for (int c = 0; c < 6; ++c) {
                 double angle = t * std::exp(-std::log(10000.0) * (c - c % 2) / 6.0);
                 want[static_cast<std::size_t>(t * 6 + c)] = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
               }
             return compare({"T = 7, D = 6", "T = 7，D = 6"}, sinusoidal_positions(7, 6),
                            ag::tensor(want, {7, 6}, ag::kFloat64), 1e-12);
           }},
          {"9.library",
           {"equal to nn::SinusoidalPositionalEncoding's table", "与 nn::SinusoidalPositionalEncoding 的表相等"},
           {"the same formula, for T = 11 and D = 8", "同一个公式，T = 11，D = 8"},
           []() -> std::optional<Text> {
             ag::nn::SinusoidalPositionalEncoding library(11, 8);
             return compare({"T = 11, D = 8", "T = 11，D = 8"}, sinusoidal_positions(11, 8),
                            library.table.to(ag::kFloat64), 1e-12);
           }},
          {"9.unit-pairs",
           {"each (sin, cos) pair has length 1", "每对 (sin, cos) 的长度为 1"},
           {"sin² + cos² = 1: channels 2i and 2i+1 share one angle",
            "sin² + cos² = 1：第 2i 与 2i+1 个通道用同一个角度"},
           []() -> std::optional<Text> {
             Tensor pe = sinusoidal_positions(5, 6);
             Tensor pairs = pe.reshape({5, 3, 2}).pow(2.0).sum(-1);
             return compare({"T = 5, D = 6", "T = 5，D = 6"}, pairs, ag::ones({5, 3}, ag::kFloat64), 1e-12);
           }},
          {"9.order-matters",
           {"with the table added, permuting the tokens changes more than the outputs' order",
            "加上位置表后，打乱词元改变的不只是输出的顺序"},
           {"without positions self-attention only permutes its outputs; PE[t] must differ from row to row",
            "没有位置信息时，自注意力只会同样地打乱输出；PE[t] 每一行都应不同"},
           []() -> std::optional<Text> {
             Tensor x = randn({1, 5, 6}, 91);
             const std::vector<std::int64_t> order{4, 2, 0, 3, 1};
             auto self_attend = [](const Tensor& t) {
               return ag::scaled_dot_product_attention(t.unsqueeze(1), t.unsqueeze(1), t.unsqueeze(1))
                   .output.squeeze(1);
             };
             auto permute = [&](const Tensor& t) { return gather_rows(t, order); };
             Tensor pe = sinusoidal_positions(5, 6).unsqueeze(0);
             // Without positions: permuting the input permutes the output (the library's op, as a check).
             Tensor blind = self_attend(permute(x)) - permute(self_attend(x));
             Tensor seeing = self_attend(permute(x) + pe) - permute(self_attend(x + pe));
             double moved = seeing.pow(2.0).sum().item();
             if (blind.pow(2.0).sum().item() < 1e-20 && moved > 1e-6) return std::nullopt;
             return Text{
                 fmt::format("x [1, 5, 6] permuted by (4, 2, 0, 3, 1): with the table added the outputs still only "
                             "permute (squared change {:.3g})",
                             moved),
                 fmt::format(
                     "x [1, 5, 6] 按 (4, 2, 0, 3, 1) 打乱：加上位置表后输出仍只是打乱了顺序（变化的平方和 {:.3g}）",
                     moved)};
           }},
      },
  };
}

// ---- 10. Layer norm's backward -----------------------------------------------------------------

Exercise layer_norm_backward_exercise() {
  const std::string doc = "docs/layer_norm.md, \"Backward\"";
  const std::string doc_zh = "docs/layer_norm.md 的 “Backward”";
  struct Case {
    Tensor x, w, dy, dx, dw, db;
  };
  // x [4, 5], w and b [5], eps 1e-5; autograd's gradients through the fused op.
  auto make = [] {
    Case c{leaf({4, 5}, 101), leaf({5}, 102), randn({4, 5}, 103), {}, {}, {}};
    Tensor b = leaf({5}, 104);
    std::vector<Tensor> g = ag::grad({ag::layer_norm(c.x, c.w, b, 1e-5)}, {c.x, c.w, b}, {c.dy});
    c.dx = g[0], c.dw = g[1], c.db = g[2];
    return c;
  };
  auto grads = [](const Case& c) { return layer_norm_backward(c.x.detach(), c.w.detach(), c.dy, 1e-5); };
  const Text input{"x [4, 5], w [5], dy [4, 5]", "x [4, 5]、w [5]、dy [4, 5]"};
  return {
      10,
      {"layer norm's backward", "层规范化的反向传播"},
      "10_layer_norm_backward.cpp",
      {
          {"10.db",
           {"db equals autograd's", "db 与自动微分的结果相等"},
           {"y = x̂ ⊙ w + b: b is added to every row, so db sums dy over the rows",
            "y = x̂ ⊙ w + b：b 加到每一行上，所以 db 是 dy 对各行求和"},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"db, " + input.en, "db，" + input.zh}, grads(c).db, c.db, 1e-12);
           }},
          {"10.dw",
           {"dw equals autograd's", "dw 与自动微分的结果相等"},
           {"dw sums dy ⊙ x̂ over the rows; " + doc, "dw 是 dy ⊙ x̂ 对各行求和；" + doc_zh},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"dw, " + input.en, "dw，" + input.zh}, grads(c).dw, c.dw, 1e-12);
           }},
          {"10.dx",
           {"dx equals autograd's", "dx 与自动微分的结果相等"},
           {"three paths: direct, through the mean, through the spread: dx = rstd (g − mean(g) − x̂ mean(g ⊙ x̂)); " +
                doc,
            "三条路径：直接、经过均值、经过方差：dx = rstd (g − mean(g) − x̂ mean(g ⊙ x̂))；" + doc_zh},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"dx, " + input.en, "dx，" + input.zh}, grads(c).dx, c.dx, 1e-12);
           }},
          {"10.rows-sum-to-0",
           {"each row of dx sums to 0", "dx 的每行之和为 0"},
           {"shifting a row by a constant changes no x̂, so dx has no component along (1, ..., 1)",
            "整行加上同一个常数不改变 x̂，所以 dx 在 (1, ..., 1) 方向上没有分量"},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare({"row sums of dx", "dx 每行之和"}, grads(c).dx.sum(-1), ag::zeros({4}, ag::kFloat64),
                            1e-12);
           }},
          {"10.small-example",
           {"docs/layer_norm.md's small example", "docs/layer_norm.md 中的小例子"},
           {"D = 3, x = [1, 2, 6], w = 1, dy = [1, 0, 0]: dx = [0.17635, −0.22043, 0.04409]; docs/layer_norm.md, "
            "\"Step 3\"",
            "D = 3，x = [1, 2, 6]，w = 1，dy = [1, 0, 0]：dx = [0.17635, −0.22043, 0.04409]；docs/layer_norm.md 的 "
            "“Step 3”"},
           []() -> std::optional<Text> {
             LayerNormGrads g =
                 layer_norm_backward(ag::tensor({1, 2, 6}, {1, 3}, ag::kFloat64), ag::ones({3}, ag::kFloat64),
                                     ag::tensor({1, 0, 0}, {1, 3}, ag::kFloat64), 1e-5);
             return compare({"x = [1, 2, 6], dy = [1, 0, 0]", "x = [1, 2, 6]，dy = [1, 0, 0]"}, g.dx,
                            ag::tensor({0.17635, -0.22043, 0.04409}, {1, 3}, ag::kFloat64), 5e-5);
           }},
      },
  };
}

// ---- 11. Cross-entropy's backward --------------------------------------------------------------

Exercise cross_entropy_backward_exercise() {
  const std::string doc = "docs/cross_entropy.md, \"The gradient: softmax minus one-hot\"";
  const std::string doc_zh = "docs/cross_entropy.md 的 “The gradient: softmax minus one-hot”";
  // Logits [5, 4]; row 2 ignored (target −100); dloss 1.5.
  auto targets = [] { return ag::tensor({3, 0, -100, 1, 3}, {5}, ag::kInt64); };
  const Text input{"logits [5, 4], row 2 ignored, dloss 1.5", "logits [5, 4]，第 2 行被忽略，dloss 1.5"};
  return {
      11,
      {"cross-entropy's backward", "交叉熵的反向传播"},
      "11_cross_entropy_backward.cpp",
      {
          {"11.autograd",
           {"equal to autograd's gradient of ag::cross_entropy", "与 ag::cross_entropy 的自动微分梯度相等"},
           {"dx_rc = dloss (softmax(x_r)_c − [c = t_r]) / N, N the rows not ignored; " + doc,
            "dx_rc = dloss (softmax(x_r)_c − [c = t_r]) / N，N 为未被忽略的行数；" + doc_zh},
           [=]() -> std::optional<Text> {
             Tensor x = leaf({5, 4}, 111);
             Tensor want = ag::grad({ag::cross_entropy(x, targets())}, {x}, {ag::scalar(1.5, ag::kFloat64)})[0];
             return compare(input, cross_entropy_backward(x.detach(), targets(), 1.5), want, 1e-12);
           }},
          {"11.rows-sum-to-0",
           {"each counted row sums to 0", "每个参与计算的行之和为 0"},
           {"softmax sums to 1 and the one-hot to 1", "softmax 之和为 1，独热向量之和也为 1"},
           [=]() -> std::optional<Text> {
             Tensor dx = cross_entropy_backward(randn({5, 4}, 112), targets(), 1.5);
             return compare({"row sums, " + input.en, "每行之和，" + input.zh}, dx.to(ag::kFloat64).sum(-1),
                            ag::zeros({5}, ag::kFloat64), 1e-12);
           }},
          {"11.ignored-row",
           {"the ignored row gets exactly 0", "被忽略的行恰好为 0"},
           {"an ignored row is not in the loss at all; docs/cross_entropy.md, \"ignore_index, and the mean over "
            "counted rows\"",
            "被忽略的行完全不在损失之中；docs/cross_entropy.md 的 “ignore_index, and the mean over counted rows”"},
           [=]() -> std::optional<Text> {
             Tensor dx = cross_entropy_backward(randn({5, 4}, 113), targets(), 1.5);
             return compare({"row 2, " + input.en, "第 2 行，" + input.zh}, dx.to(ag::kFloat64).slice(0, 2, 3),
                            ag::zeros({1, 4}, ag::kFloat64), 0);
           }},
          {"11.large-logits",
           {"logits near 1000 stay finite", "接近 1000 的 logits 仍为有限值"},
           {"compute the softmax after subtracting each row's max (exercise 2)",
            "先减去每行的最大值再算 softmax（练习 2）"},
           [=]() -> std::optional<Text> {
             Tensor x = randn({5, 4}, 114) + 1000.0;
             Tensor got = cross_entropy_backward(x, targets(), 1.5);
             if (auto f = finite({"logits near 1000", "接近 1000 的 logits"}, got)) return f;
             Tensor leaf_x = x.detach().requires_grad_();
             Tensor want =
                 ag::grad({ag::cross_entropy(leaf_x, targets())}, {leaf_x}, {ag::scalar(1.5, ag::kFloat64)})[0];
             return compare({"logits near 1000", "接近 1000 的 logits"}, got, want, 1e-12);
           }},
      },
  };
}

// ---- 12. Additive attention --------------------------------------------------------------------

// Additive attention by loops over every (i, j), in double.
Tensor additive_by_loop(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w_q, const Tensor& w_k,
                        const Tensor& a) {
  std::int64_t tq = q.size(0), tk = k.size(0), dq = q.size(1), dk = k.size(1), dv = v.size(1), h = a.size(0);
  std::vector<double> Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>(),
                      WQ = w_q.to_vector<double>(), WK = w_k.to_vector<double>(), A = a.to_vector<double>();
  std::vector<double> out(static_cast<std::size_t>(tq * dv), 0.0);
  for (std::int64_t i = 0; i < tq; ++i) {
    std::vector<double> score(static_cast<std::size_t>(tk));
    for (std::int64_t j = 0; j < tk; ++j) {
      double s = 0;
      for (std::int64_t r = 0; r < h; ++r) {
        double hidden = 0;
        for (std::int64_t c = 0; c < dq; ++c)
          hidden += WQ[static_cast<std::size_t>(r * dq + c)] * Q[static_cast<std::size_t>(i * dq + c)];
        for (std::int64_t c = 0; c < dk; ++c)
          hidden += WK[static_cast<std::size_t>(r * dk + c)] * K[static_cast<std::size_t>(j * dk + c)];
        s += A[static_cast<std::size_t>(r)] * std::tanh(hidden);
      }
      score[static_cast<std::size_t>(j)] = s;
    }
    double largest = *std::max_element(score.begin(), score.end()), total = 0;
    for (double& s : score) total += (s = std::exp(s - largest));
    for (std::int64_t j = 0; j < tk; ++j)
      for (std::int64_t c = 0; c < dv; ++c)
        out[static_cast<std::size_t>(i * dv + c)] +=
            score[static_cast<std::size_t>(j)] / total * V[static_cast<std::size_t>(j * dv + c)];
  }
  return ag::tensor(out, {tq, dv}, ag::kFloat64);
}

Exercise additive_attention_exercise() {
  // q [3, 4], k [5, 2], v [5, 3], W_q [6, 4], W_k [6, 2], a [6]: queries and keys of other sizes.
  auto inputs = [] {
    return std::vector<Tensor>{leaf({3, 4}, 121), leaf({5, 2}, 122), leaf({5, 3}, 123),
                               leaf({6, 4}, 124), leaf({6, 2}, 125), leaf({6}, 126)};
  };
  const Text input{"q [3, 4], k [5, 2], v [5, 3], W_q [6, 4], W_k [6, 2], a [6]",
                   "q [3, 4]、k [5, 2]、v [5, 3]、W_q [6, 4]、W_k [6, 2]、a [6]"};
  auto run = [](const std::vector<Tensor>& in) { return additive_attention(in[0], in[1], in[2], in[3], in[4], in[5]); };
  return {
      12,
      {"additive (Bahdanau) attention", "加性（Bahdanau）注意力"},
      "12_additive_attention.cpp",
      {
          {"12.shape",
           {"the output is [Tq, dv]", "输出形状为 [Tq, dv]"},
           {"scores [Tq, Tk], softmax over the keys, then weights [Tq, Tk] times values [Tk, dv]",
            "分数 [Tq, Tk]，对键做 softmax，再用权重 [Tq, Tk] 乘以值 [Tk, dv]"},
           [=] {
             return expect_shape(input, run(inputs()), {3, 3});
           }},
          {"12.values",
           {"equal to a loop over every (query, key) pair", "与逐个 (查询, 键) 循环计算的结果相等"},
           {"score_ij = a · tanh(W_q q_i + W_k k_j): the tanh comes before the product with a; docs/experiments.md, "
            "\"The bottleneck with a recurrent encoder\"",
            "score_ij = a · tanh(W_q q_i + W_k k_j)：先 tanh，再与 a 做点积；docs/experiments.md 的 “The bottleneck "
            "with a "
            "recurrent encoder”"},
           [=]() -> std::optional<Text> {
             std::vector<Tensor> in = inputs();
             return compare(input, run(in), additive_by_loop(in[0], in[1], in[2], in[3], in[4], in[5]), 1e-12);
           }},
          {"12.gradcheck",
           {"float64 gradcheck in all six inputs", "对全部六个输入的 float64 梯度检验"},
           {"write it with ops (matmul, tanh, softmax), so that autograd can differentiate it",
            "用算子（matmul、tanh、softmax）来写，自动微分才能求导"},
           [=] { return check_gradients(run, inputs()); }},
      },
  };
}

// ---- 13. An RNN, and backpropagation through time ----------------------------------------------

// h_T of the tanh RNN by loops, in double.
Tensor rnn_by_loop(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b) {
  std::int64_t steps = x.size(0), in = x.size(1), hidden = h0.size(0);
  std::vector<double> X = x.to_vector<double>(), h = h0.to_vector<double>(), WX = w_x.to_vector<double>(),
                      WH = w_h.to_vector<double>(), B = b.to_vector<double>();
  for (std::int64_t t = 0; t < steps; ++t) {
    std::vector<double> next(static_cast<std::size_t>(hidden));
    for (std::int64_t i = 0; i < hidden; ++i) {
      double a = B[static_cast<std::size_t>(i)];
      for (std::int64_t j = 0; j < in; ++j)
        a += WX[static_cast<std::size_t>(i * in + j)] * X[static_cast<std::size_t>(t * in + j)];
      for (std::int64_t j = 0; j < hidden; ++j)
        a += WH[static_cast<std::size_t>(i * hidden + j)] * h[static_cast<std::size_t>(j)];
      next[static_cast<std::size_t>(i)] = std::tanh(a);
    }
    h = next;
  }
  return ag::tensor(h, {hidden}, ag::kFloat64);
}

Exercise rnn_exercise() {
  const std::string doc = "docs/recurrent.md, \"Backpropagation through time\"";
  const std::string doc_zh = "docs/recurrent.md 的 “Backpropagation through time”";
  // T = 4 steps of I = 3 inputs, H = 5; autograd's gradients through the loop unrolled with ops.
  struct Case {
    Tensor x, h0, w_x, w_h, b, dh;
    std::vector<Tensor> grads;  // x, h0, w_x, w_h, b
  };
  auto make = [] {
    Case c{
        leaf({4, 3}, 131), leaf({5}, 132), leaf({5, 3}, 133), leaf({5, 5}, 134), leaf({5}, 135), randn({5}, 136), {}};
    Tensor h = c.h0;
    for (std::int64_t t = 0; t < 4; ++t)
      h = (c.w_x.matmul(c.x.slice(0, t, t + 1).t()).squeeze(1) + c.w_h.matmul(h.unsqueeze(1)).squeeze(1) + c.b).tanh();
    c.grads = ag::grad({h}, {c.x, c.h0, c.w_x, c.w_h, c.b}, {c.dh});
    return c;
  };
  auto mine = [](const Case& c) {
    return rnn_backward(c.x.detach(), c.h0.detach(), c.w_x.detach(), c.w_h.detach(), c.b.detach(), c.dh);
  };
  const Text input{"x [4, 3], h0 [5], W_x [5, 3], W_h [5, 5], b [5], dh_T [5]",
                   "x [4, 3]、h0 [5]、W_x [5, 3]、W_h [5, 5]、b [5]、dh_T [5]"};
  auto gradient_check = [=](const char* id, const char* en, const char* zh, const char* hint_en, const char* hint_zh,
                            std::size_t which, Tensor RnnGrads::*field) {
    return Check{id,
                 {fmt::format("{} equals autograd's", en), fmt::format("{} 与自动微分的结果相等", zh)},
                 {fmt::format("{}; {}", hint_en, doc), fmt::format("{}；{}", hint_zh, doc_zh)},
                 [=]() -> std::optional<Text> {
                   Case c = make();
                   return compare({fmt::format("{}, {}", en, input.en), fmt::format("{}，{}", zh, input.zh)},
                                  mine(c).*field, c.grads[which], 1e-12);
                 }};
  };
  return {
      13,
      {"an RNN step, and backpropagation through time", "RNN 的一步，与通过时间反向传播"},
      "13_rnn.cpp",
      {
          {"13.forward",
           {"the last state equals a loop over the steps", "最后的状态与逐步循环计算的结果相等"},
           {"h_t = tanh(W_x x_t + W_h h_{t−1} + b), from h_0, T times",
            "h_t = tanh(W_x x_t + W_h h_{t−1} + b)，从 h_0 开始，共 T 步"},
           [=]() -> std::optional<Text> {
             Case c = make();
             return compare(input,
                            rnn_last_state(c.x.detach(), c.h0.detach(), c.w_x.detach(), c.w_h.detach(), c.b.detach()),
                            rnn_by_loop(c.x, c.h0, c.w_x, c.w_h, c.b), 1e-12);
           }},
          gradient_check("13.db", "db", "db",
                         "da_t = dh_t ⊙ (1 − h_t²) at each step, and db adds the da_t of every step",
                         "每一步 da_t = dh_t ⊙ (1 − h_t²)，db 是各步 da_t 之和", 4, &RnnGrads::db),
          gradient_check("13.dw_x", "dW_x", "dW_x", "dW_x adds da_t x_tᵀ over the steps", "dW_x 是各步 da_t x_tᵀ 之和",
                         2, &RnnGrads::dw_x),
          gradient_check("13.dw_h", "dW_h", "dW_h", "dW_h adds da_t h_{t−1}ᵀ over the steps",
                         "dW_h 是各步 da_t h_{t−1}ᵀ 之和", 3, &RnnGrads::dw_h),
          gradient_check("13.dx", "dx", "dx", "row t of dx is W_xᵀ da_t", "dx 的第 t 行是 W_xᵀ da_t", 0, &RnnGrads::dx),
          gradient_check("13.dh0", "dh_0", "dh_0", "the gradient passed back a step is dh_{t−1} = W_hᵀ da_t",
                         "向前一步传递的梯度是 dh_{t−1} = W_hᵀ da_t", 1, &RnnGrads::dh0),
      },
  };
}

// ---- 14. An attention layer, trained to look a word up ------------------------------------------

// b examples of n pairs: n distinct keys out of key_symbols, each value uniform over
// value_symbols, the query one of the keys and the target its value.
struct LookupBatch {
  Tensor keys, values, query, target;
};
LookupBatch lookup_batch(std::int64_t b, std::int64_t n, std::int64_t key_symbols, std::int64_t value_symbols,
                         ag::Generator& gen) {
  std::vector<std::int64_t> keys, values, query, target;
  for (std::int64_t i = 0; i < b; ++i) {
    std::vector<std::int64_t> pool(static_cast<std::size_t>(key_symbols));
    for (std::int64_t s = 0; s < key_symbols; ++s) pool[static_cast<std::size_t>(s)] = s;
    for (std::int64_t j = 0; j < n; ++j) {  // the first n of a shuffle
      std::swap(pool[static_cast<std::size_t>(j)], pool[static_cast<std::size_t>(gen.integer(j, key_symbols))]);
      keys.push_back(pool[static_cast<std::size_t>(j)]);
      values.push_back(gen.integer(0, value_symbols));
    }
    std::size_t pick = static_cast<std::size_t>(i * n + gen.integer(0, n));
    query.push_back(keys[pick]);
    target.push_back(values[pick]);
  }
  return {ag::from_vector(keys, {b, n}), ag::from_vector(values, {b, n}), ag::from_vector(query, {b}),
          ag::from_vector(target, {b})};
}

// The task the statement names: 16 key symbols, 16 value symbols, n = 4 pairs, d = 32.
constexpr std::int64_t kLookupSymbols = 16, kLookupPairs = 4, kLookupWidth = 32;
constexpr int kLookupSteps = 400, kLookupBatch = 64, kLookupTests = 1000;
constexpr double kLookupAccuracy = 0.95;

// The share of `batch` that `model` answers right (the argmax of its logits is the target).
double lookup_accuracy(const Lookup& model, const LookupBatch& batch) {
  ag::NoGradGuard no_grad;
  std::vector<std::int64_t>
      got = model.forward(batch.keys, batch.values, batch.query).argmax(-1).to_vector<std::int64_t>(),
      want = batch.target.to_vector<std::int64_t>();
  std::size_t right = 0;
  for (std::size_t i = 0; i < got.size(); ++i) right += got[i] == want[i];
  return static_cast<double>(right) / static_cast<double>(got.size());
}

Exercise lookup_exercise() {
  const std::string doc = "docs/attention.md, \"Queries, keys and values\"";
  const std::string doc_zh = "docs/attention.md 的 “Queries, keys and values”";
  return {
      14,
      {"an attention layer as a module, trained to look a word up", "注意力层作为模块，训练它查字典"},
      "14_lookup.cpp",
      {
          {"14.shape",
           {"the logits are [B, value_symbols]", "logits 的形状为 [B, value_symbols]"},
           {"q [B, 1, d] against k [B, n, d] gives weights [B, 1, n]; their sum of v [B, n, d] is [B, 1, d]; "
            "squeeze dim 1 before w_o",
            "q [B, 1, d] 与 k [B, n, d] 得到权重 [B, 1, n]；它对 v [B, n, d] 的加权和为 [B, 1, d]；"
            "在 w_o 之前去掉第 1 维"},
           [] {
             ag::Generator gen(141);
             Lookup model(8, 6, 4, gen);
             LookupBatch batch = lookup_batch(3, 5, 8, 6, gen);
             return expect_shape({"8 key symbols, 6 value symbols, d = 4; 3 examples of 5 pairs",
                                  "8 个键符号、6 个值符号，d = 4；3 个样本，每个 5 对"},
                                 model.forward(batch.keys, batch.values, batch.query), {3, 6});
           }},
          {"14.order",
           {"shuffling the pairs changes no logit", "打乱各对的顺序不改变任何 logit"},
           {"the weights come from q · k_j alone and the output is a sum over j: use nothing but the pairs' "
            "contents (no position, no index j); " +
                doc,
            "权重只由 q · k_j 决定，输出是对 j 的求和：只用各对的内容（不用位置，也不用下标 j）；" + doc_zh},
           [=]() -> std::optional<Text> {
             ag::Generator gen(142);
             Lookup model(8, 6, 4, gen);
             model.to(ag::kFloat64);
             LookupBatch batch = lookup_batch(3, 5, 8, 6, gen);
             std::vector<std::int64_t> order{3, 0, 4, 2, 1};
             auto shuffled = [&](const Tensor& t) {
               std::vector<Tensor> columns;
               for (std::int64_t j : order) columns.push_back(t.slice(1, j, j + 1));
               return ag::cat(columns, 1);
             };
             return compare({"the logits with the pairs in the order 3, 0, 4, 2, 1, float64",
                             "各对按 3、0、4、2、1 的顺序排列时的 logits，float64"},
                            model.forward(shuffled(batch.keys), shuffled(batch.values), batch.query),
                            model.forward(batch.keys, batch.values, batch.query), 1e-12);
           }},
          {"14.every-part",
           {"every part gets a gradient", "每个部件都得到梯度"},
           {"q, k_j and v_j all enter the output: q · k_j gives the weights over dim -1 (the keys), and the weights "
            "multiply v",
            "q、k_j、v_j 都应进入输出：q · k_j 给出在最后一维（各个键）上的权重，权重再乘以 v"},
           [=]() -> std::optional<Text> {
             ag::Generator gen(143);
             Lookup model(8, 6, 4, gen);
             model.to(ag::kFloat64);
             LookupBatch batch = lookup_batch(3, 5, 8, 6, gen);
             ag::cross_entropy(model.forward(batch.keys, batch.values, batch.query), batch.target).backward();
             auto named = model.named_parameters();
             if (named.empty())
               return Text{"the module registered no parameter: register each part with register_module",
                           "模块没有注册任何参数：用 register_module 注册每个部件"};
             for (const auto& [name, p] : named) {
               bool moved = false;
               if (p.grad().defined())
                 for (double g : p.grad().to_vector<double>()) moved = moved || g != 0;
               if (!moved)
                 return Text{fmt::format("parameter {} got no gradient (or only zeros)", name),
                             fmt::format("参数 {} 没有得到梯度（或梯度全为 0）", name)};
             }
             return std::nullopt;
           }},
          {"14.trained",
           {fmt::format("trained, it answers at least {:.0f}% of {} new examples right", 100 * kLookupAccuracy,
                        kLookupTests),
            fmt::format("训练之后，在 {} 个新样本上至少答对 {:.0f}%", kLookupTests, 100 * kLookupAccuracy)},
           {"k_j from the pair's key and v_j from its value (through their own embeddings), p = softmax over the "
            "keys (dim -1) of q · k_j / √d, o = Σ_j p_j v_j; " +
                doc,
            "k_j 来自这一对的键，v_j 来自它的值（各经自己的嵌入），p 是 q · k_j / √d 在各个键（最后一维）上的 "
            "softmax，o = Σ_j p_j v_j；" +
                doc_zh},
           [=]() -> std::optional<Text> {
             ag::Generator gen(144);
             Lookup model(kLookupSymbols, kLookupSymbols, kLookupWidth, gen);
             ag::optim::AdamW optimizer(model.parameters(), {.lr = 1e-2});
             for (int step = 0; step < kLookupSteps; ++step) {
               LookupBatch batch = lookup_batch(kLookupBatch, kLookupPairs, kLookupSymbols, kLookupSymbols, gen);
               optimizer.zero_grad();
               ag::cross_entropy(model.forward(batch.keys, batch.values, batch.query), batch.target).backward();
               optimizer.step();
             }
             ag::Generator fresh(145);
             double accuracy = lookup_accuracy(
                 model, lookup_batch(kLookupTests, kLookupPairs, kLookupSymbols, kLookupSymbols, fresh));
             if (accuracy >= kLookupAccuracy) return std::nullopt;
             return Text{fmt::format("after {} steps, {:.1f}% of {} new examples right (chance is {:.1f}%)",
                                     kLookupSteps, 100 * accuracy, kLookupTests, 100.0 / kLookupSymbols),
                         fmt::format("训练 {} 步之后，{} 个新样本答对 {:.1f}%（随机猜为 {:.1f}%）", kLookupSteps,
                                     kLookupTests, 100 * accuracy, 100.0 / kLookupSymbols)};
           }},
      },
  };
}

// ---- 15. A KV cache ----------------------------------------------------------------------------

Exercise kv_cache_exercise() {
  const std::string doc = "docs/training.md, \"Sampling: `minigpt sample`\" (KV cache)";
  const std::string doc_zh = "docs/training.md 的 “Sampling: `minigpt sample`”（KV cache）";
  // One head: d = 5, dk = 3, dv = 4, T = 6 tokens.
  struct Case {
    Tensor x, w_q, w_k, w_v;
  };
  auto make = [] { return Case{randn({6, 5}, 151), randn({3, 5}, 152), randn({3, 5}, 153), randn({4, 5}, 154)}; };
  // Every step's output, stacked: [T, dv]; the cache as it is after the last step.
  auto decode = [](const Case& c, KvCache& cache) {
    cache = KvCache{c.w_q, c.w_k, c.w_v, {}, {}};
    std::vector<Tensor> out;
    for (std::int64_t t = 0; t < c.x.size(0); ++t) {
      Tensor o = cache.step(c.x.slice(0, t, t + 1).squeeze(0));
      if (!o.defined() || o.shape() != ag::Shape{c.w_v.size(0)}) return Tensor{};
      out.push_back(o.unsqueeze(0));
    }
    return ag::cat(out, 0);
  };
  const Text input{"x [6, 5], W_q [3, 5], W_k [3, 5], W_v [4, 5], six steps",
                   "x [6, 5]、W_q [3, 5]、W_k [3, 5]、W_v [4, 5]，共六步"};
  return {
      15,
      {"a KV cache that decodes equal to the full forward", "KV 缓存：逐个解码与整段前向相等"},
      "15_kv_cache.cpp",
      {
          {"15.first-step",
           {"the first step returns its own value, W_v x_0", "第一步返回它自己的值 W_v x_0"},
           {"with one key in the cache its weight is 1: append k_t and v_t before attending",
            "缓存中只有一个键时它的权重为 1：先把 k_t、v_t 加入缓存，再计算注意力"},
           [=]() -> std::optional<Text> {
             Case c = make();
             KvCache cache{c.w_q, c.w_k, c.w_v, {}, {}};
             Tensor x0 = c.x.slice(0, 0, 1).squeeze(0);
             return compare({"step 0's output, " + input.en, "第 0 步的输出，" + input.zh}, cache.step(x0),
                            c.w_v.matmul(x0.unsqueeze(1)).squeeze(1), 1e-12);
           }},
          {"15.cache",
           {"after t steps the cache holds the t keys and values, one row per token",
            "t 步之后缓存中有 t 个键和值，每个词元一行"},
           {"row t of keys is W_k x_t, of values W_v x_t: append with ag::cat along dim 0",
            "keys 的第 t 行是 W_k x_t，values 的第 t 行是 W_v x_t：用 ag::cat 沿第 0 维追加"},
           [=]() -> std::optional<Text> {
             Case c = make();
             KvCache cache;
             decode(c, cache);
             if (auto f = compare({"the cached keys, " + input.en, "缓存的键，" + input.zh}, cache.keys,
                                  c.x.matmul(c.w_k.t()), 1e-12))
               return f;
             return compare({"the cached values, " + input.en, "缓存的值，" + input.zh}, cache.values,
                            c.x.matmul(c.w_v.t()), 1e-12);
           }},
          {"15.equals-full",
           {"the steps' outputs equal the whole sequence's causal attention", "各步的输出与整段序列的因果注意力相等"},
           {"o_t = softmax(q_t · k_j / √dk over j ≤ t) weighting v_j, with q_t = W_q x_t: the cache holds exactly "
            "the keys a causal mask lets row t see; " +
                doc,
            "o_t 是 v_j 以 softmax(q_t · k_j / √dk，j ≤ t) 为权重的加权和，其中 q_t = W_q x_t：缓存里恰好是"
            "因果掩码允许第 t 行看到的那些键；" +
                doc_zh},
           [=]() -> std::optional<Text> {
             Case c = make();
             KvCache cache;
             Tensor got = decode(c, cache);
             Tensor want = library_attention(c.x.matmul(c.w_q.t()).unsqueeze(0), c.x.matmul(c.w_k.t()).unsqueeze(0),
                                             c.x.matmul(c.w_v.t()).unsqueeze(0), true)
                               .squeeze(0);
             if (!got.defined())
               return Text{"a step returned an undefined tensor or not a vector [dv]",
                           "某一步返回了未定义的张量，或不是形状为 [dv] 的向量"};
             return compare({"the outputs of the six steps, " + input.en, "六步的输出，" + input.zh}, got, want, 1e-12);
           }},
      },
  };
}

}  // namespace

const std::vector<Exercise>& exercises() {
  static const std::vector<Exercise> all{worked_example_exercise(),
                                         stable_softmax_exercise(),
                                         softmax_backward_exercise(),
                                         masked_softmax_exercise(),
                                         attention_exercise(),
                                         attention_backward_exercise(),
                                         average_the_past_exercise(),
                                         heads_exercise(),
                                         positions_exercise(),
                                         layer_norm_backward_exercise(),
                                         cross_entropy_backward_exercise(),
                                         additive_attention_exercise(),
                                         rnn_exercise(),
                                         lookup_exercise(),
                                         kv_cache_exercise()};
  return all;
}

}  // namespace workbook
