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

#include <optional>

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
AttentionResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
                                    bool causal = false, std::optional<double> scale = {});

}  // namespace ag
