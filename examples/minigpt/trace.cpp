// minigpt trace: one head of one layer, computed step by step in the chapter's order for a short
// text, and printed with every shape:
//
//   X                   the head's input: the layer's input, normalised (ln_1)      [T, D]
//   W_Q, W_K, W_V       the head's three maps, as the chapter writes them (Q = X W_Q) [D, d_k]
//   Q, K, V             X W_Q + b_Q, ...                                           [T, d_k]
//   S = Q Kᵀ            how much each query matches each key                        [T, T]
//   S / √d_k            scaled
//   masked              −inf above the diagonal: a token may not read a later one
//   P = softmax(rows)   the weights: each row sums to 1
//   O = P V             what the head hands on                                      [T, d_k]
//
// for the trained model of --checkpoint and for a fresh one of the same shape (GPT-2's
// initialisation, --seed), in float64. Each trace is checked against the model's own attention op:
// its P must equal the weights the op computes for the same text.
#include <cmath>
#include <limits>

#include "../common/cli.h"
#include "../common/preflight.h"
#include "minigpt.h"

namespace minigpt {

namespace {

using ag::Tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Every label twice: English and Chinese.
struct Words {
  const char* en;
  const char* zh;
  const char* in(bool zh_) const { return zh_ ? zh : en; }
};

// s padded with spaces on the left to `width` columns.
std::string pad_left(const std::string& s, std::size_t width) {
  std::size_t w = ag::examples::display_width(s);
  return std::string(width > w ? width - w : 0, ' ') + s;
}

// A character as a label: space, line break and tab made visible.
std::string label(const std::string& ch) {
  if (ch == " ") return "␣";
  if (ch == "\n") return "↲";
  if (ch == "\t") return "⇥";
  return ch;
}

constexpr std::size_t kCell = 8;  // columns per printed number

std::string number(double v) {
  if (v == -kInf) return pad_left("-inf", kCell);
  return fmt::format("{:>{}.3f}", v, kCell);
}

// m [R, C] (float64), at most `show` columns (and, with row names empty, at most `show` rows),
// with a header of column names when they are given.
void print_matrix(const std::string& title, const Tensor& m, const std::vector<std::string>& row_names,
                  const std::vector<std::string>& column_names, std::int64_t show, bool zh) {
  std::int64_t rows = m.size(0), cols = m.size(1);
  fmt::print("{} {}\n", title, ag::shape_str(m.shape()));
  std::vector<double> v = m.to_vector<double>();
  // A matrix over the characters (S, P) shows up to 16 of them; one over features `show`.
  std::int64_t shown_cols = std::min(cols, column_names.empty() ? show : std::max<std::int64_t>(show, 16));
  std::int64_t shown_rows = row_names.empty() ? std::min(rows, show) : rows;
  if (!column_names.empty()) {
    std::string header = "      ";
    for (std::int64_t j = 0; j < shown_cols; ++j) header += pad_left(column_names[static_cast<std::size_t>(j)], kCell);
    fmt::print("{}\n", header);
  }
  for (std::int64_t i = 0; i < shown_rows; ++i) {
    std::string line =
        row_names.empty() ? fmt::format("{:>5} ", i) : pad_left(row_names[static_cast<std::size_t>(i)], 5) + " ";
    for (std::int64_t j = 0; j < shown_cols; ++j) line += number(v[static_cast<std::size_t>(i * cols + j)]);
    if (shown_cols < cols)
      line += zh ? fmt::format("  …（另 {} 列）", cols - shown_cols) : fmt::format("  … ({} more)", cols - shown_cols);
    fmt::print("{}\n", line);
  }
  if (shown_rows < rows)
    fmt::print("{}\n", zh ? fmt::format("    …（另 {} 行）", rows - shown_rows)
                          : fmt::format("    … ({} more rows)", rows - shown_rows));
  fmt::print("\n");
}

// The largest weight of each row, averaged over the rows: 1 for a head that reads one key per
// query, the mean of 1/(i+1) for one that averages everything it may see.
double mean_largest_weight(const Tensor& p) { return p.amax(-1).mean().item(); }

// max |a - b| over every element.
double max_difference(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double most = 0;
  for (std::size_t i = 0; i < x.size(); ++i) most = std::max(most, std::abs(x[i] - y[i]));
  return most;
}

}  // namespace

HeadTrace trace_head(ag::nn::GPT& model, const std::vector<std::int64_t>& ids, std::int64_t layer, std::int64_t head) {
  const ag::nn::GPTConfig& c = model.config;
  if (layer < 0 || layer >= c.n_layer || head < 0 || head >= c.n_head || ids.empty() || std::ssize(ids) > c.block_size)
    throw std::invalid_argument(
        fmt::format("trace_head: layer {}, head {} or {} characters out of range", layer, head, ids.size()));
  ag::NoGradGuard no_grad;
  model.eval();
  const std::int64_t t = static_cast<std::int64_t>(ids.size());
  Tensor tokens = ag::from_vector(ids, {1, t});
  // The model's own attention weights for the same text: what the trace must reproduce.
  std::vector<Tensor> weights;
  model.forward(tokens, nullptr, &weights);

  // The layer's input: token and position embeddings, through the blocks before it.
  Tensor h = model.wte->forward(tokens) + model.wpe->forward(ag::arange(t));
  for (std::int64_t l = 0; l < layer; ++l) h = (*model.blocks)[static_cast<std::size_t>(l)].forward(h, {}, true);
  ag::nn::SelfAttentionBlock& block = (*model.blocks)[static_cast<std::size_t>(layer)];
  ag::nn::MultiHeadAttention& attn = *block.attn;
  if (attn.rotary)
    ag::examples::refuse(
        "the model rotates its queries and keys (RoPE); the trace follows the chapter's attention without it");
  HeadTrace r;
  r.x = (block.norm_first ? block.ln_1->forward(h) : h).squeeze(0);  // [T, D]

  // The rows of the packed projection [3D, D] that belong to this head, transposed to [D, d_k].
  const std::int64_t d = c.n_embd, dk = attn.head_dim;
  const Tensor& w = attn.qkv_proj->weight;
  const Tensor& b = attn.qkv_proj->bias;
  auto part = [&](std::int64_t which, Tensor& map, Tensor& out) {
    std::int64_t from = which * d + head * dk;
    map = w.slice(0, from, from + dk).t();  // [D, d_k]: Q = X W_Q, as the chapter writes it
    out = r.x.matmul(map);
    if (b.defined()) out = out + b.slice(0, from, from + dk);
  };
  part(0, r.w_q, r.q);
  part(1, r.w_k, r.k);
  part(2, r.w_v, r.v);
  r.s = r.q.matmul(r.k.t());
  r.scaled = r.s / std::sqrt(static_cast<double>(dk));
  std::vector<bool> later(static_cast<std::size_t>(t * t));
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = 0; j < t; ++j) later[static_cast<std::size_t>(i * t + j)] = j > i;
  r.masked = r.scaled.masked_fill(ag::from_vector(later, {t, t}), -kInf);
  r.p = r.masked.softmax(-1);
  r.o = r.p.matmul(r.v);
  Tensor own = weights[static_cast<std::size_t>(layer)].slice(1, head, head + 1).reshape({t, t}).to(ag::kFloat64);
  r.difference = max_difference(r.p, own);
  return r;
}

