// Multi-head attention: H attention heads side by side, each on its own d_model / H slice of
// learned projections of the inputs.
//
//   query: [B, Tq, D]   key, value: [B, Tk, D]   output: [B, Tq, D]   weights: [B, H, Tq, Tk]
//
//   Q = query Wq^T,  K = key Wk^T,  V = value Wv^T            (each [B, T, D])
//   split heads: [B, T, D] -> [B, T, H, D/H]    (a reshape: head h owns columns h*D/H ..)
//   O_h = softmax(Q_h K_h^T / sqrt(D/H) + mask) V_h           (ops/attention.h, per head)
//   merge heads: [B, Tq, H, D/H] -> [B, Tq, D]   (a reshape back)
//   output = O Wo^T
//
// Self-attention passes the same sequence as query, key and value; cross-attention passes
// queries from one sequence and keys/values from another (of another length); causal
// self-attention adds the causal mask.
#pragma once

#include <optional>

#include "../ops/attention.h"
#include "layers.h"
#include "positional.h"

namespace ag::nn {

struct MultiHeadAttentionOptions {
  bool bias = true;      // biases in the four projections
  double dropout = 0.0;  // on the output projection
  bool rotary = false;   // rotate queries and keys with RoPE (then max_len bounds the positions)
  std::int64_t max_len = 2048;
};

// The keys and values of the tokens seen so far, [B, T_past, H, D/H] each, kept per layer so
// that generating one more token costs one token's work instead of the whole prefix again.
struct KVCache {
  Tensor k, v;
  std::int64_t length() const { return k.defined() ? k.size(1) : 0; }
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, MultiHeadAttentionOptions options = {},
                     Generator& generator = default_generator());

  // mask: bool, broadcastable to [B, H, Tq, Tk], true where a query may attend (ops/masking.h).
  // offset (RoPE only): the position of the first key; the queries are the last Tq positions
  // of the keys' span, as in self-attention (Tq = Tk) or when continuing a cached prefix.
  // cache (self-attention only): the new keys and values are appended to it and attention runs
  // over all of them; RoPE positions continue from the cache's length.
  AttentionResult forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask = {},
                          bool causal = false, bool need_weights = false, std::int64_t offset = 0,
                          KVCache* cache = nullptr);

  std::int64_t d_model, n_heads, head_dim;

  // Knobs for experiments on attention itself (examples/experiments). The defaults are the
  // standard op; checkpoints do not record them.
  std::optional<double> scale;  // of the scores; unset = 1 / sqrt(head_dim)
  // Masked scores set to 0 instead of -inf: the mistake whose leak the experiments measure.
  // Runs the composed ops (matmul, masked_fill, softmax), so it is slower.
  bool zero_fill_mask = false;

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<RotaryEmbedding> rotary;  // null unless options.rotary

  AttentionResult zero_filled_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                        bool causal) const;

  // [B, T, D] -> [B, T, H, D/H] and back: reshapes, so no data moves.
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;
};

}  // namespace ag::nn
