// Transformer blocks and the encoder-decoder model.
//
// Pre-LN (norm_first = true, GPT-2 style; trains without warm-up tricks at small scale):
//   x = x + Attention(LN(x));   x = x + FeedForward(LN(x))
// Post-LN (norm_first = false, the original Transformer):
//   x = LN(x + Attention(x));   x = LN(x + FeedForward(x))
#pragma once

#include <utility>

#include "attention.h"
#include "layers.h"
#include "positional.h"

namespace ag::nn {

struct BlockOptions {
  std::int64_t d_model = 64;
  std::int64_t n_heads = 4;
  std::int64_t d_ff = 256;  // feed-forward hidden size
  double dropout = 0.0;
  bool norm_first = true;           // pre-LN; false for post-LN
  NormKind norm = NormKind::Layer;  // LayerNorm (with `bias`) or RMSNorm
  MlpKind mlp = MlpKind::Gelu;      // FeedForward of d_ff (with `bias`), or SwiGLU of swiglu_hidden(d_ff)
  bool bias = true;
  bool rotary = false;  // RoPE in self-attention
  std::int64_t max_len = 2048;
};

// Self-attention (optionally causal) + feed-forward, each with a residual connection: the
// encoder's block, and with causal = true the GPT's.
//   x: [B, T, D] -> [B, T, D]
class SelfAttentionBlock : public Module {
 public:
  explicit SelfAttentionBlock(const BlockOptions& options, Generator& generator = default_generator());
  // mask: bool, broadcastable to [B, H, T, T], true = may attend. weights, when given,
  // receives the attention weights [B, H, T, T].
  Tensor forward(const Tensor& x, const Tensor& mask = {}, bool causal = false, Tensor* weights = nullptr,
                 KVCache* cache = nullptr);
  template <class... A>
  auto operator()(A&&... args) {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)

  bool norm_first;
  std::shared_ptr<Normalization> ln_1, ln_2;
  std::shared_ptr<MultiHeadAttention> attn;
  std::shared_ptr<Mlp> mlp;
};

// Causal self-attention + cross-attention over the encoder output ("memory") + feed-forward.
//   x: [B, T, D], memory: [B, S, D] -> [B, T, D]
class TransformerDecoderBlock : public Module {
 public:
  explicit TransformerDecoderBlock(const BlockOptions& options, Generator& generator = default_generator());
  // memory_mask: bool, broadcastable to [B, H, T, S] (usually the source padding
  // [B, 1, 1, S]). cross_weights, when given, receives the cross-attention weights [B, H, T, S].
  Tensor forward(const Tensor& x, const Tensor& memory, const Tensor& memory_mask = {}, Tensor* self_weights = nullptr,
                 Tensor* cross_weights = nullptr);
  template <class... A>
  auto operator()(A&&... args) {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)

  bool norm_first;
  std::shared_ptr<Normalization> ln_1, ln_2, ln_3;
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  std::shared_ptr<Mlp> mlp;
};

// How the encoder-decoder model learns where each token is.
enum class Positions {
  None,        // nothing: attention alone cannot tell positions apart (experiments compare)
  Sinusoidal,  // fixed sin/cos table added to the embeddings (the original Transformer)
  Learned,     // a trained table added to the embeddings
  Rotary,      // RoPE: queries and keys of every self-attention rotated by position
};

struct TransformerConfig {
  std::int64_t src_vocab = 32, tgt_vocab = 32;
  std::int64_t d_model = 64, n_heads = 4, d_ff = 256;
  std::int64_t n_encoder_layers = 2, n_decoder_layers = 2;
  std::int64_t max_len = 256;
  double dropout = 0.0;
  bool norm_first = true;
  Positions positions = Positions::Sinusoidal;
};

// The encoder-decoder Transformer: token embeddings scaled by sqrt(d_model) plus positions
// (sinusoidal by default; see Positions), N encoder blocks, N decoder blocks, and a linear head to target-vocabulary
// logits.
//   src: int64 [B, S], tgt: int64 [B, T]  ->  logits [B, T, tgt_vocab]
class Transformer : public Module {
 public:
  explicit Transformer(const TransformerConfig& config, Generator& generator = default_generator());
  // src_mask: bool [B, 1, 1, S], true at real (not padding) source tokens; see key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {});
  template <class... A>
  auto operator()(A&&... args) {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
  Tensor encode(const Tensor& src, const Tensor& src_mask = {});
  // cross_weights, when given, receives each decoder layer's cross-attention weights
  // [B, H, T, S]: how much each target position looks at each source position.
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& src_mask = {},
                std::vector<Tensor>* cross_weights = nullptr);
  // Embeddings of `ids` scaled by sqrt(d_model), plus positions when they are added.
  Tensor embed(Embedding& table, const Tensor& ids) const;

  TransformerConfig config;
  std::shared_ptr<Embedding> src_embed, tgt_embed;
  std::shared_ptr<SinusoidalPositionalEncoding> pos;        // Positions::Sinusoidal only
  std::shared_ptr<LearnedPositionalEmbedding> learned_pos;  // Positions::Learned only
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList<SelfAttentionBlock>> encoder;
  std::shared_ptr<ModuleList<TransformerDecoderBlock>> decoder;
  std::shared_ptr<LayerNorm> enc_norm, dec_norm;  // final norms (pre-LN only: post-LN blocks end normalised)
  std::shared_ptr<Linear> head;
};

}  // namespace ag::nn
