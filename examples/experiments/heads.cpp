// Multi-head against single-head attention at the same width.
//
// The chapter's claim: several heads, each attending in its own d_model / h dimensions, can
// look at different things at once, where one head of full width must blend everything into one
// distribution per query. Splitting d_model into h heads changes no parameter count (Wq, Wk, Wv
// and Wo stay [d_model, d_model]), so the comparison is at equal size by construction.
//
// Measured for h = 1, 2, 4, 8 at d_model 64, trained the same steps on the same batches:
// - validation loss;
// - how differently the heads of one layer attend: the Jensen-Shannon divergence between two
//   heads' weight rows for the same query, averaged over pairs of heads, queries and layers
//   (0 when they attend alike; at most ln 2 = 0.693 nats), before and after training;
// - what each head of the 4-head model looks at: its mean distance back from the query, and its
//   mean weight on the query's own token, on the character just before it and on the last space
//   or newline before it; and how soft its selection is, the mean of each row's largest weight.
//   Beside them, the same measures for a head that spreads each row evenly over the keys it may
//   see, the reference a specialised head departs from.
#include <fmt/core.h>

#include <cmath>

#include "experiments.h"

namespace experiments {

namespace {

// The fixed validation batch the heads are looked at on.
ag::Tensor probe_batch(const ag::nn::GPT& model, const Text& text, const Options& o) {
  ag::Generator gen(o.seed + 300);
  return text.dataset.sample(ag::data::TextDataset::Split::Validation, o.batch, model.config.block_size, gen).x;
}

// Per layer, the weights [B, H, T, T] for the probe batch.
std::vector<ag::Tensor> attention_weights(ag::nn::GPT& model, const Text& text, const Options& o) {
  ag::NoGradGuard no_grad;
  model.eval();
  std::vector<ag::Tensor> weights;
  model.forward(probe_batch(model, text, o), nullptr, &weights);
  model.train();
  for (auto& w : weights) w = w.to(ag::kFloat64);
  return weights;
}

// What one head attends to, averaged over the queries that have the key in question.
struct HeadProfile {
  double self = 0, previous = 0, last_break = 0, largest = 0;
};

// For weights w [B, H, T, T] on the token ids x [B, T]: per head, the mean weight on the query's
// own position, on the position just before it (queries 1..T-1), on the last space or newline
// before it (queries that have one), and the mean largest weight of a row. `uniform` replaces
// the weights by 1 / (i + 1) on keys 0..i, as a head with no preference would give.
std::vector<HeadProfile> profile(const ag::Tensor& w, const ag::Tensor& x, const std::vector<bool>& is_break,
                                 bool uniform) {
  std::int64_t b = w.size(0), h = w.size(1), t = w.size(2), tk = w.size(3);
  const double* p = w.data_ptr<double>();
  const auto* ids = x.data_ptr<std::int64_t>();
  std::vector<HeadProfile> out(static_cast<std::size_t>(h));
  for (std::int64_t hi = 0; hi < h; ++hi) {
    HeadProfile& r = out[static_cast<std::size_t>(hi)];
    std::int64_t with_break = 0;
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t i = 0; i < t; ++i) {
        const double* row = p + ((bi * h + hi) * t + i) * tk;
        auto weight = [&](std::int64_t j) {
          return uniform ? (j <= i ? 1.0 / static_cast<double>(i + 1) : 0.0) : row[j];
        };
        r.self += weight(i);
        if (i > 0) r.previous += weight(i - 1);
        double largest = 0;
        for (std::int64_t j = 0; j <= i; ++j) largest = std::max(largest, weight(j));
        r.largest += largest;
        for (std::int64_t j = i - 1; j >= 0; --j)
          if (is_break[static_cast<std::size_t>(ids[bi * t + j])]) {
            r.last_break += weight(j);
            ++with_break;
            break;
          }
      }
    r.self /= static_cast<double>(b * t);
    r.previous /= static_cast<double>(b * (t - 1));
    r.largest /= static_cast<double>(b * t);
    r.last_break = with_break ? r.last_break / static_cast<double>(with_break) : NAN;
  }
  return out;
}

double js_divergence(const double* p, const double* q, std::int64_t n) {
  double d = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    double m = 0.5 * (p[j] + q[j]);
    if (p[j] > 0) d += 0.5 * p[j] * std::log(p[j] / m);
    if (q[j] > 0) d += 0.5 * q[j] * std::log(q[j] / m);
  }
  return d;
}

// Mean JS divergence between the heads of each layer; NaN with one head.
double head_divergence(const std::vector<ag::Tensor>& weights) {
  double sum = 0;
  std::int64_t count = 0;
  for (const ag::Tensor& w : weights) {
    std::int64_t b = w.size(0), h = w.size(1), t = w.size(2), tk = w.size(3);
    const double* p = w.data_ptr<double>();
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t i = 0; i < t; ++i)
        for (std::int64_t h1 = 0; h1 < h; ++h1)
          for (std::int64_t h2 = h1 + 1; h2 < h; ++h2) {
            sum += js_divergence(p + ((bi * h + h1) * t + i) * tk, p + ((bi * h + h2) * t + i) * tk, tk);
            ++count;
          }
  }
  return count ? sum / static_cast<double>(count) : NAN;
}

