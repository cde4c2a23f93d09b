#include "positional.h"

#include <cmath>

#include "../ops/binary.h"
#include "../ops/shape.h"
#include "../runtime/error.h"

namespace ag::nn {

namespace {

void check_length(std::string_view who, std::int64_t offset, std::int64_t t, std::int64_t max_len, const Tensor& x) {
  if (offset < 0 || offset + t > max_len)
    throw_invalid(who, "positions {} to {} (input shape {}) run past the table's {} positions", offset, offset + t - 1,
                  shape_str(x.shape()), max_len);
}

// The tables are computed in float64 (so a float64 model gets exact angles) and used in the
// input's dtype.
Tensor matching(const Tensor& table_rows, const Tensor& x) {
  return table_rows.dtype() == x.dtype() ? table_rows : table_rows.to(x.dtype());
}

void check_rank3(std::string_view who, const Tensor& x, std::int64_t d_model) {
  if (x.dim() != 3 || x.size(2) != d_model)
    throw_invalid(who, "expects [B, T, {}], got shape {}", d_model, shape_str(x.shape()));
}

}  // namespace

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(std::int64_t max_len, std::int64_t d_model) {
  if (max_len <= 0 || d_model <= 0)
    throw_invalid("SinusoidalPositionalEncoding", "sizes must be positive, got max_len={} d_model={}", max_len,
                  d_model);
  Tensor pe = detail::empty_for("SinusoidalPositionalEncoding", {max_len, d_model}, kFloat64);
  double* p = pe.mutable_data_ptr<double>();
  for (std::int64_t t = 0; t < max_len; ++t)
    for (std::int64_t c = 0; c < d_model; ++c) {
      // channels 2i and 2i + 1 share the frequency 1 / 10000^(2i / D)
      double angle = static_cast<double>(t) / std::pow(10000.0, static_cast<double>(c - c % 2) / d_model);
      p[t * d_model + c] = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  table = register_buffer("table", pe);
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, std::int64_t offset) const {
  check_rank3("SinusoidalPositionalEncoding", x, table.size(1));
  check_length("SinusoidalPositionalEncoding", offset, x.size(1), table.size(0), x);
  return x + matching(table.slice(0, offset, offset + x.size(1)), x);
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(std::int64_t max_len, std::int64_t d_model,
                                                       Generator& generator) {
  table = register_module("table", std::make_shared<Embedding>(max_len, d_model, generator));
}

Tensor LearnedPositionalEmbedding::forward(const Tensor& x, std::int64_t offset) const {
  check_rank3("LearnedPositionalEmbedding", x, table->weight.size(1));
  check_length("LearnedPositionalEmbedding", offset, x.size(1), table->weight.size(0), x);
  return x + table->forward(arange(static_cast<double>(offset), static_cast<double>(offset + x.size(1))));
}

RotaryEmbedding::RotaryEmbedding(std::int64_t head_dim, std::int64_t max_len, double base) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw_invalid("RotaryEmbedding", "head_dim must be positive and even (channels rotate in pairs), got {}", head_dim);
  if (max_len <= 0) throw_invalid("RotaryEmbedding", "max_len must be positive, got {}", max_len);
  if (!(base > 0) || !std::isfinite(base))  // base^(-2i/d) would be inf or NaN, and so every angle
    throw_invalid("RotaryEmbedding", "base must be positive and finite, got {}", base);
  std::int64_t half = head_dim / 2;
  Tensor c = detail::empty_for("RotaryEmbedding", {max_len, half}, kFloat64), s = empty_like(c);
  for (std::int64_t t = 0; t < max_len; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      double angle = static_cast<double>(t) * std::pow(base, -2.0 * static_cast<double>(i) / head_dim);
      c.mutable_data_ptr<double>()[t * half + i] = std::cos(angle);
      s.mutable_data_ptr<double>()[t * half + i] = std::sin(angle);
    }
  cos_table = register_buffer("cos", c);
  sin_table = register_buffer("sin", s);
}

Tensor RotaryEmbedding::forward(const Tensor& x, std::int64_t offset, bool heads_last) const {
  std::int64_t half = cos_table.size(1);
  if (x.dim() != 4 || x.size(3) != 2 * half)
    throw_invalid("RotaryEmbedding", "expects [B, {}, {}, {}], got shape {}", heads_last ? "T" : "H",
                  heads_last ? "H" : "T", 2 * half, shape_str(x.shape()));
  std::int64_t t = x.size(heads_last ? 1 : 2);
  check_length("RotaryEmbedding", offset, t, cos_table.size(0), x);
  // [T, d/2] broadcasts over B and H; in [B, T, H, d] it needs a size-1 head dim: [T, 1, d/2].
  Shape table_shape = heads_last ? Shape{t, 1, half} : Shape{t, half};
  Tensor cos = matching(cos_table.slice(0, offset, offset + t), x).reshape(table_shape);
  Tensor sin = matching(sin_table.slice(0, offset, offset + t), x).reshape(table_shape);
  Tensor x1 = x.slice(3, 0, half), x2 = x.slice(3, half, 2 * half);
  return cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, 3);
}

}  // namespace ag::nn
