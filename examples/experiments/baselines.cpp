// Why attention at all: three language models on the same characters.
//
// - bigram: p(next | previous character), counted on the training text (add-0.1 smoothing);
// - window MLP: the neural language model of Bengio et al. (2003). The embeddings of the last
//   8 characters, concatenated, go through one tanh layer to the next character's logits. It
//   sees a fixed window and nothing before it;
// - Mini-GPT: causal self-attention over the whole 32-character context.
//
// The MLP and the GPT have about the same number of parameters and train the same steps on
// the same batches. All three are scored on the same validation windows, at the positions that
// have a full 8-character window (so the MLP is not penalised for the first 7); the GPT's loss
// is also shown at every position of its context, 0 to 31.
#include <fmt/core.h>

#include <cmath>
#include <filesystem>

#include "../common/plot.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

constexpr std::int64_t kWindow = 8, kEmbed = 16, kHidden = 448;

// Cross-entropy per position: logits [B, L, V], targets [B, L] -> L values averaged over B.
std::vector<double> loss_by_position(const Tensor& logits, const Tensor& targets) {
  Tensor lg = logits.to(ag::kFloat64);
  std::int64_t b = lg.size(0), l = lg.size(1), v = lg.size(2);
  const double* p = lg.data_ptr<double>();
  const auto* y = targets.data_ptr<std::int64_t>();
  std::vector<double> out(static_cast<std::size_t>(l), 0.0);
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t j = 0; j < l; ++j) {
      const double* row = p + (bi * l + j) * v;
      double m = *std::max_element(row, row + v), s = 0;
      for (std::int64_t c = 0; c < v; ++c) s += std::exp(row[c] - m);
      out[static_cast<std::size_t>(j)] += (m + std::log(s) - row[y[bi * l + j]]) / static_cast<double>(b);
    }
  return out;
}

void accumulate(std::vector<double>& sum, const std::vector<double>& add, double weight) {
  if (sum.empty()) sum.assign(add.size(), 0.0);
  for (std::size_t i = 0; i < add.size(); ++i) sum[i] += add[i] * weight;
}

double mean_from(const std::vector<double>& v, std::size_t first) {
  double s = 0;
  for (std::size_t i = first; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(v.size() - first);
}

}  // namespace

