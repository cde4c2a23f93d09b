// attention_by_hand: every worked number and self-test question of the attention notes,
// recomputed with attograd tensors, each intermediate printed. Where a text's own figure
// disagrees with the computation, the program says so and shows both.
//
// It exits with status 1 if any of its own checks fails (a computed value against a closed
// form), so it doubles as a test.
#include <attograd/attograd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>
#include <limits>

#include "common/cli.h"

namespace po = boost::program_options;
using ag::Tensor;

namespace {

int g_failures = 0;
bool g_zh = false;  // --lang zh: the labels in Chinese

// A label in the reader's language.
const char* say(const char* en, const char* zh) { return g_zh ? zh : en; }
constexpr double kInf = std::numeric_limits<double>::infinity();

void heading(const std::string& title) { fmt::print("\n=== {} ===\n", title); }

// Prints "name = tensor" with values rounded for reading.
void show(const std::string& name, const Tensor& t) {
  // Padded by display columns: a Chinese character takes two.
  std::size_t width = 0;
  for (unsigned char c : name) width += (c & 0xC0) != 0x80 ? ((c >= 0xE0) ? 2 : 1) : 0;
  fmt::print("{}{} {}\n", name, std::string(width < 28 ? 28 - width : 0, ' '), ag::to_string(t, {.precision = 4}));
}

// A check of the program's own arithmetic against an independent closed form.
void check(const std::string& what, double computed, double expected, double tol = 1e-12) {
  bool ok = std::abs(computed - expected) <= tol;
  if (!ok) ++g_failures;
  fmt::print(
      fmt::runtime(say("  check: {} = {:.6f} (closed form {:.6f}) {}\n", "  核对：{} = {:.6f}（闭式解 {:.6f}）{}\n")),
      what, computed, expected, ok ? say("ok", "一致") : say("MISMATCH", "不一致"));
}

// How the text's figure compares with the computation, at the text's own precision.
void compare_with_text(const std::string& what, const std::vector<double>& text, const Tensor& computed, int decimals) {
  Tensor c = computed.to(ag::kFloat64);
  bool agrees = true;
  std::string ours;
  for (std::size_t i = 0; i < text.size(); ++i) {
    double v = c.data_ptr<double>()[i];
    double scale = std::pow(10.0, decimals);
    agrees = agrees && std::round(v * scale) == std::round(text[i] * scale);
    ours += fmt::format("{}{:.{}f}", i ? ", " : "", v, decimals);
  }
  fmt::print(
      fmt::runtime(
          say("  the text gives {} ≈ [{:.{}f}]; computed [{}]: {}\n", "  原文给出的{} ≈ [{:.{}f}]；计算得 [{}]：{}\n")),
      what, fmt::join(text, ", "), decimals, ours,
      agrees ? say("agrees", "一致") : say("DISAGREES (the computation is shown above)", "不一致（计算过程见上）"));
}

// softmax(q k^T / sqrt(d)) for one query against the rows of k, step by step.
Tensor attend_one_query(const Tensor& q, const Tensor& k) {
  Tensor scores = k.matmul(q.unsqueeze(1)).squeeze(1);  // [n]: q . k_j
  show(say("scores q.k_j", "分数 q.k_j"), scores);
  double d = static_cast<double>(q.size(0));
  Tensor scaled = scores / std::sqrt(d);
  show(fmt::format(fmt::runtime(say("scaled by 1/sqrt({:g})", "乘以 1/sqrt({:g})")), d), scaled);
  Tensor weights = ag::softmax(scaled, 0);
  show(say("softmax weights", "softmax 权重"), weights);
  return weights;
}

// Why 'cat' attends to itself most in this example: its key was chosen equal to its query.
// q . k_j = |q| |k_j| cos(angle), every key here has length sqrt 2, so the largest score is the
// key pointing where q points: k_cat = q, with q . q = |q|^2 = 2 (Cauchy-Schwarz). In a trained
// model the query and the key of one token come from different maps, q = x Wq and k = x Wk, and
// nothing makes them equal; whether a head looks at its own token is learned
// (`experiments heads` measures it: docs/attention.md, "Why a token attends to itself").
void self_peak(const Tensor& q, const Tensor& k, const Tensor& w) {
  Tensor norms = (k * k).sum(1).sqrt();
  show(say("lengths |k_j|", "长度 |k_j|"), norms);
  check(say("|k_cat| - |k_The| (the keys are equally long)", "|k_cat| - |k_The|（各个键一样长）"),
        norms.at<double>({1}) - norms.at<double>({0}), 0.0);
  check(say("q . k_cat - |q|^2 (the key equals the query)", "q . k_cat - |q|^2（这个键等于查询）"),
        k.slice(0, 1, 2).matmul(q.detach().unsqueeze(1)).item(), (q.detach() * q.detach()).sum().item());
  // Give 'cat' a key that is not its query, as a trained Wk would: [0, 1, 0, 1], as long as the
  // others. Its score drops to 0 and its weight to the smallest of the three.
  Tensor k_other = ag::tensor({1, 1, 0, 0, 0, 1, 0, 1, 0, 1, 1, 0}, {3, 4}, ag::kFloat64);
  Tensor w_other = ag::softmax(k_other.matmul(q.detach().unsqueeze(1)).squeeze(1) / 2.0, 0);
  show(say("weights if k_cat = [0, 1, 0, 1]", "若 k_cat = [0, 1, 0, 1]，权重为"), w_other);
  bool peak_moves = w_other.at<double>({1}) < w_other.at<double>({0}) && w.at<double>({1}) > w.at<double>({0});
  if (!peak_moves) ++g_failures;
  fmt::print(fmt::runtime(say(
                 "  'cat' is looked at most because the example gave it the key equal to its query; with another key "
                 "of\n  the same length it gets the least weight. The peak is the example's choice, not attention's. "
                 "{}\n",
                 "  'cat' 得到的权重最大，是因为例子让它的键恰好等于查询；换一个同样长的键，它反而得到最小的权重。\n"
                 "  这个峰值是例子选出来的，不是注意力本身的性质。{}\n")),
             peak_moves ? say("ok", "一致") : say("MISMATCH", "不一致"));
}

void hand_example() {
  heading(say("The notes' hand-computed example: d_k = 4, the query of 'cat' against three keys",
              "笔记中的手算例子：d_k = 4，'cat' 的查询对三个键"));
  Tensor q = ag::tensor({1, 0, 1, 0}, {4}, ag::kFloat64).requires_grad_();
  Tensor k = ag::tensor({1, 1, 0, 0,   // The
                         1, 0, 1, 0,   // cat (itself)
                         0, 1, 1, 0},  // sat
                        {3, 4}, ag::kFloat64);
  show(say("q (cat)", "q（cat）"), q);
  show(say("k (The, cat, sat)", "k（The、cat、sat）"), k);
  Tensor w = attend_one_query(q, k);
  double z = 2 * std::exp(0.5) + std::exp(1.0);
  check(say("weight on 'cat'", "'cat' 的权重"), w.at<double>({1}), std::exp(1.0) / z);
  compare_with_text(say("the weights", "权重"), {0.27, 0.46, 0.27}, w, 2);
  self_peak(q, k, w);
  // How the weight on 'cat' moves with the query: d w_cat / d q, by backward.
  w.slice(0, 1, 2).sum().backward();
  show(say("d w_cat / d q (backward)", "d w_cat / d q（反向传播）"), q.grad());
  // Closed form: d w_j / d q = w_j (k_j - sum_i w_i k_i) / sqrt(d).
  Tensor mean_key = ag::matmul(w.detach().unsqueeze(0), k).squeeze(0);
  Tensor expected = (k.slice(0, 1, 2).squeeze(0) - mean_key) * (w.detach().at<double>({1}) / 2.0);
  check(say("|backward - closed form|", "|反向传播 - 闭式解|"), (q.grad() - expected).pow(2).sum().sqrt().item(), 0.0);
}

void self_test_2() {
  heading(say("Self-test 2: d_k = 8, raw scores [2, 4, 2]", "自测题 2：d_k = 8，原始分数 [2, 4, 2]"));
  Tensor scores = ag::tensor({2, 4, 2}, {3}, ag::kFloat64);
  Tensor scaled = scores / std::sqrt(8.0);
  show(say("scaled by 1/sqrt(8)", "乘以 1/sqrt(8)"), scaled);
  Tensor w = ag::softmax(scaled, 0);
  show(say("softmax (scaled)", "softmax（缩放后）"), w);
  Tensor unscaled = ag::softmax(scores, 0);
  show(say("softmax (not scaled)", "softmax（未缩放）"), unscaled);
  check(say("middle weight, scaled", "中间的权重（缩放后）"), w.at<double>({1}),
        1 / (1 + 2 * std::exp(-2 / std::sqrt(8.0))));
  compare_with_text(say("the scaled weights", "缩放后的权重"), {0.09, 0.82, 0.09}, w, 2);
  fmt::print(
      fmt::runtime(say(
          "  the text's figure is not the scaled result; it is nearer to the unscaled one, [{:.3f}, {:.3f}, {:.3f}],\n"
          "  and matches neither. With scaling the middle weight is only about twice the others.\n",
          "  原文的数字不是缩放后的结果；它更接近未缩放的 [{:.3f}, {:.3f}, {:.3f}]，但两者都不符。\n"
          "  缩放之后，中间的权重只是其他两个的约两倍。\n")),
      unscaled.at<double>({0}), unscaled.at<double>({1}), unscaled.at<double>({2}));
}

void masking() {
  heading(say("Masking a length-4 sequence: -inf, a large negative number, or 0",
              "给长度为 4 的序列加掩码：-inf、一个很大的负数，还是 0"));
  Tensor allowed = ag::causal_mask(4, 4);
  Tensor masked_out = ag::logical_not(allowed);  // the notes' M: 1 = hidden
  show(say("M (true = hidden)", "M（true = 遮住）"), masked_out);
  Tensor scores = ag::tensor({0.3, 1.2, -0.4, 0.9,  //
                              1.0, 0.1, 0.7, -0.2,  //
                              -0.5, 0.6, 0.2, 1.5,  //
                              0.8, -1.0, 0.4, 0.0},
                             {4, 4}, ag::kFloat64);
  show(say("scores", "分数"), scores);
  Tensor w_inf = ag::softmax(ag::masked_fill(scores, masked_out, -kInf), 1);
  Tensor w_big = ag::softmax(ag::masked_fill(scores, masked_out, -1e9), 1);
  Tensor w_zero = ag::softmax(ag::masked_fill(scores, masked_out, 0.0), 1);
  show(say("weights, masked with -inf", "权重，用 -inf 遮住"), w_inf);
  show(say("weights, masked with -1e9", "权重，用 -1e9 遮住"), w_big);
  show(say("weights, masked with 0", "权重，用 0 遮住"), w_zero);
  check(say("max |(-inf) - (-1e9)|", "最大 |(-inf) - (-1e9)|"), (w_inf - w_big).pow(2).max().sqrt().item(), 0.0,
        1e-300);
  // With 0, the future keeps weight e^0 / Z: the first query gives this much to positions 1..3.
  double leak = ag::masked_fill(w_zero, allowed, 0.0).sum(1).at<double>({0});
  double z = std::exp(0.3) + 3;
  check(say("future weight of query 0 with 0-masking", "用 0 遮住时查询 0 放在未来位置上的权重"), leak, 3 / z);
  fmt::print(
      fmt::runtime(say("  Setting masked scores to 0 does not hide them: softmax gives them e^0 = 1 each before\n"
                       "  normalising, so query 0 still puts {:.1f}% of its attention on the future.\n",
                       "  把被遮住的分数设为 0 并不能把它们藏起来：softmax 在归一化之前给每个都算出 e^0 = 1，\n"
                       "  所以查询 0 仍把 {:.1f}% 的注意力放在未来的位置上。\n")),
      100 * leak);
}

void self_test_1_and_5() {
  heading(say("Self-tests 1 and 5: where Q, K and V come from, and the shape of the weights",
              "自测题 1 和 5：Q、K、V 从哪里来，以及权重的形状"));
  ag::Generator gen(1);
  ag::nn::MultiHeadAttention mha(8, 2, {}, gen);
  Tensor target = ag::randn({1, 3, 8}, gen);  // a decoder that has written 3 tokens
  Tensor source = ag::randn({1, 6, 8}, gen);  // an encoded source sentence of 6 tokens
  ag::NoGradGuard no_grad;
  Tensor self_weights, cross_weights;
  mha.forward(target, target, {.causal = true, .weights = &self_weights});
  fmt::print(fmt::runtime(say("  causal self-attention:  Q, K, V all from the target {} -> weights {}\n",
                              "  因果自注意力：Q、K、V 都来自目标序列 {} -> 权重 {}\n")),
             ag::shape_str(target.shape()), ag::shape_str(self_weights.shape()));
  mha.forward(target, source, {.weights = &cross_weights});
  fmt::print(
      fmt::runtime(say("  cross-attention:        Q from the target {}, K and V from the source {} -> weights {}\n",
                       "  交叉注意力：Q 来自目标序列 {}，K 和 V 来自源序列 {} -> 权重 {}\n")),
      ag::shape_str(target.shape()), ag::shape_str(source.shape()), ag::shape_str(cross_weights.shape()));
  fmt::print("{}", say("  so the weights are [batch, heads, tgt_len, src_len], as the notes' answer says.\n",
                       "  所以权重的形状是 [batch, heads, tgt_len, src_len]，与笔记的答案一致。\n"));
  if (cross_weights.shape() != ag::Shape{1, 2, 3, 6}) ++g_failures;
}

void self_test_3() {
  heading(say("Self-test 3: forgetting the causal mask lets position t read the future",
              "自测题 3：忘了因果掩码，位置 t 就能读到未来"));
  ag::Generator gen(2);
  Tensor q = ag::randn({1, 1, 5, 4}, gen, ag::kFloat64), k = ag::randn({1, 1, 5, 4}, gen, ag::kFloat64),
         v = ag::randn({1, 1, 5, 4}, gen, ag::kFloat64);
  Tensor k2 = ag::cat({k.slice(2, 0, 2), ag::randn({1, 1, 3, 4}, gen, ag::kFloat64)}, 2);
  Tensor v2 = ag::cat({v.slice(2, 0, 2), ag::randn({1, 1, 3, 4}, gen, ag::kFloat64)}, 2);
  for (bool causal : {true, false}) {
    Tensor a = ag::scaled_dot_product_attention(q, k, v, {}, causal).output.slice(2, 1, 2);
    Tensor b = ag::scaled_dot_product_attention(q, k2, v2, {}, causal).output.slice(2, 1, 2);
    double change = (a - b).pow(2).sum().sqrt().item();
    fmt::print(fmt::runtime(say("  {:<14} changing tokens 2..4 moves the output at position 1 by {:.4f}\n",
                                "  {}改变第 2..4 个词元，位置 1 的输出变化 {:.4f}\n")),
               causal ? say("with the mask:", "有掩码：") : say("without it:", "无掩码："), change);
    if (causal && change != 0) ++g_failures;
  }
  fmt::print("{}", say("  Without the mask a language model can copy the next token from its input; minigpt's\n"
                       "  training would report a loss it cannot reproduce when generating.\n",
                       "  没有掩码，语言模型可以直接从输入里抄下一个词元；minigpt 训练时报告的损失，\n"
                       "  生成时就做不到了。\n"));
}

void self_test_4() {
  heading(say("Self-test 4: reading the code, by running both ways of building the mask",
              "自测题 4：读代码，方法是把两种构造掩码的写法都运行一遍"));
  Tensor scores = ag::tensor({0.5, -1.0, 2.0, 0.0, 1.5, 0.3, -0.7, 0.9, 1.1}, {3, 3}, ag::kFloat64);
  // The notes' version: triu(ones, diagonal=1), the strict upper triangle, marks the future
  // (1 = hidden) and masked_fill puts -1e9 there.
  std::vector<bool> upper, lower;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      upper.push_back(j > i);   // triu(..., diagonal=1)
      lower.push_back(j <= i);  // tril(...)
    }
  Tensor notes = ag::softmax(ag::masked_fill(scores, ag::from_vector(upper, {3, 3}), -1e9), 1);
  // The chapter's version: tril(ones) marks what may be seen (1 = allowed), and
  // masked_fill(mask == 0, -inf) hides the rest.
  Tensor chapter = ag::softmax(ag::masked_fill(scores, ag::logical_not(ag::from_vector(lower, {3, 3})), -kInf), 1);
  show("triu(diagonal=1) + -1e9", notes);
  show("tril + -inf", chapter);
  check(say("max difference", "最大差"), (notes - chapter).pow(2).max().sqrt().item(), 0.0, 1e-300);
  fmt::print("{}", say("  Both are masked (causal) self-attention: every row ignores the columns to its right.\n",
                       "  两者都是带掩码的（因果）自注意力：每一行都不看它右边的列。\n"));
}

