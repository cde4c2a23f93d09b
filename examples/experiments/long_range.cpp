// Long-range dependencies: a next-token task whose answer lies exactly k tokens back.
//
// Each sequence of 64 tokens over 16 symbols starts with k random tokens and then repeats them:
// s_t = s_(t-k) for t >= k. The first k tokens cannot be predicted; every later one can, by a
// model that reads the token k positions back. Chance is 1 in 16 (6.25 %).
//
// Accuracy at the predictable positions, by k, for:
// - a bigram table (the previous token only): s_(t-1) says nothing about s_t, so chance;
// - the window MLP of experiments baselines (the last 8 tokens): right for k <= 8, chance beyond;
// - a GPT (causal attention over all 64 positions): its attention can reach any k;
// - the same GPT given too little: an eighth of the training steps, or the full steps on only
//   16 distinct training sequences. The path to the answer is the same; whether the model learns
//   to take it is not.
//
// The MLP and the GPTs are trained on the predictable positions only; --every-position adds the
// first k, whose targets are pure noise, to the loss, which is the plain next-token objective.
//
// Attention makes long-range dependencies reachable; it does not make them learned. The
// chapter lists this among its misconceptions, and names data, objective, scale and optimisation
// as what decides it.
#include <filesystem>
#include <numeric>

#include "../common/plot.h"
#include "../common/progress.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

constexpr std::int64_t kSymbols = 16, kLength = 64, kWindow = 8, kScarceSequences = 16, kIgnore = -1;

// `count` sequences with period k, from `gen`: [count, kLength + 1] so that x and y = x shifted
// by one are both kLength long.
std::vector<std::int64_t> periodic_sequences(std::int64_t count, std::int64_t k, ag::Generator& gen) {
  std::vector<std::int64_t> s(static_cast<std::size_t>(count * (kLength + 1)));
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t t = 0; t <= kLength; ++t) {
      auto at = static_cast<std::size_t>(i * (kLength + 1) + t);
      s[at] = t < k ? gen.integer(0, kSymbols) : s[at - static_cast<std::size_t>(k)];
    }
  return s;
}

struct Batch {
  Tensor x, y;  // int64 [B, kLength]
};

// Rows `rows` of `pool` (sequences of kLength + 1 tokens) as inputs and next-token targets.
Batch batch_of(const std::vector<std::int64_t>& pool, const std::vector<std::int64_t>& rows) {
  std::vector<std::int64_t> x, y;
  for (std::int64_t r : rows) {
    auto begin = pool.begin() + r * (kLength + 1);
    x.insert(x.end(), begin, begin + kLength);
    y.insert(y.end(), begin + 1, begin + kLength + 1);
  }
  auto b = static_cast<std::int64_t>(rows.size());
  return {ag::from_vector(x, {b, kLength}), ag::from_vector(y, {b, kLength})};
}

// The share of predictable targets predicted right. logits [B, L, V] predict y[:, first:]
// (first = kLength - L: the window MLP starts at its first full window); target y[:, j] is
// s_(j+1), predictable when j + 1 >= k.
double accuracy(const Tensor& logits, const Tensor& y, std::int64_t k) {
  Tensor predicted = ag::argmax(logits, -1);
  std::int64_t b = predicted.size(0), l = predicted.size(1), first = kLength - l, right = 0, total = 0;
  const auto *p = predicted.data_ptr<std::int64_t>(), *t = y.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t j = std::max<std::int64_t>(first, k - 1); j < kLength; ++j) {
      right += p[i * l + j - first] == t[i * kLength + j];
      ++total;
    }
  return static_cast<double>(right) / static_cast<double>(total);
}

