// Multi-head attention: H attention heads side by side, each on its own d_model / H slice of
// learned projections of the inputs.
//
//   query: [B, Tq, D]   key_value: [B, Tk, D]   output: [B, Tq, D]   weights: [B, H, Tq, Tk]
//
//   Q = query Wq^T,  K = key_value Wk^T,  V = key_value Wv^T  (each [B, T, D])
//     self-attention stores [Wq; Wk; Wv] as one [3D, D] weight (qkv_proj, nanoGPT's c_attn), so
//     one product gives all three; cross-attention stores Wq (q_proj) and [Wk; Wv] (kv_proj)
//   split heads: [B, T, D] -> [B, T, H, D/H]    (a reshape: head h owns columns h*D/H ..)
//   O_h = softmax(Q_h K_h^T / sqrt(D/H) + mask) V_h           (ops/attention.h, per head)
//   merge heads: [B, Tq, H, D/H] -> [B, Tq, D]   (a reshape back)
//   output = O Wo^T
//
// Self-attention passes one sequence as both query and key_value; cross-attention passes
// queries from one sequence and the keys' and values' source from another (of another length);
// causal self-attention adds the causal mask.
#pragma once

#include <array>
#include <optional>
#include <utility>

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

// How one call of MultiHeadAttention::forward attends. An aggregate: name the fields a call
// needs and the others keep their defaults, as in forward(x, x, {.causal = true}).
struct AttentionCall {
  // Bool, broadcastable to [B, H, Tq, Tk], true where a query may attend (ops/masking.h), as in
  // the ops and PyTorch's nn.MultiheadAttention: [Tq, Tk] a pattern shared by the batch;
  // [B, 1, 1, Tk] key padding, as ag::key_padding_mask(lengths, Tk) builds it (a [B, Tk]
  // padding mask must be reshaped so). Tk counts the cached keys too.
  Tensor attn_mask = {};
  // ANDs in causal_mask(Tq, Tk): query i sees keys 0 .. i + Tk - Tq, so with a cache the new
  // queries see every cached key.
  bool causal = false;
  // When not null, receives the attention weights [B, H, Tq, Tk] (PyTorch's need_weights): a
  // plain tensor outside the graph, for looking at. The output is the same either way.
  Tensor* weights = nullptr;
  // Self-attention only: the new keys and values are appended to it and attention runs over all
  // of them; RoPE positions continue from its length.
  KVCache* cache = nullptr;
  // RoPE only, and only without a cache (which sets it): the position of the first key; the
  // queries are the last Tq positions of the keys' span, as in self-attention (Tq = Tk) or when
  // continuing a prefix.
  std::int64_t offset = 0;
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(std::int64_t d_model, std::int64_t n_heads, MultiHeadAttentionOptions options = {},
                     Generator& generator = default_generator());

  // Returns the output, [B, Tq, D], like every block's forward (docs/models.md). key_value is
  // the sequence the keys and values are both projected from: query itself for self-attention,
  // the encoder's output for cross-attention.
  //   forward(x, x)                              self-attention
  //   forward(x, x, {.causal = true})            causal self-attention
  //   forward(y, memory, {.attn_mask = padding}) cross-attention over a padded memory
  Tensor forward(const Tensor& query, const Tensor& key_value, const AttentionCall& call = {});
  template <class... A>
  auto operator()(A&&... args) {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)

  std::int64_t d_model, n_heads, head_dim;

  // A knob for experiments on attention itself (examples/experiments): the scale of the scores;
  // unset = 1 / sqrt(head_dim), the standard op. Checkpoints do not record it.
  std::optional<double> scale;

  bool cross;
  std::shared_ptr<Linear> qkv_proj;         // self-attention: D -> 3D, rows [Wq; Wk; Wv]
  std::shared_ptr<Linear> q_proj, kv_proj;  // cross-attention: D -> D and D -> 2D, rows [Wk; Wv]
  std::shared_ptr<Linear> out_proj;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<RotaryEmbedding> rotary;  // null unless options.rotary

  // Q, K and V, [B, T, D] each, of the given inputs. The usual calls cost one product for
  // self-attention (query and key_value one tensor) and two for cross-attention; a
  // self-attention module given another sequence as key_value projects each with its rows of
  // the stacked weight.
  std::array<Tensor, 3> project(const Tensor& query, const Tensor& key_value) const;

  // What the op attends over: Q, K and V split into heads, [B, T, H, D/H] each, with RoPE
  // applied and, given call.cache, K and V appended to it (so K and V are [B, T_past + Tk, H, D/H]).
  std::array<Tensor, 3> project_heads(const Tensor& query, const Tensor& key_value, const AttentionCall& call) const;

  // [B, T, D] -> [B, T, H, D/H] and back: reshapes, so no data moves.
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;
};

}  // namespace ag::nn
