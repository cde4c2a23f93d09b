// Autoregressive sampling from a GPT: predict a distribution over the next token, draw one,
// append it, repeat.
#pragma once

#include <cstdint>
#include <vector>

#include "../autograd/generator.h"
#include "../nn/gpt.h"

namespace ag::nn {

struct SamplingOptions {
  std::int64_t max_new_tokens = 200;
  double temperature = 1.0;  // logits are divided by it; 0: always the most likely token; inf:
                             // uniformly among the top k; NaN and negative values are refused
  std::int64_t top_k = 0;    // sample among the k most likely tokens only (and any tied with the
                             // k-th); 0 = all of them
  bool use_cache = true;     // keep keys and values instead of recomputing the prefix
};

// Draws one token id from `logits` ([V], one row) under temperature and top-k. Logits of -inf
// are never drawn; NaN logits, or all of them -inf, are refused.
std::int64_t sample_token(const Tensor& logits, double temperature, std::int64_t top_k, Generator& generator);

// The prompt followed by max_new_tokens sampled tokens. The model runs in eval mode without a
// graph, and is returned to its previous mode, also when an exception leaves. Once the text
// outgrows block_size, each step sees only the last block_size tokens (and the cache, whose
// positions would no longer fit, is dropped).
std::vector<std::int64_t> generate(GPT& model, std::vector<std::int64_t> prompt, const SamplingOptions& options,
                                   Generator& generator);

}  // namespace ag::nn
