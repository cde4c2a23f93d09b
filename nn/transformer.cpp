#include "transformer.h"

#include <cmath>

#include "../ops/binary.h"
#include "../runtime/error.h"

namespace ag::nn {

namespace {
MultiHeadAttentionOptions attention_options(const BlockOptions& o, bool rotary, bool cross = false) {
  return {.bias = o.bias, .dropout = o.dropout, .rotary = rotary, .max_len = o.max_len, .cross = cross};
}
}  // namespace

SelfAttentionBlock::SelfAttentionBlock(const BlockOptions& o, Generator& generator) : norm_first(o.norm_first) {
  ln_1 = register_module("ln_1", make_norm(o.norm, o.d_model, o.bias));
  attn = register_module(
      "attn", std::make_shared<MultiHeadAttention>(o.d_model, o.n_heads, attention_options(o, o.rotary), generator));
  ln_2 = register_module("ln_2", make_norm(o.norm, o.d_model, o.bias));
  mlp = register_module("mlp", make_mlp(o.mlp, o.d_model, o.d_ff, o.dropout, o.bias, generator));
}

Tensor SelfAttentionBlock::forward(const Tensor& x, const Tensor& mask, bool causal, Tensor* weights, KVCache* cache) {
  AttentionCall call{.attn_mask = mask, .causal = causal, .weights = weights, .cache = cache};
  if (norm_first) {
    Tensor h = ln_1->forward(x);
    Tensor y = x + attn->forward(h, h, call);
    return y + mlp->forward(ln_2->forward(y));
  }
  Tensor y = ln_1->forward(x + attn->forward(x, x, call));
  return ln_2->forward(y + mlp->forward(y));
}

TransformerDecoderBlock::TransformerDecoderBlock(const BlockOptions& o, Generator& generator)
    : norm_first(o.norm_first) {
  ln_1 = register_module("ln_1", make_norm(o.norm, o.d_model, o.bias));
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(
                                               o.d_model, o.n_heads, attention_options(o, o.rotary), generator));
  ln_2 = register_module("ln_2", make_norm(o.norm, o.d_model, o.bias));
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(
                                                 o.d_model, o.n_heads, attention_options(o, false, true), generator));
  ln_3 = register_module("ln_3", make_norm(o.norm, o.d_model, o.bias));
  mlp = register_module("mlp", make_mlp(o.mlp, o.d_model, o.d_ff, o.dropout, o.bias, generator));
}

Tensor TransformerDecoderBlock::forward(const Tensor& x, const Tensor& memory, const Tensor& memory_mask,
                                        Tensor* self_weights, Tensor* cross_weights) {
  if (norm_first) {
    Tensor h = ln_1->forward(x);
    Tensor y = x + self_attn->forward(h, h, {.causal = true, .weights = self_weights});
    Tensor h2 = ln_2->forward(y);
    Tensor z = y + cross_attn->forward(h2, memory, {.attn_mask = memory_mask, .weights = cross_weights});
    return z + mlp->forward(ln_3->forward(z));
  }
  Tensor y = ln_1->forward(x + self_attn->forward(x, x, {.causal = true, .weights = self_weights}));
  Tensor z = ln_2->forward(y + cross_attn->forward(y, memory, {.attn_mask = memory_mask, .weights = cross_weights}));
  return ln_3->forward(z + mlp->forward(z));
}

Transformer::Transformer(const TransformerConfig& c, Generator& generator) : config(c) {
  if (c.n_encoder_layers < 0 || c.n_decoder_layers < 0)
    throw_invalid("Transformer", "layer counts must be non-negative, got {} encoder and {} decoder layers",
                  c.n_encoder_layers, c.n_decoder_layers);
  BlockOptions o{.d_model = c.d_model,
                 .n_heads = c.n_heads,
                 .d_ff = c.d_ff,
                 .dropout = c.dropout,
                 .norm_first = c.norm_first,
                 .rotary = c.positions == Positions::Rotary,
                 .max_len = c.max_len};
  src_embed = register_module("src_embed", std::make_shared<Embedding>(c.src_vocab, c.d_model, generator));
  tgt_embed = register_module("tgt_embed", std::make_shared<Embedding>(c.tgt_vocab, c.d_model, generator));
  // Embeddings start at N(0, 1/d_model) so that, once scaled by sqrt(d_model), tokens and the
  // sinusoidal positions (values in [-1, 1]) enter the first block at comparable sizes.
  for (Tensor w : {src_embed->weight, tgt_embed->weight})
    w.set_data((randn(w.shape(), generator) / std::sqrt(static_cast<double>(c.d_model))).detach());
  if (c.positions == Positions::Sinusoidal)
    pos = register_module("pos", std::make_shared<SinusoidalPositionalEncoding>(c.max_len, c.d_model));
  if (c.positions == Positions::Learned)
    learned_pos = register_module("pos", std::make_shared<LearnedPositionalEmbedding>(c.max_len, c.d_model, generator));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, generator));
  encoder = register_module("encoder", std::make_shared<ModuleList<SelfAttentionBlock>>());
  for (std::int64_t i = 0; i < c.n_encoder_layers; ++i)
    encoder->push_back(std::make_shared<SelfAttentionBlock>(o, generator));
  decoder = register_module("decoder", std::make_shared<ModuleList<TransformerDecoderBlock>>());
  for (std::int64_t i = 0; i < c.n_decoder_layers; ++i)
    decoder->push_back(std::make_shared<TransformerDecoderBlock>(o, generator));
  if (c.norm_first) {
    enc_norm = register_module("enc_norm", std::make_shared<LayerNorm>(c.d_model));
    dec_norm = register_module("dec_norm", std::make_shared<LayerNorm>(c.d_model));
  }
  head = register_module("head", std::make_shared<Linear>(c.d_model, c.tgt_vocab, true, generator));
}

Tensor Transformer::embed(Embedding& table, const Tensor& ids) const {
  Tensor x = table.forward(ids) * std::sqrt(static_cast<double>(config.d_model));
  if (pos) return pos->forward(x);
  if (learned_pos) return learned_pos->forward(x);
  return x;  // no positions, or RoPE inside the attention
}

Tensor Transformer::encode(const Tensor& src, const Tensor& src_mask) {
  if (!src.defined() || src.dim() != 2)
    throw_invalid("Transformer", "src must be int64 [B, S], got shape {}",
                  src.defined() ? shape_str(src.shape()) : "undefined");
  Tensor x = drop->forward(embed(*src_embed, src));
  for (const auto& block : *encoder) x = block->forward(x, src_mask);
  return enc_norm ? enc_norm->forward(x) : x;
}

Tensor Transformer::decode(const Tensor& tgt, const Tensor& memory, const Tensor& src_mask,
                           std::vector<Tensor>* cross_weights) {
  if (!tgt.defined() || tgt.dim() != 2)
    throw_invalid("Transformer", "tgt must be int64 [B, T], got shape {}",
                  tgt.defined() ? shape_str(tgt.shape()) : "undefined");
  Tensor x = drop->forward(embed(*tgt_embed, tgt));
  if (cross_weights) cross_weights->assign(decoder->size(), Tensor());
  for (std::size_t i = 0; i < decoder->size(); ++i)
    x = (*decoder)[i].forward(x, memory, src_mask, nullptr, cross_weights ? &(*cross_weights)[i] : nullptr);
  return head->forward(dec_norm ? dec_norm->forward(x) : x);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask) {
  return decode(tgt, encode(src, src_mask), src_mask);
}

}  // namespace ag::nn