void print_trace(const HeadTrace& r, const std::vector<std::string>& characters, const std::string& title,
                 std::int64_t show, bool zh) {
  std::vector<std::string> names;
  for (const std::string& ch : characters) names.push_back(label(ch));
  const std::int64_t dk = r.q.size(1);
  const Words x{"X: the head's input, the layer's input normalised (ln_1); one row per character",
                "X：这个头的输入，即本层输入经 ln_1 规范化；每个字符一行"};
  const Words wq{"W_Q: queries are X W_Q (+ b_Q)", "W_Q：查询 Q = X W_Q（+ b_Q）"};
  const Words wk{"W_K: keys are X W_K (+ b_K)", "W_K：键 K = X W_K（+ b_K）"};
  const Words wv{"W_V: values are X W_V (+ b_V)", "W_V：值 V = X W_V（+ b_V）"};
  const Words q{"Q = X W_Q: what each character looks for", "Q = X W_Q：每个字符要找什么"};
  const Words k{"K = X W_K: what each character offers to be found by", "K = X W_K：每个字符凭什么被找到"};
  const Words v{"V = X W_V: what each character hands on when it is read", "V = X W_V：每个字符被读到时交出什么"};
  const Words s{"S = Q Kᵀ: row i, column j is how well query i matches key j",
                "S = Q Kᵀ：第 i 行第 j 列是查询 i 与键 j 的匹配程度"};
  const Words sc{"S / √d_k", "S / √d_k"};
  const Words m{"masked: −inf where the key comes after the query (j > i)", "掩码之后：键在查询之后（j > i）处为 −inf"};
  const Words p{"P = softmax of each row: the weights; each row sums to 1",
                "P = 每行做 softmax：注意力权重；每行之和为 1"};
  const Words o{"O = P V: each row a weighted mean of the value rows it may see",
                "O = P V：每一行是它能看到的值向量的加权平均"};
  fmt::print("==== {} ====\n\n", title);
  print_matrix(x.in(zh), r.x, names, {}, show, zh);
  print_matrix(wq.in(zh), r.w_q, {}, {}, show, zh);
  print_matrix(wk.in(zh), r.w_k, {}, {}, show, zh);
  print_matrix(wv.in(zh), r.w_v, {}, {}, show, zh);
  print_matrix(q.in(zh), r.q, names, {}, show, zh);
  print_matrix(k.in(zh), r.k, names, {}, show, zh);
  print_matrix(v.in(zh), r.v, names, {}, show, zh);
  print_matrix(s.in(zh), r.s, names, names, show, zh);
  print_matrix(fmt::format("{} (√d_k = √{} = {:.3f})", sc.in(zh), dk, std::sqrt(static_cast<double>(dk))), r.scaled,
               names, names, show, zh);
  print_matrix(m.in(zh), r.masked, names, names, show, zh);
  print_matrix(p.in(zh), r.p, names, names, show, zh);
  print_matrix(o.in(zh), r.o, names, {}, show, zh);
  double largest = mean_largest_weight(r.p), uniform = 0;
  for (std::int64_t i = 0; i < r.p.size(0); ++i) uniform += 1.0 / static_cast<double>(i + 1);
  uniform /= static_cast<double>(r.p.size(0));
  double row_error = max_difference(r.p.sum(-1), ag::ones({r.p.size(0)}, ag::kFloat64));
  if (zh) {
    fmt::print("每行之和与 1 的最大偏差：{:.1e}\n", row_error);
    fmt::print("每行最大权重的平均值：{:.3f}（对能看到的字符取平均时为 {:.3f}，只看一个字符时为 1）\n", largest,
               uniform);
    fmt::print("与模型自身注意力算子给出的权重相比，P 的最大差：{:.1e}\n\n", r.difference);
  } else {
    fmt::print("rows of P sum to 1 within {:.1e}\n", row_error);
    fmt::print(
        "the mean of each row's largest weight: {:.3f} (averaging what a row may see: {:.3f}; reading one character: "
        "1)\n",
        largest, uniform);
    fmt::print("P against the weights the model's own attention op computes: max |difference| {:.1e}\n\n",
               r.difference);
  }
}

}  // namespace minigpt
