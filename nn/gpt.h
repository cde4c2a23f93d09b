// GPT: a decoder-only Transformer language model, laid out as nanoGPT / GPT-2 are.
//
//   ids: int64 [B, T]
//   x = wte[ids] + wpe[0..T-1]                      token + learned position embeddings
//   x = block(x) for each of n_layer pre-LN blocks  causal self-attention + GELU MLP
//   logits = ln_f(x) wte^T                          the head shares the token embedding
//   logits: [B, T, vocab_size]
#pragma once

#include <utility>

#include "transformer.h"

namespace ag::nn {

struct GPTConfig {
  std::int64_t vocab_size = 65;
  std::int64_t block_size = 64;  // the longest context
  std::int64_t n_layer = 4;
  std::int64_t n_head = 4;
  std::int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;
  NormKind norm = NormKind::Layer;  // the blocks' and the final norm: LayerNorm or RMSNorm (no bias)
  // The blocks' MLP: GPT-2's (4 n_embd, GELU) or LLaMA's SwiGLU (swiglu_hidden(4 n_embd), no
  // biases). With norm = Rms and rotary positions this is a LLaMA-shaped model.
  MlpKind mlp = MlpKind::Gelu;
};

class GPT : public Module {
 public:
  // Initialised as GPT-2: weights N(0, 0.02), biases 0, and the projections that feed the
  // residual stream N(0, 0.02 / sqrt(2 n_layer)) so the stream's variance does not grow
  // with depth.
  explicit GPT(const GPTConfig& config, Generator& generator = default_generator());

  // With `cache` (one KVCache per layer, empty at first), ids are the tokens that follow the
  // cached ones: positions continue from the cache, and the cache grows by ids' length.
  // `weights`, when given, receives each layer's attention weights [B, H, T, T_total].
  Tensor forward(const Tensor& ids, std::vector<KVCache>* cache = nullptr, std::vector<Tensor>* weights = nullptr);
  template <class... A>
  auto operator()(A&&... args) {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
  // Mean cross-entropy of the next-token predictions against `targets` (int64 [B, T]).
  Tensor loss(const Tensor& ids, const Tensor& targets);

  GPTConfig config;
  // An experiment knob (examples/experiments), not saved in checkpoints: false drops the causal
  // mask, so every position also sees the tokens it is asked to predict.
  bool causal = true;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList<SelfAttentionBlock>> blocks;
  std::shared_ptr<Normalization> ln_f;
};

}  // namespace ag::nn
