#include "generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../autograd/error.h"
#include "../autograd/grad_mode.h"

namespace ag::nn {

std::int64_t sample_token(const Tensor& logits, double temperature, std::int64_t top_k, Generator& generator) {
  if (logits.dim() != 1 || logits.numel() == 0)
    throw_invalid("sample_token", "expects one row of logits [V], got shape {}", shape_str(logits.shape()));
  if (!(temperature >= 0)) throw_invalid("sample_token", "temperature must be >= 0, got {}", temperature);
  if (top_k < 0) throw_invalid("sample_token", "top_k must be >= 0, got {}", top_k);
  Tensor row = logits.to(kFloat64);
  std::vector<double> z(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
  auto best = std::max_element(z.begin(), z.end());
  if (temperature == 0) return best - z.begin();
  // Keep the k largest logits: everything below the k-th largest gets probability 0.
  if (top_k > 0 && top_k < static_cast<std::int64_t>(z.size())) {
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    double kth = sorted[static_cast<std::size_t>(top_k - 1)];
    for (double& v : z)
      if (v < kth) v = -INFINITY;
  }
  // p_i = exp((z_i - max) / T) / sum: the stable softmax of z / T, then one uniform draw.
  double m = *best, total = 0;
  for (double& v : z) total += (v = std::exp((v - m) / temperature));
  double u = generator.uniform() * total;
  for (std::size_t i = 0; i < z.size(); ++i) {
    u -= z[i];
    if (u < 0) return static_cast<std::int64_t>(i);
  }
  return best - z.begin();  // rounding left u just above 0: the most likely token
}

std::vector<std::int64_t> generate(GPT& model, std::vector<std::int64_t> ids, const SamplingOptions& options,
                                   Generator& generator) {
  if (ids.empty()) throw_invalid("generate", "the prompt must hold at least one token");
  if (options.max_new_tokens < 0)
    throw_invalid("generate", "max_new_tokens must be non-negative, got {}", options.max_new_tokens);
  NoGradGuard no_grad;
  bool was_training = model.is_training();
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
  model.train(was_training);
  return ids;
}

}  // namespace ag::nn
