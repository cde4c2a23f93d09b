// The ops neural-network layers are built from, each with a hand-derived backward.
#pragma once

#include <cstdint>

#include "../autograd/generator.h"
#include "../autograd/tensor.h"

namespace ag {

// y = x W^T + b.   x: [..., in]   weight: [out, in]   bias: [out] or undefined   y: [..., out]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// gelu(linear(x, weight, bias)) as one op, the first half of a transformer's MLP. Each thread
// applies GELU to its band of rows straight after that band's product, while the band is still
// in cache, and backward starts with dy * GELU' instead of a separate node.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                   GeluApproximation approximate = GeluApproximation::None);

// The MLP of LLaMA-style models, SwiGLU, as one op (no biases):
//   y = (silu(x W_gate^T) * x W_up^T) W_down^T,   silu(v) = v sigmoid(v)
// x: [..., in]   w_gate, w_up: [hidden, in]   w_down: [out, hidden]   y: [..., out]
// Its three products take bf16 inputs under autocast, as linear's do.
Tensor swiglu(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down);

// Rows of `weight` picked by `ids`.   weight: [V, D]   ids: int64, any shape   y: [*ids.shape, D]
// Not differentiable in ids; repeated ids add their gradients into the same row.
Tensor embedding(const Tensor& weight, const Tensor& ids);

// Normalises over the last dim, then scales and shifts:
//   y = (x - mean) / sqrt(var + eps) * weight + bias     (var is the biased variance)
// x: [..., D]   weight, bias: [D] or undefined
Tensor layer_norm(const Tensor& x, const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);

// Normalises over the last dim by the root mean square, then scales (LLaMA's normalisation:
// no centring, no bias):
//   y = x / sqrt(mean(x^2) + eps) * weight
// x: [..., D]   weight: [D] or undefined
Tensor rms_norm(const Tensor& x, const Tensor& weight = {}, double eps = 1e-6);

// Zeroes each element with probability p and scales the survivors by 1 / (1 - p), so the
// expected value is unchanged. The identity (the same tensor) when !training or p = 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator);

// Mean over positions of -log softmax(logits)[target], computed in one step.
//   logits: [..., C]   targets: int64 [...] (logits' shape without its last dim)
// Positions whose target is `ignore_index` count neither in the sum nor in the mean. If every
// position is ignored the loss is 0 with zero gradient (PyTorch gives NaN). Not
// differentiable in targets.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);

}  // namespace ag