int baselines(const Options& o) {
  Text text = load_text(o);
  const std::int64_t vocab = text.tokenizer.size();
  ag::nn::GPTConfig config = small_gpt(vocab);
  const std::int64_t block = config.block_size;
  fmt::print("Three language models of the same {} characters (vocabulary {}); the MLP and the GPT train {}.\n",
             text.dataset.size(ag::data::TextDataset::Split::Train), vocab, ag::examples::plural(o.steps, "step"));
  fmt::print("(uniform guessing would score ln {} = {:.3f} nats, perplexity {})\n\n", vocab,
             std::log(static_cast<double>(vocab)), vocab);

  // Bigram: counts of (previous, next) over the training text.
  const auto& train_ids = text.dataset.tokens(ag::data::TextDataset::Split::Train);
  std::vector<double> counts(static_cast<std::size_t>(vocab * vocab), 0.1);
  for (std::size_t i = 1; i < train_ids.size(); ++i)
    counts[static_cast<std::size_t>(train_ids[i - 1] * vocab + train_ids[i])] += 1;
  for (std::int64_t a = 0; a < vocab; ++a) {
    double row = 0;
    for (std::int64_t c = 0; c < vocab; ++c) row += counts[static_cast<std::size_t>(a * vocab + c)];
    for (std::int64_t c = 0; c < vocab; ++c) counts[static_cast<std::size_t>(a * vocab + c)] /= row;
  }

  ag::Generator init(o.seed);
  WindowMLP mlp(vocab, kWindow, kEmbed, kHidden, init);
  ag::Generator init_gpt(o.seed);
  ag::nn::GPT gpt(config, init_gpt);
  train_with(mlp, text, o, block, "window MLP", [&](const Tensor& x, const Tensor& y) {
    Tensor logits = mlp.forward(x);
    return ag::cross_entropy(logits.reshape({-1, vocab}), window_targets(y, kWindow).reshape({-1}));
  });
  train(gpt, text, o, "Mini-GPT");

  // Loss by position on the same validation windows.
  std::vector<double> gpt_pos, mlp_pos, bigram_pos;
  {
    ag::NoGradGuard no_grad;
    mlp.eval();
    gpt.eval();
    auto batches = validation_batches(text, o, block, 100);  // 1600 windows: each position's loss within ~0.03
    double w = 1.0 / static_cast<double>(batches.size());
    for (const auto& b : batches) {
      accumulate(gpt_pos, loss_by_position(gpt.forward(b.x), b.y), w);
      accumulate(mlp_pos, loss_by_position(mlp.forward(b.x), window_targets(b.y, kWindow)), w);
      std::vector<double> bg(static_cast<std::size_t>(block), 0.0);
      const auto *x = b.x.data_ptr<std::int64_t>(), *y = b.y.data_ptr<std::int64_t>();
      for (std::int64_t bi = 0; bi < o.batch; ++bi)
        for (std::int64_t j = 0; j < block; ++j)
          bg[static_cast<std::size_t>(j)] -=
              std::log(counts[static_cast<std::size_t>(x[bi * block + j] * vocab + y[bi * block + j])]) /
              static_cast<double>(o.batch);
      accumulate(bigram_pos, bg, w);
    }
  }
  const std::size_t full = kWindow - 1;  // first position with a full window
  double bigram = mean_from(bigram_pos, full), mlp_loss = mean_from(mlp_pos, 0), gpt_loss = mean_from(gpt_pos, full);

  auto f = [](double v) { return fmt::format("{:.4f}", v); };
  // Perplexity e^loss: the number of equally likely characters that would leave the model as
  // unsure as it is (uniform guessing: the vocabulary's size).
  auto ppl = [](double loss) { return fmt::format("{:.2f}", std::exp(loss)); };
  print_table({"model", "parameters", "context", "val loss (positions 7-31)", "perplexity"},
              {{"bigram (counted)", fmt::format("{} (table)", vocab * vocab), "1 character", f(bigram), ppl(bigram)},
               {"window MLP", fmt::format("{}", mlp.parameter_count()), fmt::format("{} characters", kWindow),
                f(mlp_loss), ppl(mlp_loss)},
               {"Mini-GPT", fmt::format("{}", gpt.parameter_count()), fmt::format("up to {} characters", block),
                f(gpt_loss), ppl(gpt_loss)}});

  fmt::print("\nMini-GPT validation loss by position (how many characters it has seen, minus one):\n");
  std::vector<std::vector<std::string>> rows;
  for (std::int64_t j : {0, 1, 2, 3, 5, 7, 11, 15, 23, 31})
    rows.push_back({fmt::format("{}", j), f(gpt_pos[static_cast<std::size_t>(j)]),
                    j >= kWindow - 1 ? f(mlp_pos[static_cast<std::size_t>(j - kWindow + 1)]) : std::string("-"),
                    f(bigram_pos[static_cast<std::size_t>(j)])});
  print_table({"position", "Mini-GPT", "window MLP", "bigram"}, rows);

  std::filesystem::create_directories(o.out);
  std::vector<double> xs, xs_mlp;
  for (std::int64_t j = 0; j < block; ++j) xs.push_back(static_cast<double>(j));
  for (std::int64_t j = kWindow - 1; j < block; ++j) xs_mlp.push_back(static_cast<double>(j));
  std::string png = (std::filesystem::path(o.out) / "loss_by_position.png").string();
  ag::plot::line_plot_png(
      png, {{"Mini-GPT", xs, gpt_pos}, {"window MLP (8 characters)", xs_mlp, mlp_pos}, {"bigram", xs, bigram_pos}},
      "validation loss by position in the context", "position", "cross-entropy (nats)");
  fmt::print("\nwrote {}\n\n", png);

  if (o.check) {
    expect(mlp_loss < bigram - 0.1, "the 8-character MLP beats the bigram model");
    expect(gpt_loss < mlp_loss, "the Mini-GPT beats the MLP at the same positions and a similar size");
    expect(gpt_pos.front() > mean_from(gpt_pos, static_cast<std::size_t>(block) * 3 / 4) + 0.3,
           "the Mini-GPT's loss falls as it sees more of the context");
  }
  return exit_code();
}

}  // namespace experiments