// Per head of one layer: the mean over queries of sum_j w_ij (i - j), how far back it looks.
std::vector<double> mean_distance(const ag::Tensor& w) {
  std::int64_t b = w.size(0), h = w.size(1), t = w.size(2), tk = w.size(3);
  const double* p = w.data_ptr<double>();
  std::vector<double> out(static_cast<std::size_t>(h), 0.0);
  for (std::int64_t hi = 0; hi < h; ++hi) {
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t i = 0; i < t; ++i)
        for (std::int64_t j = 0; j < tk; ++j)
          out[static_cast<std::size_t>(hi)] += p[((bi * h + hi) * t + i) * tk + j] * static_cast<double>(i - j);
    out[static_cast<std::size_t>(hi)] /= static_cast<double>(b * t);
  }
  return out;
}

}  // namespace

int heads(const Options& o) {
  Text text = load_text(o);
  fmt::print("Mini-GPTs with d_model 64 split into 1, 2, 4 and 8 heads, {} each on the same batches.\n\n",
             ag::examples::plural(o.steps, "step"));
  struct Row {
    std::int64_t heads, params;
    double val, div_before, div_after;
  };
  std::vector<Row> rows;
  std::vector<std::vector<double>> distances;      // the 4-head model's, per layer
  std::vector<std::vector<HeadProfile>> profiles;  // the 4-head model's, per layer, then a uniform head's
  std::vector<bool> is_break(static_cast<std::size_t>(text.tokenizer.size()));
  for (std::int64_t id = 0; id < text.tokenizer.size(); ++id) {
    std::string c = text.tokenizer.decode({id});
    is_break[static_cast<std::size_t>(id)] = c == " " || c == "\n";
  }
  for (std::int64_t h : {1, 2, 4, 8}) {
    ag::nn::GPTConfig config = small_gpt(text.tokenizer.size());
    config.n_head = h;
    ag::Generator init(o.seed);
    ag::nn::GPT model(config, init);
    Row r{h, model.parameter_count(), 0, head_divergence(attention_weights(model, text, o)), 0};
    train(model, text, o, fmt::format("{} head{}", h, h == 1 ? "" : "s"));
    r.val = validation_loss(model, text, o);
    std::vector<ag::Tensor> weights = attention_weights(model, text, o);
    r.div_after = head_divergence(weights);
    if (h == 4) {
      ag::Tensor x = probe_batch(model, text, o);
      for (const ag::Tensor& w : weights) {
        distances.push_back(mean_distance(w));
        profiles.push_back(profile(w, x, is_break, false));
      }
      profiles.push_back(profile(weights[0], x, is_break, true));
    }
    rows.push_back(r);
  }

  auto div = [](double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.2g}", v); };
  std::vector<std::vector<std::string>> table;
  for (const Row& r : rows)
    table.push_back({fmt::format("{}", r.heads), fmt::format("{}", 64 / r.heads), fmt::format("{}", r.params),
                     fmt::format("{:.4f}", r.val), div(r.div_before), div(r.div_after)});
  print_table({"heads", "d per head", "parameters", "val loss", "head JS before", "head JS after"}, table);

  fmt::print("\nHow far back each head of the 4-head model looks (mean of i - j under its weights):\n");
  std::vector<std::vector<std::string>> dist_table;
  for (std::size_t layer = 0; layer < distances.size(); ++layer) {
    std::vector<std::string> row{fmt::format("layer {}", layer)};
    for (double d : distances[layer]) row.push_back(fmt::format("{:.2f}", d));
    dist_table.push_back(row);
  }
  print_table({"", "head 0", "head 1", "head 2", "head 3"}, dist_table);

  fmt::print(
      "\nWhat each head of the 4-head model attends to: mean weight on the query's own character, on the one\n"
      "before it, and on the last space or newline before it; and each row's largest weight:\n");
  std::vector<std::vector<std::string>> profile_table;
  auto pct = [](double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.2f}", v); };
  for (std::size_t layer = 0; layer < profiles.size(); ++layer) {
    bool reference = layer + 1 == profiles.size();
    for (std::size_t hi = 0; hi < (reference ? 1 : profiles[layer].size()); ++hi) {
      const HeadProfile& r = profiles[layer][hi];
      profile_table.push_back({reference ? "even spread" : fmt::format("layer {} head {}", layer, hi), pct(r.self),
                               pct(r.previous), pct(r.last_break), pct(r.largest)});
    }
  }
  print_table({"head", "itself", "previous", "last space/newline", "largest weight"}, profile_table);
  fmt::print("\n");

  if (o.check) {
    bool same = true;
    for (const Row& r : rows) same = same && r.params == rows[0].params;
    expect(same, "splitting d_model into heads leaves the parameter count unchanged");
    const Row& four = rows[2];
    expect(four.div_after > 0.05 && four.div_after > 10 * four.div_before,
           "after training, the 4 heads of a layer attend differently (JS > 0.05 nats, 10x their start)");
    // A head that has specialised puts far more weight on one relation than an even spread does.
    const HeadProfile& even = profiles.back()[0];
    bool specialised = false;
    for (std::size_t layer = 0; layer + 1 < profiles.size(); ++layer)
      for (const HeadProfile& r : profiles[layer])
        specialised = specialised || r.self > 2 * even.self || r.previous > 2 * even.previous ||
                      r.last_break > 2 * even.last_break;
    expect(specialised,
           "some trained head puts twice an even spread's weight on itself, the previous character or "
           "the last space");
  }
  return exit_code();
}

}  // namespace experiments
