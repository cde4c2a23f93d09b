#include "layers.h"

#include <cmath>

#include "../ops/binary.h"
#include "../ops/nn_ops.h"
#include "../runtime/error.h"

namespace ag::nn {

namespace {
Tensor uniform(const Shape& shape, double bound, Generator& generator) {
  return (rand(shape, generator) * (2 * bound) - bound).detach();
}
}  // namespace

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool has_bias, Generator& generator) {
  if (in_features <= 0 || out_features <= 0)
    throw_invalid("Linear", "sizes must be positive, got in_features={} out_features={}", in_features, out_features);
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform({out_features, in_features}, bound, generator));
  if (has_bias) bias = register_parameter("bias", uniform({out_features}, bound, generator));
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

Embedding::Embedding(std::int64_t num, std::int64_t dim, Generator& generator) {
  if (num <= 0 || dim <= 0) throw_invalid("Embedding", "sizes must be positive, got num={} dim={}", num, dim);
  weight = register_parameter("weight", randn({num, dim}, generator));
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

LayerNorm::LayerNorm(std::int64_t dim, double eps_, bool has_bias) : eps(eps_) {
  if (dim <= 0) throw_invalid("LayerNorm", "dim must be positive, got {}", dim);
  weight = register_parameter("weight", ones({dim}));
  if (has_bias) bias = register_parameter("bias", zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

RMSNorm::RMSNorm(std::int64_t dim, double eps_) : eps(eps_) {
  if (dim <= 0) throw_invalid("RMSNorm", "dim must be positive, got {}", dim);
  if (!(eps > 0)) throw_invalid("RMSNorm", "eps must be positive, got {}", eps);
  weight = register_parameter("weight", ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps); }

const char* norm_name(NormKind kind) { return kind == NormKind::Layer ? "layer" : "rms"; }

NormKind parse_norm(std::string_view name) {
  if (name == "layer") return NormKind::Layer;
  if (name == "rms") return NormKind::Rms;
  throw_invalid("norm", "unknown normalisation '{}': expected 'layer' or 'rms'", name);
}

std::shared_ptr<Normalization> make_norm(NormKind kind, std::int64_t dim, bool bias) {
  if (kind == NormKind::Rms) return std::make_shared<RMSNorm>(dim);
  return std::make_shared<LayerNorm>(dim, 1e-5, bias);
}

Dropout::Dropout(double p_, Generator& generator) : p(p_), generator_(generator.next_u64()) {
  if (!(p >= 0.0 && p <= 1.0)) throw_invalid("Dropout", "probability must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training(), generator_); }

FeedForward::FeedForward(std::int64_t d_model, std::int64_t d_hidden, double dropout, bool bias, Generator& generator,
                         GeluApproximation gelu_)
    : gelu(gelu_) {
  fc = register_module("fc", std::make_shared<Linear>(d_model, d_hidden, bias, generator));
  proj = register_module("proj", std::make_shared<Linear>(d_hidden, d_model, bias, generator));
  drop = register_module("drop", std::make_shared<Dropout>(dropout, generator));
}

// fc's parameters go through linear_gelu rather than fc->forward(x).gelu(gelu): the same numbers,
// and GELU runs on each band of rows while it is still in cache. Measured against the two-op
// form, alternated runs of bench/gpt_train_step at 2 threads: medium 536 against 565 ms a step
// (5 %, 4 of 5 pairs), small 43.8 against 43.4 (within the noise); docs/performance.md.
Tensor FeedForward::forward(const Tensor& x) {
  return drop->forward(proj->forward(linear_gelu(x, fc->weight, fc->bias, gelu)));
}

SwiGLU::SwiGLU(std::int64_t d_model, std::int64_t d_hidden, double dropout, Generator& generator) {
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(d_model, d_hidden, false, generator));
  up_proj = register_module("up_proj", std::make_shared<Linear>(d_model, d_hidden, false, generator));
  down_proj = register_module("down_proj", std::make_shared<Linear>(d_hidden, d_model, false, generator));
  drop = register_module("drop", std::make_shared<Dropout>(dropout, generator));
}

// The three projections' weights go to the fused op, not through the three Linears' forward.
Tensor SwiGLU::forward(const Tensor& x) {
  return drop->forward(swiglu(x, gate_proj->weight, up_proj->weight, down_proj->weight));
}

const char* mlp_name(MlpKind kind) { return kind == MlpKind::Gelu ? "gelu" : "swiglu"; }

MlpKind parse_mlp(std::string_view name) {
  if (name == "gelu") return MlpKind::Gelu;
  if (name == "swiglu") return MlpKind::Swiglu;
  throw_invalid("mlp", "unknown MLP '{}': expected 'gelu' or 'swiglu'", name);
}

std::int64_t swiglu_hidden(std::int64_t gelu_hidden) {
  if (gelu_hidden <= 0)
    throw_invalid("swiglu_hidden", "the GELU MLP's hidden size must be positive, got {}", gelu_hidden);
  std::int64_t two_thirds = (2 * gelu_hidden + 2) / 3;  // rounded up
  return (two_thirds + 7) / 8 * 8;
}

std::shared_ptr<Mlp> make_mlp(MlpKind kind, std::int64_t d_model, std::int64_t gelu_hidden, double dropout, bool bias,
                              Generator& generator) {
  if (kind == MlpKind::Swiglu) return std::make_shared<SwiGLU>(d_model, swiglu_hidden(gelu_hidden), dropout, generator);
  return std::make_shared<FeedForward>(d_model, gelu_hidden, dropout, bias, generator);
}

}  // namespace ag::nn