// AdamW with warm-up + cosine, `steps` batches drawn from `pool` (fresh sequences each step
// when pool is null); loss_of gives the loss of a batch.
void fit(ag::nn::Module& model, std::int64_t k, std::int64_t steps, const Options& o,
         const std::vector<std::int64_t>* pool, const std::string& label,
         const std::function<Tensor(const Batch&)>& loss_of) {
  ag::Generator data(o.seed + 10 + static_cast<std::uint64_t>(k));
  ag::optim::AdamW opt(ag::optim::decay_groups(model, 0.1), {.lr = 3e-3});
  ag::optim::WarmupCosine schedule{.warmup = steps / 10, .total = steps, .max_lr = 3e-3, .min_lr = 3e-4};
  ag::examples::ProgressBar bar(steps);
  model.train();
  for (std::int64_t step = 0; step < steps; ++step) {
    Batch b;
    if (pool == nullptr) {
      b = batch_of(periodic_sequences(o.batch, k, data), [&] {
        std::vector<std::int64_t> rows(static_cast<std::size_t>(o.batch));
        std::iota(rows.begin(), rows.end(), 0);
        return rows;
      }());
    } else {
      std::vector<std::int64_t> rows;
      for (std::int64_t i = 0; i < o.batch; ++i) rows.push_back(data.integer(0, std::ssize(*pool) / (kLength + 1)));
      b = batch_of(*pool, rows);
    }
    opt.set_lr(schedule.lr_at(step));
    Tensor loss = loss_of(b);
    opt.zero_grad();
    loss.backward();
    ag::optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    bar.update(step + 1, (step + 1) * o.batch * kLength, fmt::format("k = {}, {}  loss {:.4f}", k, label, loss.item()));
  }
  bar.finish();
  model.eval();
}

// One layer is enough to copy from a fixed distance: one head that attends k back.
ag::nn::GPTConfig gpt_config() {
  return {.vocab_size = kSymbols, .block_size = kLength, .n_layer = 1, .n_head = 4, .n_embd = 64};
}

// The targets with the unpredictable ones (the first k - 1, which are s_1 .. s_(k-1)) set to
// ignore_index, unless every position counts. y [B, L] holds targets s_(first+1) ...
Tensor predictable_targets(const Tensor& y, std::int64_t k, std::int64_t first, bool every_position) {
  if (every_position) return y;
  std::vector<std::int64_t> t = y.to_vector<std::int64_t>();
  std::int64_t l = y.size(1);
  for (std::size_t i = 0; i < t.size(); ++i)
    if (first + static_cast<std::int64_t>(i) % l + 1 < k) t[i] = kIgnore;
  return ag::from_vector(t, y.shape());
}

}  // namespace

