// Scaled dot-product attention:
//
//   Attention(Q, K, V) = softmax(Q K^T / sqrt(d) + mask) V
//
//   q: [B, H, Tq, d]    k: [B, H, Tk, d]    v: [B, H, Tk, dv]
//   output: [B, H, Tq, dv]    weights: [B, H, Tq, Tk]
//
// attn_mask is bool, broadcastable to [B, H, Tq, Tk], true where a query may attend to a key
// (key padding: [B, 1, 1, Tk]; any pattern: [Tq, Tk]). causal ANDs in causal_mask(Tq, Tk). A
// masked score is -inf, so its weight is exactly 0; a query with every key masked gets zero
// weights and a zero output (docs/attention.md).
#pragma once

#include <limits>
#include <optional>
#include <string_view>

#include "../autograd/tensor.h"

namespace ag {

struct AttentionResult {
  Tensor output;
  Tensor weights;  // defined only when asked for
};

// One fused op: forward and backward written out by hand, with no graph inside. The weights
// it returns are a plain tensor, outside the graph. `scale` defaults to 1 / sqrt(d).
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& attn_mask = {}, bool causal = false,
                                             bool need_weights = false, std::optional<double> scale = {});

// The same op for tensors laid out [B, T, H, d] (q: [B, Tq, H, d], k: [B, Tk, H, d], v:
// [B, Tk, H, dv]; output [B, Tq, H, dv]), which is how a [B, T, H * d] projection reshapes
// without a copy: multi-head attention runs on its projections directly. Weights stay
// [B, H, Tq, Tk].
AttentionResult scaled_dot_product_attention_bthd(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& attn_mask = {}, bool causal = false,
                                                  bool need_weights = false, std::optional<double> scale = {});

// Self-attention on packed projections: qkv [B, T, 3 * heads * d] holds each position's query,
// key and value side by side, as one linear layer with the three weights stacked computes them.
// The same as scaled_dot_product_attention_bthd on the three [B, T, heads, d] thirds, read in
// place; the output is [B, T, heads, d] and the gradient one tensor shaped like qkv.
AttentionResult scaled_dot_product_attention_packed(const Tensor& qkv, std::int64_t heads, const Tensor& attn_mask = {},
                                                    bool causal = false, bool need_weights = false,
                                                    std::optional<double> scale = {});

// The same computation composed from primitive ops (matmul, masked_fill, softmax): the reference
// kernel of ops/reference/attention.cpp, called directly, whatever the kernel setting. Its
// weights are part of the graph, so a loss on them (a penalty, say) trains through them.
// masked_score is what a masked score becomes before the softmax: -inf, so its weight is exactly
// 0, unless an experiment sets another value (0 is the mistake examples/experiments/masking.cpp
// measures: exp(0) is a weight like any other, so every masked key keeps a share). It must not
// be NaN or +inf.
AttentionResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
                                    bool causal = false, std::optional<double> scale = {},
                                    double masked_score = -std::numeric_limits<double>::infinity());

// Throws, naming `op`, unless attn_mask is undefined, or bool and broadcastable to the scores'
// shape [b, h, tq, tk]. Every attention op checks its mask with it, and so does
// nn::MultiHeadAttention before it projects anything; the message lists the shapes that fit and,
// for a [B, Tk] mask, how to make the key padding mask it was probably meant to be.
void check_attention_mask(std::string_view op, const Tensor& attn_mask, std::int64_t b, std::int64_t h, std::int64_t tq,
                          std::int64_t tk);

}  // namespace ag
