#include "generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../autograd/grad_mode.h"
#include "../runtime/error.h"

namespace ag::nn {

namespace {

void check_sampling(const char* where, double temperature, std::int64_t top_k) {
  if (!(temperature >= 0))  // NaN fails this too
    throw_invalid(where, "temperature must be >= 0, got {} (0: the most likely token; inf: uniform over the top k)",
                  temperature);
  if (top_k < 0) throw_invalid(where, "top_k must be >= 0, got {} (0: every token)", top_k);
}

}  // namespace

// p_i = exp((z_i - max) / T) / sum over the candidates (the k largest), 0 for the rest: the
// stable softmax of z / T. Its limits are computed as limits, not by the arithmetic, which would
// give NaN: T = 0 is the argmax; T = inf gives every candidate the same weight (the excluded
// ones, at -inf, would be -inf / inf); a logit of +inf takes all the weight, shared with any
// other +inf. A logit of -inf is never drawn, at any temperature.
std::int64_t sample_token(const Tensor& logits, double temperature, std::int64_t top_k, Generator& generator) {
  if (logits.dim() != 1 || logits.numel() == 0)
    throw_invalid("sample_token", "expects one row of logits [V], got shape {}", shape_str(logits.shape()));
  check_sampling("sample_token", temperature, top_k);
  Tensor row = logits.to(kFloat64);
  std::vector<double> z(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
  for (std::size_t i = 0; i < z.size(); ++i)
    if (std::isnan(z[i]))
      throw_invalid("sample_token", "logit {} of {} is NaN; no distribution to draw from", i, z.size());
  auto best = std::max_element(z.begin(), z.end());
  const double m = *best;
  if (m == -INFINITY)
    throw_invalid("sample_token", "every one of the {} logits is -inf: no token can be drawn", z.size());
  if (temperature == 0) return best - z.begin();
  // The candidates: the k largest logits, and any tied with the k-th (0 or k >= V: all of them).
  double kth = -INFINITY;
  if (top_k > 0 && top_k < static_cast<std::int64_t>(z.size())) {
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    kth = sorted[static_cast<std::size_t>(top_k - 1)];
  }
  std::vector<double> w(z.size());
  double total = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    double v = z[i];
    bool candidate = v >= kth && v != -INFINITY;
    w[i] = !candidate                ? 0.0
           : m == INFINITY           ? (v == INFINITY ? 1.0 : 0.0)
           : std::isinf(temperature) ? 1.0
                                     : std::exp((v - m) / temperature);
    total += w[i];
  }
  double u = generator.uniform() * total;
  std::size_t last = 0;  // the last token with a weight: where rounding can leave u just above 0
  for (std::size_t i = 0; i < z.size(); ++i) {
    if (w[i] == 0) continue;
    last = i;
    u -= w[i];
    if (u < 0) return static_cast<std::int64_t>(i);
  }
  return static_cast<std::int64_t>(last);
}

std::vector<std::int64_t> generate(GPT& model, std::vector<std::int64_t> ids, const SamplingOptions& options,
                                   Generator& generator) {
  if (ids.empty()) throw_invalid("generate", "the prompt must hold at least one token");
  if (options.max_new_tokens < 0)
    throw_invalid("generate", "max_new_tokens must be non-negative, got {}", options.max_new_tokens);
  check_sampling("generate", options.temperature, options.top_k);  // before the first forward pass, not after it
  NoGradGuard no_grad;
  // Back to the caller's mode however this ends: a forward pass or a draw may throw (a token id
  // out of the vocabulary, NaN logits), and a caller that goes on training after catching it
  // must not be left in eval mode, with dropout silently off.
  struct ModeRestorer {
    GPT& model;
    bool was_training;
    ~ModeRestorer() { model.train(was_training); }
  } restore{model, model.is_training()};
  model.eval();
  std::int64_t block = model.config.block_size;
  std::vector<KVCache> cache;
  std::size_t cached = 0;  // how many of ids have their keys and values in the cache
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    Tensor logits;
    auto n = static_cast<std::int64_t>(ids.size());
    if (options.use_cache && n <= block) {
      std::vector<std::int64_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(cached), ids.end());
      logits = model.forward(from_vector(fresh, {1, static_cast<std::int64_t>(fresh.size())}), &cache);
      cached = ids.size();
    } else {
      std::int64_t start = std::max<std::int64_t>(0, n - block);
      std::vector<std::int64_t> window(ids.begin() + start, ids.end());
      logits = model.forward(from_vector(window, {1, n - start}));
    }
    Tensor last = logits.slice(1, logits.size(1) - 1, logits.size(1)).reshape({logits.size(2)});
    ids.push_back(sample_token(last, options.temperature, options.top_k, generator));
  }
  return ids;
}

}  // namespace ag::nn
