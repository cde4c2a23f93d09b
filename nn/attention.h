// Multi-head attention: H attention heads side by side, each on its own d_model / H slice of
// learned projections of the inputs.
//
//   query: [B, Tq, D]   key, value: [B, Tk, D]   output: [B, Tq, D]   weights: [B, H, Tq, Tk]
//
//   Q = query Wq^T,  K = key Wk^T,  V = value Wv^T            (each [B, T, D])
//     self-attention stores [Wq; Wk; Wv] as one [3D, D] weight (qkv_proj, nanoGPT's c_attn), so
//     one product gives all three; cross-attention stores Wq (q_proj) and [Wk; Wv] (kv_proj)
//   split heads: [B, T, D] -> [B, T, H, D/H]    (a reshape: head h owns columns h*D/H ..)
//   O_h = softmax(Q_h K_h^T / sqrt(D/H) + mask) V_h           (ops/attention.h, per head)
//   merge heads: [B, Tq, H, D/H] -> [B, Tq, D]   (a reshape back)
//   output = O Wo^T
//
// Self-attention passes the same sequence as query, key and value; cross-attention passes
// queries from one sequence and keys/values from another (of another length); causal
// self-attention adds the causal mask.
#pragma once

#include <array>
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
  // Keys and values from another sequence (a decoder reading the encoder's output): a query
  // projection q_proj and one key-value projection kv_proj. Otherwise self-attention, with one
  // query-key-value projection qkv_proj.
  bool cross = false;
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

  // Returns the output, [B, Tq, D], like every block's forward (docs/models.md).
  // mask: bool, broadcastable to [B, H, Tq, Tk], true where a query may attend (ops/masking.h):
  //   [Tq, Tk] a pattern shared by the batch; [B, 1, 1, Tk] key padding, as
  //   ag::key_padding_mask(lengths, Tk) builds it (a [B, Tk] padding mask must be reshaped so).
  // weights: when not null, receives the attention weights [B, H, Tq, Tk], outside the graph.
  // offset (RoPE only): the position of the first key; the queries are the last Tq positions
  // of the keys' span, as in self-attention (Tq = Tk) or when continuing a cached prefix.
  // cache (self-attention only): the new keys and values are appended to it and attention runs
  // over all of them; RoPE positions continue from the cache's length.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask = {},
                 bool causal = false, Tensor* weights = nullptr, std::int64_t offset = 0, KVCache* cache = nullptr);

  std::int64_t d_model, n_heads, head_dim;

  // Knobs for experiments on attention itself (examples/experiments). The defaults are the
  // standard op; checkpoints do not record them.
  std::optional<double> scale;  // of the scores; unset = 1 / sqrt(head_dim)
  // Masked scores set to 0 instead of -inf: the mistake whose leak the experiments measure.
  // Runs the composed ops (matmul, masked_fill, softmax), so it is slower.
  bool zero_fill_mask = false;

  bool cross;
  std::shared_ptr<Linear> qkv_proj;         // self-attention: D -> 3D, rows [Wq; Wk; Wv]
  std::shared_ptr<Linear> q_proj, kv_proj;  // cross-attention: D -> D and D -> 2D, rows [Wk; Wv]
  std::shared_ptr<Linear> out_proj;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<RotaryEmbedding> rotary;  // null unless options.rotary

  // Q, K and V, [B, T, D] each, of the given inputs. The usual calls cost one product for
  // self-attention (query, key and value one tensor) and two for cross-attention (key and value
  // one tensor); other combinations project each input with its part of the stacked weight.
  std::array<Tensor, 3> project(const Tensor& query, const Tensor& key, const Tensor& value) const;

  AttentionResult zero_filled_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                        bool causal) const;

  // Throws, naming this module, unless mask is undefined or broadcasts to [B, H, Tq, Tk].
  void check_mask(const Tensor& mask, std::int64_t b, std::int64_t tq, std::int64_t tk) const;

  // [B, T, D] -> [B, T, H, D/H] and back: reshapes, so no data moves.
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;
};

}  // namespace ag::nn
