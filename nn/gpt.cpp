#include "gpt.h"

#include <cmath>

#include "../ops/binary.h"
#include "../ops/nn_ops.h"
#include "../runtime/error.h"

namespace ag::nn {

GPT::GPT(const GPTConfig& c, Generator& generator) : config(c) {
  if (c.vocab_size <= 0 || c.block_size <= 0 || c.n_layer <= 0)
    throw_invalid("GPT", "vocab_size, block_size and n_layer must be positive, got {}, {} and {}", c.vocab_size,
                  c.block_size, c.n_layer);
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, generator));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, generator));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, generator));
  blocks = register_module("blocks", std::make_shared<ModuleList<SelfAttentionBlock>>());
  BlockOptions o{.d_model = c.n_embd,
                 .n_heads = c.n_head,
                 .d_ff = 4 * c.n_embd,
                 .dropout = c.dropout,
                 .norm_first = true,
                 .norm = c.norm,
                 .mlp = c.mlp,
                 .bias = c.bias,
                 .max_len = c.block_size};
  for (std::int64_t i = 0; i < c.n_layer; ++i) blocks->push_back(std::make_shared<SelfAttentionBlock>(o, generator));
  ln_f = register_module("ln_f", make_norm(c.norm, c.n_embd, c.bias));

  // GPT-2 initialisation, replacing the layers' defaults.
  double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    bool is_bias = name.ends_with(".bias");
    bool is_norm = name.find("ln_") != std::string::npos;
    if (is_norm) continue;  // LayerNorm and RMSNorm keep weight 1, bias 0
    bool feeds_residual = name.ends_with("out_proj.weight") || name.ends_with("mlp.proj.weight") ||
                          name.ends_with("mlp.down_proj.weight");
    Tensor value = is_bias ? zeros(p.shape()) : randn(p.shape(), generator) * (feeds_residual ? residual_std : 0.02);
    p.set_data(value.detach());
  }
}

Tensor GPT::forward(const Tensor& ids, std::vector<KVCache>* cache, std::vector<Tensor>* weights) {
  if (!ids.defined() || ids.dim() != 2)
    throw_invalid("GPT", "ids must be int64 [B, T], got {}", ids.defined() ? shape_str(ids.shape()) : "undefined");
  std::int64_t t = ids.size(1);
  if (ids.size(0) == 0 || t == 0)
    throw_invalid("GPT", "ids of shape {} hold no tokens: the batch and the sequence must not be empty",
                  shape_str(ids.shape()));
  if (cache && !cache->empty() && cache->size() != blocks->size())
    throw_invalid("GPT", "cache size {} does not match the model's {} layers", cache->size(), blocks->size());
  if (cache && cache->empty()) cache->resize(blocks->size());
  std::int64_t past = cache ? (*cache)[0].length() : 0;
  if (past + t > config.block_size)
    throw_invalid("GPT", "sequence length {} (ids shape {}, after {} cached tokens) is longer than block_size {}",
                  past + t, shape_str(ids.shape()), past, config.block_size);
  Tensor positions = arange(static_cast<double>(past), static_cast<double>(past + t));
  Tensor x = drop->forward(wte->forward(ids) + wpe->forward(positions));
  if (weights) weights->assign(blocks->size(), Tensor());
  for (std::size_t i = 0; i < blocks->size(); ++i)
    x = (*blocks)[i].forward(x, {}, causal, weights ? &(*weights)[i] : nullptr, cache ? &(*cache)[i] : nullptr);
  return linear(ln_f->forward(x), wte->weight);  // tied head: logits = h wte^T
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) { return cross_entropy(forward(ids), targets); }

}  // namespace ag::nn
