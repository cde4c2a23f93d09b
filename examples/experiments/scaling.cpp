// Why divide by sqrt(d_k)?
//
// With q and k of d_k independent unit-variance entries, the score q.k is a sum of d_k products
// of variance 1, so its variance is d_k. Unscaled, the scores spread like sqrt(d_k); softmax of
// widely spread scores puts nearly all weight on one key, and its Jacobian diag(p) - p p^T is
// then nearly 0: almost no gradient reaches the scores. Dividing by sqrt(d_k) restores
// variance 1 at every width. Part 1 measures all four quantities, and what reaches the query
// itself: dq = dS K (times the scale), where K's rows grow like sqrt(d_k) unscaled, so dq does not
// simply vanish with dS; part 2 trains a model whose single head is 256 wide, with and without
// the division.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "../common/plot.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

struct Stats {
  double score_std = 0, max_weight = 0, entropy = 0, grad_norm = 0;
  // |dL/dq| over the draws: mean, median, 99th percentile, largest, and the share below 0.01.
  double dq_mean = 0, dq_median = 0, dq_p99 = 0, dq_max = 0, dq_small = 0;
};

// One query against `keys` keys, `trials` times: spread of the scores, largest weight, entropy
// of the weights (nats), and |dL/dscores| and |dL/dq| for an upstream gradient of unit-variance
// noise.
Stats measure(std::int64_t d, bool scaled, std::int64_t keys, std::int64_t trials, ag::Generator& gen) {
  Tensor q = ag::randn({trials, 1, d}, gen, ag::kFloat64).requires_grad_(),
         k = ag::randn({trials, keys, d}, gen, ag::kFloat64);
  Tensor s = q.matmul(k.transpose(1, 2)).reshape({trials, keys});  // [trials, keys]
  if (scaled) s = s * (1.0 / std::sqrt(static_cast<double>(d)));
  s.retain_grad();
  Tensor p = ag::softmax(s, 1);
  Tensor upstream = ag::randn({trials, keys}, gen, ag::kFloat64);
  (p * upstream).sum().backward();
  Stats st;
  st.score_std = std::sqrt((s.detach() * s.detach()).mean().item());  // the mean score is 0
  st.max_weight = p.detach().amax(1).mean().item();
  Tensor pd = p.detach();
  // 0 log 0 = 0: clamp the log's argument away from 0 (those terms are multiplied by 0 anyway)
  Tensor plogp = pd * ag::log(pd + 1e-300);
  st.entropy = -plogp.sum(1).mean().item();
  st.grad_norm = ag::sqrt((s.grad() * s.grad()).sum(1)).mean().item();
  Tensor dq = q.grad().reshape({trials, d});
  Tensor dq_norms = ag::sqrt((dq * dq).sum(1));
  std::vector<double> norms(dq_norms.data_ptr<double>(), dq_norms.data_ptr<double>() + trials);
  std::sort(norms.begin(), norms.end());
  auto at = [&](double fraction) {
    return norms[static_cast<std::size_t>(fraction * static_cast<double>(trials - 1))];
  };
  st.dq_mean = dq_norms.mean().item();
  st.dq_median = at(0.5), st.dq_p99 = at(0.99), st.dq_max = norms.back();
  st.dq_small = static_cast<double>(std::lower_bound(norms.begin(), norms.end(), 0.01) - norms.begin()) /
                static_cast<double>(trials);
  return st;
}

// Part 2: a one-head model with head dimension 256; scale 1 turns the division off.
double train_wide_head(const Text& text, const Options& o, bool scaled) {
  ag::Generator init(o.seed);
  ag::nn::GPT model({.vocab_size = text.tokenizer.size(), .block_size = 32, .n_layer = 2, .n_head = 1, .n_embd = 256},
                    init);
  if (!scaled)
    for (std::size_t i = 0; i < model.blocks->size(); ++i) (*model.blocks)[i].attn->scale = 1.0;
  train(model, text, o, scaled ? say(o, "scaled  ", "缩放  ") : say(o, "unscaled", "不缩放"));
  return validation_loss(model, text, o);
}

// The largest over the smallest of `value` across the widths: 1 when it does not move with d_k.
double spread_across_widths(const std::vector<Stats>& rows, double Stats::*value) {
  auto [lo, hi] = std::minmax_element(rows.begin(), rows.end(),
                                      [&](const Stats& a, const Stats& b) { return a.*value < b.*value; });
  return (*hi).*value / (*lo).*value;
}

}  // namespace

