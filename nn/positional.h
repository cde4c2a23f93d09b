// Positional information. Attention itself ignores order: permute the tokens and the outputs
// permute the same way. These three put order back in.
//
//   SinusoidalPositionalEncoding   fixed:   x + PE[t],  PE[t, 2i] = sin(t / 10000^(2i/D)),
//                                                       PE[t, 2i+1] = cos(t / 10000^(2i/D))
//   LearnedPositionalEmbedding     trained: x + P[t], one vector per position
//   RotaryEmbedding (RoPE)         rotates each (q, k) pair of channels by an angle t * theta_i,
//                                  so q_t . k_s depends on t - s only
#pragma once

#include <utility>

#include "../autograd/generator.h"
#include "layers.h"
#include "module.h"

namespace ag::nn {

// x: [B, T, D]  ->  x + PE[:T]. PE is a buffer (not trained), computed in float64 and added in
// x's dtype.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(std::int64_t max_len, std::int64_t d_model);
  Tensor forward(const Tensor& x, std::int64_t offset = 0) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)

  Tensor table;  // [max_len, d_model]
};

// x: [B, T, D]  ->  x + P[offset : offset + T]
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(std::int64_t max_len, std::int64_t d_model, Generator& generator = default_generator());
  Tensor forward(const Tensor& x, std::int64_t offset = 0) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)

  std::shared_ptr<Embedding> table;  // [max_len, d_model]
};

// Rotates channel pairs (i, i + d/2) of x: [B, H, T, d] at positions offset .. offset + T - 1:
//   y1 = x1 cos(t theta_i) - x2 sin(t theta_i),   y2 = x1 sin(t theta_i) + x2 cos(t theta_i),
//   theta_i = base^(-2i/d). Applied to queries and keys, not values. With heads_last, x is
//   [B, T, H, d] instead (the layout MultiHeadAttention works in).
class RotaryEmbedding : public Module {
 public:
  RotaryEmbedding(std::int64_t head_dim, std::int64_t max_len, double base = 10000.0);
  Tensor forward(const Tensor& x, std::int64_t offset = 0, bool heads_last = false) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)

  Tensor cos_table, sin_table;  // [max_len, head_dim / 2]
};

}  // namespace ag::nn
