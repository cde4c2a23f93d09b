// minimal_attention: the attention chapter's minimal implementation (its section 8), rebuilt
// step by step with attograd ops and the same names in the same order, then checked against
// the library's fused ag::scaled_dot_product_attention.
//
//   scores = q @ kᵀ / √d_k          [batch, heads, seq_len, seq_len]
//   scores = -inf where mask == 0     the causal mask keeps the lower triangle
//   attn   = softmax(scores, -1)      each row sums to 1
//   out    = attn @ v                 [batch, heads, seq_len, head_dim]
//
// Where attograd's own choices differ from that code (the mask's boolean convention, a fully
// masked row, where a mask lives) the program shows both; docs/attention.md, "The chapter's
// minimal implementation", says why. It exits 1 if any agreement it prints is not met, so it
// doubles as a test.
#include <attograd/attograd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>
#include <limits>

#include "common/cli.h"
#include "common/preflight.h"

namespace po = boost::program_options;
using ag::Tensor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
int g_failures = 0;

// --- the chapter's two functions, line for line -------------------------------------------

namespace book {

// q, k, v: [batch, heads, seq_len, head_dim]; mask: [1, 1, seq_len, seq_len] (or anything that
// broadcasts to the scores), 1 where a query may look, 0 where it may not.
std::pair<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Tensor& mask = {}) {
  double d_k = static_cast<double>(q.size(-1));
  Tensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(d_k);

  if (mask.defined()) {
    Tensor mask_is_zero = ag::logical_not(mask.to(ag::kBool));  // mask == 0
    scores = scores.masked_fill(mask_is_zero, -kInf);
  }

  Tensor attn = scores.softmax(-1);
  Tensor out = attn.matmul(v);
  return {out, attn};
}

// tril(ones(seq_len, seq_len)), then two leading dims of 1: [1, 1, seq_len, seq_len]. Row i
// has ones in columns 0..i: position i may look at itself and at everything before it.
Tensor build_causal_mask(std::int64_t seq_len) {
  std::vector<double> lower_triangle;
  for (std::int64_t i = 0; i < seq_len; ++i)
    for (std::int64_t j = 0; j < seq_len; ++j) lower_triangle.push_back(j <= i ? 1.0 : 0.0);
  Tensor mask = ag::from_vector(lower_triangle, {seq_len, seq_len});
  return mask.unsqueeze(0).unsqueeze(0);
}

}  // namespace book

// --- the other convention: the study notes' triu(ones, diagonal=1) marks the future ------

// 1 above the diagonal (j > i): the positions a query may NOT look at.
Tensor build_future_mask(std::int64_t seq_len) {
  std::vector<double> strict_upper;
  for (std::int64_t i = 0; i < seq_len; ++i)
    for (std::int64_t j = 0; j < seq_len; ++j) strict_upper.push_back(j > i ? 1.0 : 0.0);
  return ag::from_vector(strict_upper, {seq_len, seq_len}).unsqueeze(0).unsqueeze(0);
}

// The same steps with the opposite meaning of 1: fill where mask == 1.
Tensor attention_with_future_mask(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& future) {
  Tensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  scores = scores.masked_fill(future.to(ag::kBool), -kInf);  // mask == 1
  return scores.softmax(-1).matmul(v);
}

// --- checks ---------------------------------------------------------------------------------

double max_abs_diff(const Tensor& a, const Tensor& b) { return (a - b).pow(2).max().sqrt().item(); }

bool g_zh = false;  // --lang zh: the labels in Chinese

// A label in the reader's language.
const char* say(const char* en, const char* zh) { return g_zh ? zh : en; }

void agree(const std::string& what, double diff, double tol) {
  bool ok = diff <= tol;
  if (!ok) ++g_failures;
  if (g_zh)
    fmt::print("  {}：最大 |差| = {:.1e}  {}\n", what, diff, ok ? "一致" : "不一致");
  else
    fmt::print("  {:<58} max |difference| = {:.1e}  {}\n", what, diff, ok ? "ok" : "MISMATCH");
}

void show(const std::string& name, const Tensor& t) {
  fmt::print("{}\n{}\n", name, ag::to_string(t, {.precision = 4}));
}

struct Sizes {
  std::int64_t batch = 2, heads = 3, seq_len = 5, head_dim = 4, memory_len = 7;
  std::uint64_t seed = 1;
};

