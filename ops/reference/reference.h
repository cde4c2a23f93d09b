// The readable twins of the fast kernels: the whole model's math in one folder.
//
// Each function computes exactly what the op of the same name in ops/ computes, in the plainest
// way there is: composed from primitive ops (matmul, exp, sum, masked_fill, softmax, ...) where
// that is natural, so that its backward is nothing but the chain rule through those ops;
// otherwise one single-threaded loop. No tiles, no SIMD, no threads, no fused epilogues.
//
// They are not a second API: the public ops call them when the kernel setting says so
// (ops/kernels.h, `--kernels reference` in the programs), after checking their arguments, so
// the arguments here are already known to be valid. tests/ops/reference_test.cpp holds each one
// against its fast twin, and tests/nn/kernels_equal_test.cpp a whole training step.
//
// Reading order, following the GPT's forward pass:
//   embedding.cpp        token and position lookups
//   layer_norm.cpp       normalisation
//   rms_norm.cpp         normalisation by the root mean square (LLaMA-style models)
//   attention.cpp        softmax(Q K^T / sqrt(d) + mask) V, in its three layouts
//   linear.cpp           x W^T + b, and the MLP's GELU
//   swiglu.cpp           the gated MLP of LLaMA-style models
//   cross_entropy.cpp    the loss
//   optim.cpp            AdamW's update and gradient clipping
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "../../autograd/tensor.h"
#include "../../kernels/table.h"
#include "../attention.h"

namespace ag::reference {

// y = x W^T + b          x: [..., in]  weight: [out, in]  bias: [out] or undefined
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// (silu(x W_gate^T) * x W_up^T) W_down^T, silu(v) = v sigmoid(v): LLaMA's MLP, no biases
Tensor swiglu(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down);
// GELU(x) = x Phi(x), or GPT-2's tanh approximation of it
Tensor gelu(const Tensor& x, GeluApproximation approximate);
// gelu(linear(x, weight, bias))
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate);

// y[p, :] = weight[ids[p], :]     weight: [V, D]   ids: int64, any shape
Tensor embedding(const Tensor& weight, const Tensor& ids);

// (x - mean) / sqrt(var + eps) * weight + bias over the last dim; weight and bias may be undefined
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// x / sqrt(mean(x^2) + eps) * weight over the last dim; weight may be undefined
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);

// Mean over the positions whose target is not ignore_index of -log softmax(logits)[target]
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index);

// softmax(scale q k^T + mask) v. The weights are part of the graph. q: [B, H, Tq, d],
// k: [B, H, Tk, d], v: [B, H, Tk, dv]; attn_mask (true = may attend) broadcasts to [B, H, Tq, Tk].
// A masked score is set to masked_score: -inf for every op; other values only through
// ag::attention_reference, for experiments on the mask.
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                             bool causal, double scale,
                                             double masked_score = -std::numeric_limits<double>::infinity());
// The same on [B, T, H, d] tensors (output [B, Tq, H, dv]), and on packed self-attention
// projections qkv [B, T, 3 * heads * d] (output [B, T, heads, d]).
AttentionResult scaled_dot_product_attention_bthd(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& attn_mask, bool causal, double scale);
AttentionResult scaled_dot_product_attention_packed(const Tensor& qkv, std::int64_t heads, const Tensor& attn_mask,
                                                    bool causal, double scale);

// One Adam step on one parameter tensor of n elements, in place: w, m (first moment) and v
// (second moment) are updated from the gradient g (the settings: kernels/table.h).
using backends::AdamSettings;
void adam_update(float* w, const float* g, float* m, float* v, std::int64_t n, const AdamSettings& s);
void adam_update(double* w, const double* g, double* m, double* v, std::int64_t n, const AdamSettings& s);

// The gradients' global L2 norm; when it exceeds max_norm every gradient is scaled by
// max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm);

}  // namespace ag::reference