int long_range(const Options& o) {
  const std::vector<std::int64_t>& ks = o.distances;
  fmt::print(
      "Sequences of {} tokens over {} symbols that repeat with period k: the next token is the one k back.\n"
      "Accuracy at the predictable positions (t >= k) of 200 held-out sequences; chance is {:.2f} %.\n"
      "The MLP and the GPTs train {} of {} sequences; the scarce-data GPT draws them from {} sequences.\n\n",
      kLength, kSymbols, 100.0 / kSymbols, ag::examples::plural(o.steps, "step"), o.batch, kScarceSequences);

  const std::vector<std::string> labels{"bigram", "window MLP (8)", "GPT",
                                        fmt::format("GPT, {} steps", std::max<std::int64_t>(1, o.steps / 8)),
                                        fmt::format("GPT, {} sequences", kScarceSequences)};
  std::vector<std::vector<double>> acc(labels.size());
  for (std::int64_t k : ks) {
    ag::Generator held_out_gen(o.seed + 1000 + static_cast<std::uint64_t>(k));
    const std::vector<std::int64_t> held_out = periodic_sequences(200, k, held_out_gen);
    std::vector<std::int64_t> all(200);
    std::iota(all.begin(), all.end(), 0);
    const Batch test = batch_of(held_out, all);

    // Bigram: counts of (previous, next) over as many training tokens as the GPT sees.
    {
      ag::Generator data(o.seed + 10 + static_cast<std::uint64_t>(k));
      std::vector<double> counts(kSymbols * kSymbols, 0.0);
      std::vector<std::int64_t> train = periodic_sequences(o.steps * o.batch, k, data);
      for (std::size_t i = 0; i + 1 < train.size(); ++i)
        if ((i + 1) % (kLength + 1) != 0) counts[static_cast<std::size_t>(train[i] * kSymbols + train[i + 1])] += 1;
      // Row s_(t-1) of the table as the logits of s_t: the same argmax as the probabilities.
      Tensor logits = ag::embedding(ag::from_vector(counts, {kSymbols, kSymbols}), test.x);
      acc[0].push_back(accuracy(logits, test.y, k));
    }
    {
      ag::Generator init(o.seed);
      WindowMLP mlp(kSymbols, kWindow, 16, 256, init);
      fit(mlp, k, o.steps, o, nullptr, labels[1], [&](const Batch& b) {
        Tensor y = predictable_targets(window_targets(b.y, kWindow), k, kWindow - 1, o.every_position);
        return ag::cross_entropy(mlp.forward(b.x), y, kIgnore);
      });
      ag::NoGradGuard guard;
      acc[1].push_back(accuracy(mlp.forward(test.x), test.y, k));
    }
    ag::Generator scarce_gen(o.seed + 2000 + static_cast<std::uint64_t>(k));
    const std::vector<std::int64_t> scarce = periodic_sequences(kScarceSequences, k, scarce_gen);
    struct GptRun {
      std::int64_t steps;
      const std::vector<std::int64_t>* pool;  // null: fresh sequences every step
    };
    const GptRun gpt_runs[] = {
        {o.steps, nullptr}, {std::max<std::int64_t>(1, o.steps / 8), nullptr}, {o.steps, &scarce}};
    for (std::size_t r = 0; r < std::size(gpt_runs); ++r) {
      ag::Generator init(o.seed);
      ag::nn::GPT gpt(gpt_config(), init);
      fit(gpt, k, gpt_runs[r].steps, o, gpt_runs[r].pool, labels[2 + r], [&](const Batch& b) {
        return ag::cross_entropy(gpt.forward(b.x), predictable_targets(b.y, k, 0, o.every_position), kIgnore);
      });
      ag::NoGradGuard guard;
      acc[2 + r].push_back(accuracy(gpt.forward(test.x), test.y, k));
    }
  }

  std::vector<std::string> header{"k"};
  header.insert(header.end(), labels.begin(), labels.end());
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < ks.size(); ++i) {
    std::vector<std::string> row{fmt::format("{}", ks[i])};
    for (const auto& a : acc) row.push_back(fmt::format("{:.1f} %", 100 * a[i]));
    rows.push_back(row);
  }
  print_table(header, rows);

  std::filesystem::create_directories(o.out);
  std::vector<ag::plot::Series> series;
  std::vector<double> xs(ks.begin(), ks.end());
  for (std::size_t m = 0; m < labels.size(); ++m) {
    std::vector<double> ys;
    for (double a : acc[m]) ys.push_back(100 * a);
    series.push_back({labels[m], xs, ys});
  }
  series.push_back({"chance", {xs.front(), xs.back()}, {100.0 / kSymbols, 100.0 / kSymbols}});
  std::string png = (std::filesystem::path(o.out) / "long_range.png").string();
  ag::plot::line_plot_png(png, series, "the next token is the one k back", "k (tokens back)", "held-out accuracy (%)");
  fmt::print("\nwrote {}\n\n", png);

  if (o.check) {
    auto at = [&](std::size_t model, std::int64_t k) {
      return acc[model][static_cast<std::size_t>(std::find(ks.begin(), ks.end(), k) - ks.begin())];
    };
    const std::int64_t far = ks.back();
    expect(at(0, far) < 0.15 && at(0, ks.front()) < 0.15, "the bigram stays near chance at every k");
    expect(at(1, ks.front()) > 0.9 && at(1, far) < 0.15,
           fmt::format("the window MLP solves k = {} and is near chance at k = {}", ks.front(), far));
    expect(at(2, far) > 0.9, fmt::format("the GPT reaches k = {}: above 90 %", far));
    expect(at(3, far) < at(2, far) - 0.3 && at(4, far) < at(2, far) - 0.3,
           fmt::format("with too little training or data the same GPT falls 30 points short at k = {}", far));
  }
  return exit_code();
}

}  // namespace experiments