void causal_self_attention(const Sizes& s) {
  fmt::print("{}", say("=== Causal self-attention, step by step (float64) ===\n",
                       "=== 因果自注意力，逐步计算（float64） ===\n"));
  ag::Generator gen(s.seed);
  auto draw = [&](std::int64_t t) {
    return ag::randn({s.batch, s.heads, t, s.head_dim}, gen, ag::kFloat64).requires_grad_();
  };
  Tensor q = draw(s.seq_len), k = draw(s.seq_len), v = draw(s.seq_len);
  fmt::print(fmt::runtime(say("q, k, v: {} each = [batch, heads, seq_len, head_dim]\n\n",
                              "q、k、v：形状都是 {} = [batch, heads, seq_len, head_dim]\n\n")),
             ag::shape_str(q.shape()));

  Tensor mask = book::build_causal_mask(s.seq_len);
  show(say("book::build_causal_mask(seq_len), the [0, 0] slice (1 = may look):",
           "book::build_causal_mask(seq_len) 的 [0, 0] 切片（1 = 可以看）："),
       mask.squeeze(0).squeeze(0));
  auto [out, attn] = book::scaled_dot_product_attention(q, k, v, mask);
  show(say("\nattn[0, 0], batch 0 head 0 (each row sums to 1, nothing above the diagonal):",
           "\nattn[0, 0]，第 0 个样本第 0 个头（每行之和为 1，对角线以上全为 0）："),
       attn.detach().slice(0, 0, 1).slice(1, 0, 1).reshape({s.seq_len, s.seq_len}));
  fmt::print(fmt::runtime(say("out: {} = [batch, heads, seq_len, head_dim]\n\n",
                              "out：{} = [batch, heads, seq_len, head_dim]\n\n")),
             ag::shape_str(out.shape()));

  fmt::print("{}", say("Against ag::scaled_dot_product_attention, the fused kernel:\n",
                       "与融合算子 ag::scaled_dot_product_attention 对比：\n"));
  ag::AttentionResult fused = ag::scaled_dot_product_attention(q, k, v, {}, /*causal=*/true, /*need_weights=*/true);
  agree(say("out vs fused (causal = true)", "out 与融合算子（causal = true）"), max_abs_diff(out, fused.output), 1e-12);
  agree(say("attn vs fused weights", "attn 与融合算子的权重"), max_abs_diff(attn, fused.weights), 1e-12);
  // attograd's own mask convention: bool, true = may attend, the same lower triangle.
  ag::AttentionResult with_mask = ag::scaled_dot_product_attention(q, k, v, ag::causal_mask(s.seq_len, s.seq_len));
  agree(say("out vs fused with attn_mask = causal_mask(T, T)", "out 与融合算子（attn_mask = causal_mask(T, T)）"),
        max_abs_diff(out, with_mask.output), 1e-12);
  agree(say("build_causal_mask vs causal_mask(T, T) as 0/1", "build_causal_mask 与 0/1 形式的 causal_mask(T, T)"),
        max_abs_diff(mask.squeeze(0).squeeze(0), ag::causal_mask(s.seq_len, s.seq_len).to(ag::kFloat64)), 0.0);

  // Gradients: the composition's backward is the chain rule through matmul, masked_fill and
  // softmax; the fused op's is written by hand (docs/attention.md). Same upstream gradient.
  Tensor g = ag::randn(out.shape(), gen, ag::kFloat64);
  auto grads_of = [&](const Tensor& o) {
    for (Tensor* t : {&q, &k, &v}) t->zero_grad();
    (o * g).sum().backward();
    return std::vector<Tensor>{q.grad().clone(), k.grad().clone(), v.grad().clone()};
  };
  std::vector<Tensor> composed = grads_of(out), fused_grads = grads_of(fused.output);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i)
    agree(fmt::format(
              fmt::runtime(say("{} of the composition vs the fused backward", "组合写法的 {} 与融合算子的反向传播")),
              names[i]),
          max_abs_diff(composed[static_cast<std::size_t>(i)], fused_grads[static_cast<std::size_t>(i)]), 1e-12);

  fmt::print("{}",
             say("\nThe study notes' convention: triu(ones, diagonal=1) marks the future, filled where mask == 1:\n",
                 "\n笔记的写法：triu(ones, diagonal=1) 标出未来的位置，在 mask == 1 处填充：\n"));
  show(say("build_future_mask(seq_len), the [0, 0] slice (1 = hidden):",
           "build_future_mask(seq_len) 的 [0, 0] 切片（1 = 遮住）："),
       build_future_mask(s.seq_len).squeeze(0).squeeze(0));
  Tensor out_upper = attention_with_future_mask(q, k, v, build_future_mask(s.seq_len));
  agree(say("lower triangle kept vs upper triangle hidden", "保留下三角与遮住上三角"), max_abs_diff(out, out_upper),
        0.0);
  fmt::print("\n");
}