void scaling() {
  heading(say("Why divide by sqrt(d_k): the spread of q.k for unit-variance q and k",
              "为什么除以 sqrt(d_k)：q、k 的各分量方差为 1 时 q.k 的分散程度"));
  ag::Generator gen(3);
  for (std::int64_t d : {4, 64, 512}) {
    Tensor q = ag::randn({20000, d}, gen, ag::kFloat64), k = ag::randn({20000, d}, gen, ag::kFloat64);
    Tensor dots = (q * k).sum(1);
    double var = (dots * dots).mean().item();
    fmt::print(fmt::runtime(say(
                   "  d_k = {:>3}: variance of q.k = {:>7.2f} (theory: d_k); after / sqrt(d_k): {:.3f} (theory: 1)\n",
                   "  d_k = {:>3}：q.k 的方差 = {:>7.2f}（理论值：d_k）；除以 sqrt(d_k) 之后：{:.3f}（理论值：1）\n")),
               d, var, var / static_cast<double>(d));
  }
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description opts("attention_by_hand: the attention notes' numbers, recomputed step by step");
  std::string lang = "en";
  opts.add_options()("help,h", "show this help")("lang", po::value(&lang)->default_value(lang),
                                                 "en or zh: the language of the printed labels");
  po::variables_map vm;
  try {
    ag::examples::store_command_line(argc, argv, opts, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "attention_by_hand: " << e.what() << "\n" << opts << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  if (lang != "en" && lang != "zh") {
    std::cerr << "attention_by_hand: --lang must be en or zh, got '" << lang << "'\n";
    return 2;
  }
  g_zh = lang == "zh";
  hand_example();
  self_test_2();
  masking();
  self_test_1_and_5();
  self_test_3();
  self_test_4();
  scaling();
  if (g_zh)
    fmt::print("\n{} 项核对不一致\n", g_failures);
  else
    fmt::print("\n{} failed\n", ag::examples::plural(g_failures, "check"));
  return g_failures == 0 ? 0 : 1;
}