int scaling(const Options& o) {
  fmt::print("{}", say(o, "Part 1: one query, 16 keys, q and k ~ N(0, I), 2000 draws per row\n\n",
                       "第 1 部分：一个查询、16 个键，q、k ~ N(0, I)，每行 2000 次抽样\n\n"));
  ag::Generator gen(o.seed);
  const std::int64_t keys = 16, trials = 2000;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::pair<Stats, Stats>> all;
  for (std::int64_t d : {4, 16, 64, 256, 1024}) {
    Stats raw = measure(d, false, keys, trials, gen), scaled = measure(d, true, keys, trials, gen);
    all.push_back({raw, scaled});
    rows.push_back({std::to_string(d), fmt::format("{:.2f}", raw.score_std), fmt::format("{:.2f}", scaled.score_std),
                    fmt::format("{:.3f}", raw.max_weight), fmt::format("{:.3f}", scaled.max_weight),
                    fmt::format("{:.3f}", raw.entropy), fmt::format("{:.3f}", scaled.entropy),
                    fmt::format("{:.2e}", raw.grad_norm), fmt::format("{:.2e}", scaled.grad_norm)});
  }
  print_table(
      {"d_k", say(o, "std raw", "标准差 不缩放"), say(o, "std scaled", "标准差 缩放"),
       say(o, "max w raw", "最大权重 不缩放"), say(o, "max w scaled", "最大权重 缩放"), say(o, "H raw", "熵 不缩放"),
       say(o, "H scaled", "熵 缩放"), say(o, "|dS| raw", "|dS| 不缩放"), say(o, "|dS| scaled", "|dS| 缩放")},
      rows);
  fmt::print(
      fmt::runtime(
          say(o,
              "(H: entropy of the weights in nats; uniform over 16 keys is ln 16 = {:.3f}. |dS|: mean norm of the\n"
              " gradient reaching a row of scores for unit-variance upstream noise.)\n\n",
              "（熵：权重的熵，单位为奈特；16 个键上的均匀分布是 ln 16 = {:.3f}。|dS|：上游梯度取单位方差的噪声时，\n"
              " 传到一行分数的梯度的范数，取平均。）\n\n")),
      std::log(16.0));

  // What reaches the query: dq = dS K (times the scale). Unscaled, most rows are saturated and pass
  // almost nothing, but K's rows have norm about sqrt(d_k), so the rows that are not saturated pass
  // a large gradient: the spread widens, it does not simply shrink. The mean hides this (a few
  // large rows lift it), so the median and the tail are printed beside it.
  std::vector<std::vector<std::string>> dq_rows;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& [raw, scaled] = all[i];
    dq_rows.push_back({std::to_string(4 << (2 * i)), fmt::format("{:.2f}", raw.dq_mean),
                       fmt::format("{:.2f}", scaled.dq_mean), fmt::format("{:.3f}", raw.dq_median),
                       fmt::format("{:.3f}", scaled.dq_median), fmt::format("{:.2f}", raw.dq_p99),
                       fmt::format("{:.2f}", scaled.dq_p99), fmt::format("{:.1f}", raw.dq_max),
                       fmt::format("{:.1f}", scaled.dq_max), fmt::format("{:.0f}%", 100 * raw.dq_small),
                       fmt::format("{:.0f}%", 100 * scaled.dq_small)});
  }
  const char* scaled_column = say(o, "scaled", "缩放");
  print_table({"d_k", say(o, "|dq| mean raw", "|dq| 均值 不缩放"), scaled_column, say(o, "median raw", "中位数 不缩放"),
               scaled_column, say(o, "99th pct raw", "第 99 百分位 不缩放"), scaled_column,
               say(o, "largest raw", "最大值 不缩放"), scaled_column, say(o, "below 0.01 raw", "小于 0.01 不缩放"),
               scaled_column},
              dq_rows);
  fmt::print("{}",
             say(o,
                 "(|dq|: norm of the gradient reaching the query, over the same 2000 draws. Unscaled, the mean\n"
                 " grows with d_k while the median falls to 0: most rows saturate and pass nothing, a few pass a\n"
                 " large gradient. Scaled, the median and the tail stay put.)\n\n",
                 "（|dq|：传到查询的梯度的范数，同样的 2000 次抽样。不缩放时，均值随 d_k 变大，中位数却降到 0：\n"
                 " 大多数行饱和，几乎传不回梯度，少数行传回很大的梯度。缩放后，中位数和尾部都不随 d_k 变化。）\n\n"));

  std::filesystem::create_directories(o.out);
  std::vector<double> log_d, raw_w, scaled_w, raw_g, scaled_g;
  for (std::size_t i = 0; i < all.size(); ++i) {
    log_d.push_back(2.0 + 2.0 * static_cast<double>(i));  // d_k = 4^(i + 1)
    raw_w.push_back(all[i].first.max_weight), scaled_w.push_back(all[i].second.max_weight);
    raw_g.push_back(all[i].first.grad_norm), scaled_g.push_back(all[i].second.grad_norm);
  }
  std::string png = (std::filesystem::path(o.out) / "scaling.png").string();
  ag::plot::line_plot_png(png,
                          {{"largest weight, q.k", log_d, raw_w},
                           {"largest weight, q.k / sqrt(d_k)", log_d, scaled_w},
                           {"|dS|, q.k", log_d, raw_g},
                           {"|dS|, q.k / sqrt(d_k)", log_d, scaled_g}},
                          "softmax over 16 keys as d_k grows", "log2 d_k", "mean over 2000 draws");
  fmt::print(fmt::runtime(say(o, "wrote {}\n\n", "已写入 {}\n\n")), png);

  if (o.check) {
    const auto& [raw4, scaled4] = all.front();
    const auto& [raw1024, scaled1024] = all.back();
    expect(std::abs(raw1024.score_std / std::sqrt(1024.0) - 1) < 0.1, "unscaled score spread grows like sqrt(d_k)");
    bool flat = true;
    for (const auto& [r, s] : all) flat = flat && std::abs(s.score_std - 1) < 0.1;
    expect(flat, "scaled score spread stays near 1 for every d_k");
    expect(raw1024.max_weight > 0.9 && scaled1024.max_weight < 0.5, "unscaled softmax saturates at d_k = 1024");
    expect(raw1024.entropy < scaled1024.entropy, "scaling keeps the weights' entropy higher");
    expect(raw1024.grad_norm < 0.2 * scaled1024.grad_norm, "unscaled scores get a far smaller gradient at d_k = 1024");
    expect(std::abs(raw4.grad_norm / scaled4.grad_norm - 1) < 1.0, "at d_k = 4 the two are within a factor of 2");
    // A saturated row passes nearly nothing to q, a row near a tie passes dS times keys of norm
    // about sqrt(d_k): unscaled at d_k = 1024 the two kinds both occur, scaled neither does.
    expect(raw1024.dq_small > 0.5 && scaled1024.dq_small < 0.05,
           "unscaled at d_k = 1024 most queries get a gradient below 0.01; scaled, almost none do");
    expect(raw1024.dq_p99 > 10 * scaled1024.dq_p99,
           "unscaled at d_k = 1024 the largest gradients reaching q are over 10 times the scaled ones: "
           "heavy-tailed, not vanishing");
    // The same finding by its median and its extremes (measured with --seed 1: a median of 0.000
    // against 0.270, a largest draw 44 times the scaled one, a mean that doubles from d_k = 4).
    expect(raw1024.dq_median < 0.1 * scaled1024.dq_median,
           "unscaled at d_k = 1024 the median gradient reaching q is below a tenth of the scaled median");
    expect(raw1024.dq_max > 20 * scaled1024.dq_max,
           "unscaled at d_k = 1024 the largest gradient reaching q is over 20 times the scaled one's");
    expect(raw1024.dq_mean > raw4.dq_mean,
           "unscaled, the mean gradient reaching q grows from d_k = 4 to 1024: the mean alone does not show the "
           "saturated rows");
    std::vector<Stats> scaled_rows;
    for (const auto& [r, s] : all) scaled_rows.push_back(s);
    // Measured: 1.16 for the median (0.233 to 0.270), 1.26 for the 99th percentile (0.61 to 0.77).
    const double median_band = spread_across_widths(scaled_rows, &Stats::dq_median),
                 tail_band = spread_across_widths(scaled_rows, &Stats::dq_p99);
    expect(median_band < 1.5 && tail_band < 1.5,
           fmt::format("scaled, the median and the 99th percentile of the gradient reaching q stay within a factor "
                       "of 1.5 across d_k = 4 to 1024 ({:.2f} and {:.2f})",
                       median_band, tail_band));
  }

  if (o.zh)
    fmt::print("第 2 部分：一个两层 GPT，只有一个 256 维的头，缩放与不缩放各训练 {} 步\n\n", o.steps);
  else
    fmt::print("Part 2: a 2-layer GPT with one 256-wide head, {} each, scaled vs unscaled\n\n",
               ag::examples::plural(o.steps, "step"));
  Text text = load_text(o);
  double with = train_wide_head(text, o, true), without = train_wide_head(text, o, false);
  print_table({say(o, "attention scores", "注意力分数"), say(o, "validation loss", "验证损失")},
              {{"q.k / sqrt(256)", fmt::format("{:.4f}", with)}, {"q.k", fmt::format("{:.4f}", without)}});
  fmt::print("{}",
             say(o,
                 "\nAt this scale and with GPT-2's small initial weights (std 0.02), the scores start tiny either "
                 "way;\nthe difference, if any, comes from how large they grow during training.\n",
                 "\n在这个规模上，GPT-2 的初始权重很小（标准差 0.02），缩放与否，分数一开始都很小；\n"
                 "如果有差别，也来自训练中分数长到多大。\n"));
  return exit_code();
}

}  // namespace experiments