void cross_attention(const Sizes& s) {
  fmt::print("{}", say("=== Without a mask, queries and keys of different lengths (cross-attention) ===\n",
                       "=== 不加掩码，查询和键的长度不同（交叉注意力） ===\n"));
  ag::Generator gen(s.seed + 1);
  Tensor q = ag::randn({s.batch, s.heads, s.seq_len, s.head_dim}, gen, ag::kFloat64);
  Tensor k = ag::randn({s.batch, s.heads, s.memory_len, s.head_dim}, gen, ag::kFloat64);
  Tensor v = ag::randn({s.batch, s.heads, s.memory_len, s.head_dim + 1}, gen, ag::kFloat64);
  auto [out, attn] = book::scaled_dot_product_attention(q, k, v);
  fmt::print("q {}, k {}, v {} -> attn {}, out {}\n", ag::shape_str(q.shape()), ag::shape_str(k.shape()),
             ag::shape_str(v.shape()), ag::shape_str(attn.shape()), ag::shape_str(out.shape()));
  ag::AttentionResult fused = ag::scaled_dot_product_attention(q, k, v, {}, false, true);
  agree(say("out vs fused", "out 与融合算子"), max_abs_diff(out, fused.output), 1e-12);
  agree(say("attn vs fused weights", "attn 与融合算子的权重"), max_abs_diff(attn, fused.weights), 1e-12);
  fmt::print("\n");
}

void fully_masked_row() {
  fmt::print("{}", say("=== A query whose every key is masked ===\n", "=== 所有键都被遮住的查询 ===\n"));
  // One query, three keys, all hidden: e.g. a padded position with a key-padding length of 0.
  Tensor q = ag::tensor({1.0, 0.5}, {1, 1, 1, 2}, ag::kFloat64);
  Tensor k = ag::tensor({1.0, 0.0, 0.0, 1.0, 1.0, 1.0}, {1, 1, 3, 2}, ag::kFloat64);
  Tensor v = ag::tensor({1.0, 2.0, 3.0}, {1, 1, 3, 1}, ag::kFloat64);
  Tensor nothing_visible = ag::zeros({1, 1, 1, 3}, ag::kFloat64);
  auto [out, attn] = book::scaled_dot_product_attention(q, k, v, nothing_visible);
  // The textbook formula on that row: every score is -inf, so the row maximum m is -inf, and
  // exp(s - m) = exp(-inf - (-inf)) = exp(NaN).
  double m = -kInf, naive = std::exp(-kInf - m);
  fmt::print(fmt::runtime(say(
                 "the softmax formula exp(s_j - m) / sum: exp(-inf - (-inf)) = {} (PyTorch's softmax returns NaN)\n",
                 "softmax 公式 exp(s_j - m) / sum：exp(-inf - (-inf)) = {}（PyTorch 的 softmax 返回 NaN）\n")),
             naive);
  fmt::print(fmt::runtime(say("attograd's softmax on the row: attn = {}, out = {}\n",
                              "attograd 对这一行的 softmax：attn = {}，out = {}\n")),
             ag::to_string(attn.reshape({3})), ag::to_string(out.reshape({1})));
  bool zeros = attn.pow(2).sum().item() == 0.0 && out.pow(2).sum().item() == 0.0;
  if (!std::isnan(naive) || !zeros) ++g_failures;
  fmt::print(fmt::runtime(say("  zero weights and a zero output instead of NaN: {}\n\n",
                              "  权重和输出都是 0，而不是 NaN：{}\n\n")),
             zeros ? say("ok", "一致") : say("MISMATCH", "不一致"));
}

}  // namespace

int main(int argc, char** argv) {
  Sizes s;
  std::string lang = "en";
  po::options_description opts("minimal_attention: the chapter's minimal attention, rebuilt and checked");
  opts.add_options()("help,h", "show this help")("batch", ag::examples::with_default(&s.batch), "batch size")(
      "heads", ag::examples::with_default(&s.heads), "heads")("seq-len", ag::examples::with_default(&s.seq_len),
                                                              "sequence length (queries; keys too in self-attention)")(
      "head-dim", ag::examples::with_default(&s.head_dim), "dimensions per head, d_k")(
      "memory-len", ag::examples::with_default(&s.memory_len), "keys in the cross-attention part")(
      "seed", ag::examples::seed_value(&s.seed), "random seed")("lang", ag::examples::with_default(&lang),
                                                                "en or zh: the language of the printed labels");
  po::variables_map vm;
  try {
    ag::examples::store_command_line(argc, argv, opts, vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
    for (auto [name, value] : {std::pair{"--batch", s.batch},
                               {"--heads", s.heads},
                               {"--seq-len", s.seq_len},
                               {"--head-dim", s.head_dim},
                               {"--memory-len", s.memory_len}})
      if (value < 1 || value > 64) throw po::error(fmt::format("{} must be between 1 and 64, got {}", name, value));
    if (lang != "en" && lang != "zh") throw po::error(fmt::format("--lang must be en or zh, got '{}'", lang));
    g_zh = lang == "zh";
  } catch (const po::error& e) {
    std::cerr << "minimal_attention: " << e.what() << "\n\n" << opts << "\n";
    return 2;
  }
  causal_self_attention(s);
  cross_attention(s);
  fully_masked_row();
  if (g_zh)
    fmt::print("{} 项核对不一致\n", g_failures);
  else
    fmt::print("{} failed\n", ag::examples::plural(g_failures, "check"));
  return g_failures == 0 ? 0 : 1;
}
