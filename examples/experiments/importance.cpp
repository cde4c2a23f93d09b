// Attention weights against importance: does where a model attends say which inputs matter?
//
// A trained Mini-GPT predicts the character after a 32-character validation window. For each
// window, each earlier position j gets four scores for that last prediction:
// - attention, last layer: the last query's weight on j, averaged over the heads;
// - attention rollout: the layers' head-averaged weights, each mixed half and half with the
//   identity for the residual path, multiplied through (Abnar and Zuidema, 2020);
// - gradient: the norm of d loss / d x_j, x_j the input vector at j (with one sequence in the
//   batch, this is the gradient reaching row j of the position table wpe);
// - leave-one-out: how much the loss rises when the character at j is replaced by another
//   (by the corpus's most frequent character, or its second where that one stands: on English
//   text a space, or 'e' where there was a space).
// Agreement between two scores is the Spearman rank correlation over the 31 earlier positions
// (the last one, the character being continued, always matters most), averaged over windows,
// and the overlap of their three highest-scoring positions. "Recency" (closer is
// more important) is there as the baseline any score should be compared with.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < order.size();) {  // ties share the mean of their ranks
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) r[order[k]] = 0.5 * static_cast<double>(i + j);
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> ra = ranks(a), rb = ranks(b);
  double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / static_cast<double>(ra.size());
  double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / static_cast<double>(rb.size());
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

// How many of the three highest-scoring positions of `a` are among the three of `b`.
int overlap3(const std::vector<double>& a, const std::vector<double>& b) {
  auto top3 = [](const std::vector<double>& v) {
    std::vector<std::size_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](std::size_t x, std::size_t y) { return v[x] > v[y]; });
    return std::vector<std::size_t>(order.begin(), order.begin() + 3);
  };
  std::vector<std::size_t> ta = top3(a), tb = top3(b);
  int n = 0;
  for (std::size_t i : ta) n += std::count(tb.begin(), tb.end(), i) > 0 ? 1 : 0;
  return n;
}

// Loss of the prediction at the last position for each row of ids [N, T].
std::vector<double> last_position_losses(ag::nn::GPT& model, const Tensor& ids,
                                         const std::vector<std::int64_t>& target) {
  Tensor logits = model.forward(ids).to(ag::kFloat64);
  std::int64_t n = logits.size(0), t = logits.size(1), v = logits.size(2);
  const double* p = logits.data_ptr<double>();
  std::vector<double> out;
  for (std::int64_t r = 0; r < n; ++r) {
    const double* row = p + (r * t + t - 1) * v;
    double m = *std::max_element(row, row + v), s = 0;
    for (std::int64_t c = 0; c < v; ++c) s += std::exp(row[c] - m);
    out.push_back(m + std::log(s) - row[target[static_cast<std::size_t>(r)]]);
  }
  return out;
}

}  // namespace

