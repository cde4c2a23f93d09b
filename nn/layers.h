// Basic layers: each holds its parameters and calls the matching op in ops/nn_ops.h. Each maps
// one tensor to one tensor, through forward(x) or a call, layer(x), as in libtorch.
#pragma once

#include <memory>
#include <string_view>

#include "../autograd/generator.h"
#include "../ops/elementwise.h"
#include "module.h"

namespace ag::nn {

// y = x W^T + b.   x: [..., in]  ->  y: [..., out]
// Initialised as PyTorch does: W and b uniform in [-1/sqrt(in), 1/sqrt(in)].
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         Generator& generator = default_generator());
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], or undefined
};

// A table of `num` vectors of size `dim`, looked up by int64 ids. Initialised N(0, 1).
class Embedding : public Module {
 public:
  Embedding(std::int64_t num, std::int64_t dim, Generator& generator = default_generator());
  Tensor forward(const Tensor& ids) const;  // ids: int64 [...]  ->  [..., dim]
  Tensor operator()(const Tensor& ids) const { return forward(ids); }

  Tensor weight;  // [num, dim]
};

// What LayerNorm and RMSNorm share, so that a block can hold either (BlockOptions::norm).
class Normalization : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

// Normalises the last dim; weight starts at 1 and bias at 0.
class LayerNorm : public Normalization {
 public:
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5, bool bias = true);
  Tensor forward(const Tensor& x) const override;

  Tensor weight;  // [dim]
  Tensor bias;    // [dim], or undefined
  double eps;
};

// Normalises the last dim by its root mean square, as LLaMA-style models do (ops/nn_ops.h,
// rms_norm): no centring and no bias. weight starts at 1.
class RMSNorm : public Normalization {
 public:
  explicit RMSNorm(std::int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) const override;

  Tensor weight;  // [dim]
  double eps;
};

// Which normalisation a model's blocks use: "layer" (LayerNorm, GPT-2's) or "rms" (RMSNorm).
enum class NormKind { Layer, Rms };
// "layer" or "rms", and back; parse_norm throws std::invalid_argument naming both.
const char* norm_name(NormKind kind);
NormKind parse_norm(std::string_view name);
// A LayerNorm (with a bias when `bias`) or an RMSNorm over `dim`, each with its default eps.
std::shared_ptr<Normalization> make_norm(NormKind kind, std::int64_t dim, bool bias);

// Zeroes elements with probability p while training; the identity in eval mode. Has its own
// generator, seeded from the one given at construction, so runs repeat exactly.
class Dropout : public Module {
 public:
  explicit Dropout(double p, Generator& generator = default_generator());
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // Its generator, whose state a training checkpoint saves so a resumed run draws the same masks.
  Generator& generator() { return generator_; }
  const Generator& generator() const { return generator_; }

  double p;

 private:
  Generator generator_;
};

// What FeedForward and SwiGLU share, so that a block can hold either (BlockOptions::mlp): the
// position-wise network of a Transformer block.   x: [..., d_model]  ->  [..., d_model]
class Mlp : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// GPT-2's MLP: Linear, GELU, Linear, Dropout, through a hidden size d_hidden (usually 4 d_model).
class FeedForward : public Mlp {
 public:
  FeedForward(std::int64_t d_model, std::int64_t d_hidden, double dropout = 0.0, bool bias = true,
              Generator& generator = default_generator(), GeluApproximation gelu = GeluApproximation::None);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> fc;    // d_model -> d_hidden
  std::shared_ptr<Linear> proj;  // d_hidden -> d_model
  std::shared_ptr<Dropout> drop;
  GeluApproximation gelu;
};

// LLaMA's MLP (ops/nn_ops.h, swiglu), then Dropout: (silu(x W_gate^T) * x W_up^T) W_down^T,
// three projections without biases. Its hidden size is usually about 8/3 d_model, which gives it
// the parameters of a 4 d_model GELU MLP (swiglu_hidden).
class SwiGLU : public Mlp {
 public:
  SwiGLU(std::int64_t d_model, std::int64_t d_hidden, double dropout = 0.0, Generator& generator = default_generator());
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> gate_proj;  // d_model -> d_hidden, through silu
  std::shared_ptr<Linear> up_proj;    // d_model -> d_hidden
  std::shared_ptr<Linear> down_proj;  // d_hidden -> d_model
  std::shared_ptr<Dropout> drop;
};

// Which MLP a model's blocks use: "gelu" (FeedForward, GPT-2's) or "swiglu" (SwiGLU, LLaMA's).
enum class MlpKind { Gelu, Swiglu };
// "gelu" or "swiglu", and back; parse_mlp throws std::invalid_argument naming both.
const char* mlp_name(MlpKind kind);
MlpKind parse_mlp(std::string_view name);
// SwiGLU's hidden size standing in for a GELU MLP of `gelu_hidden`: two thirds of it (three
// matrices instead of two, the same parameters), rounded up to a multiple of 8.
std::int64_t swiglu_hidden(std::int64_t gelu_hidden);
// A FeedForward (with biases when `bias`) of hidden size `gelu_hidden`, or a SwiGLU of
// swiglu_hidden(gelu_hidden).
std::shared_ptr<Mlp> make_mlp(MlpKind kind, std::int64_t d_model, std::int64_t gelu_hidden, double dropout, bool bias,
                              Generator& generator);

}  // namespace ag::nn