int importance(const Options& o) {
  Text text = load_text(o);
  ag::Generator init(o.seed);
  ag::nn::GPT model(small_gpt(text.tokenizer.size()), init);
  train(model, text, o, "Mini-GPT");
  model.eval();
  const std::int64_t t = model.config.block_size, windows = 200;
  // Leave-one-out replaces a character by the corpus's most frequent one, or by the second most
  // frequent where it already stands: on English text, a space, or 'e' in place of a space.
  std::vector<std::int64_t> counts(static_cast<std::size_t>(text.tokenizer.size()), 0);
  for (std::int64_t id : text.dataset.tokens(ag::data::TextDataset::Split::Train))
    ++counts[static_cast<std::size_t>(id)];
  std::vector<std::int64_t> by_count(counts.size());
  std::iota(by_count.begin(), by_count.end(), 0);
  std::stable_sort(by_count.begin(), by_count.end(), [&](std::int64_t a, std::int64_t b) {
    return counts[static_cast<std::size_t>(a)] > counts[static_cast<std::size_t>(b)];
  });
  const std::int64_t most = by_count.at(0), second = by_count.size() > 1 ? by_count[1] : most;

  enum { kLast, kRollout, kGradient, kLeaveOneOut, kRecency, kScores };
  const char* names[kScores] = {"attention (last layer)", "attention rollout", "gradient", "leave-one-out", "recency"};
  std::vector<std::vector<double>> rho(kScores, std::vector<double>(kScores, 0.0)), top(rho);

  ag::Generator gen(o.seed + 400);
  for (std::int64_t w = 0; w < windows; ++w) {
    auto batch = text.dataset.sample(ag::data::TextDataset::Split::Validation, 1, t, gen);
    std::vector<std::int64_t> ids(batch.x.data_ptr<std::int64_t>(), batch.x.data_ptr<std::int64_t>() + t);
    std::int64_t target = batch.y.data_ptr<std::int64_t>()[t - 1];
    std::vector<std::vector<double>> score(kScores, std::vector<double>(static_cast<std::size_t>(t), 0.0));

    {  // attention: last layer, and rollout through all layers
      ag::NoGradGuard no_grad;
      std::vector<Tensor> weights;
      model.forward(batch.x, nullptr, &weights);
      std::vector<double> rollout(static_cast<std::size_t>(t * t), 0.0);  // starts as the identity
      for (std::int64_t i = 0; i < t; ++i) rollout[static_cast<std::size_t>(i * t + i)] = 1.0;
      for (const Tensor& wl : weights) {
        Tensor w64 = wl.to(ag::kFloat64);
        std::int64_t heads = w64.size(1);
        const double* p = w64.data_ptr<double>();
        std::vector<double> mixed(static_cast<std::size_t>(t * t), 0.0), next(mixed.size(), 0.0);
        for (std::int64_t i = 0; i < t; ++i)
          for (std::int64_t j = 0; j < t; ++j) {
            double a = 0;
            for (std::int64_t h = 0; h < heads; ++h) a += p[(h * t + i) * t + j] / static_cast<double>(heads);
            mixed[static_cast<std::size_t>(i * t + j)] = 0.5 * a + (i == j ? 0.5 : 0.0);
            if (&wl == &weights.back() && i == t - 1) score[kLast][static_cast<std::size_t>(j)] = a;
          }
        for (std::int64_t i = 0; i < t; ++i)  // next = mixed * rollout
          for (std::int64_t k = 0; k < t; ++k)
            for (std::int64_t j = 0; j < t; ++j)
              next[static_cast<std::size_t>(i * t + j)] +=
                  mixed[static_cast<std::size_t>(i * t + k)] * rollout[static_cast<std::size_t>(k * t + j)];
        rollout = next;
      }
      for (std::int64_t j = 0; j < t; ++j)
        score[kRollout][static_cast<std::size_t>(j)] = rollout[static_cast<std::size_t>((t - 1) * t + j)];
    }
    {  // gradient: with one sequence, row j of wpe's gradient is d loss / d x_j
      model.zero_grad();
      Tensor logits = model.forward(batch.x);
      Tensor last = logits.slice(1, t - 1, t).reshape({1, -1});
      ag::cross_entropy(last, ag::from_vector<std::int64_t>({target}, {1})).backward();
      Tensor g = model.wpe->weight.grad().to(ag::kFloat64);
      for (std::int64_t j = 0; j < t; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < g.size(1); ++c)
          s += g.data_ptr<double>()[j * g.size(1) + c] * g.data_ptr<double>()[j * g.size(1) + c];
        score[kGradient][static_cast<std::size_t>(j)] = std::sqrt(s);
      }
      model.zero_grad();
    }
    {  // leave-one-out: row j of the batch has position j replaced; one forward for all 32
      ag::NoGradGuard no_grad;
      std::vector<std::int64_t> occluded;
      for (std::int64_t j = 0; j < t; ++j)
        for (std::int64_t i = 0; i < t; ++i)
          occluded.push_back(i == j ? (ids[static_cast<std::size_t>(i)] == most ? second : most)
                                    : ids[static_cast<std::size_t>(i)]);
      std::vector<double> base = last_position_losses(model, batch.x, {target});
      std::vector<double> losses = last_position_losses(model, ag::from_vector(occluded, {t, t}),
                                                        std::vector<std::int64_t>(static_cast<std::size_t>(t), target));
      for (std::int64_t j = 0; j < t; ++j)
        score[kLeaveOneOut][static_cast<std::size_t>(j)] = losses[static_cast<std::size_t>(j)] - base[0];
    }
    for (std::int64_t j = 0; j < t; ++j) score[kRecency][static_cast<std::size_t>(j)] = static_cast<double>(j);

    // The last position is the character being continued and always matters most; the question
    // is which of the earlier ones do, so they are compared over positions 0 to t - 2.
    for (auto& sc : score) sc.pop_back();
    for (int a = 0; a < kScores; ++a)
      for (int b = 0; b < kScores; ++b) {
        rho[a][b] += spearman(score[a], score[b]) / static_cast<double>(windows);
        top[a][b] += static_cast<double>(overlap3(score[a], score[b])) / (3.0 * static_cast<double>(windows));
      }
  }

  fmt::print("\nSpearman rank correlation over the 31 earlier positions, mean over {} windows:\n", windows);
  std::vector<std::vector<std::string>> table;
  for (int a = 0; a < kScores; ++a) {
    std::vector<std::string> row{names[a]};
    for (int b = 0; b < kScores; ++b) row.push_back(a == b ? "1" : fmt::format("{:+.3f}", rho[a][b]));
    table.push_back(row);
  }
  print_table({"", "last layer", "rollout", "gradient", "leave-one-out", "recency"}, table);
  fmt::print("\nOverlap of the three most important earlier positions (3 of 3 = 100%; chance is 10%):\n");
  table.clear();
  for (int a = 0; a < kScores; ++a) {
    std::vector<std::string> row{names[a]};
    for (int b = 0; b < kScores; ++b) row.push_back(a == b ? "-" : fmt::format("{:.0f}%", 100 * top[a][b]));
    table.push_back(row);
  }
  print_table({"", "last layer", "rollout", "gradient", "leave-one-out", "recency"}, table);
  fmt::print("\n");

  if (o.check) {
    expect(top[kGradient][kLeaveOneOut] > top[kLast][kLeaveOneOut] + 0.1,
           "gradients find the positions whose removal hurts far better than last-layer attention does");
    expect(top[kLast][kLeaveOneOut] < top[kRecency][kLeaveOneOut] - 0.1,
           "last-layer attention weights are a worse guide to them than 'closer matters more'");
  }
  return exit_code();
}

}  // namespace experiments
