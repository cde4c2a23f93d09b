#include "memory_budget.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "cli.h"
#include "preflight.h"

namespace ag::examples {

Size::Size(std::int64_t n) : value_(n), approx_(static_cast<double>(n)) {}

Size operator+(const Size& a, const Size& b) {
  Size s;
  s.approx_ = a.approx_ + b.approx_;
  s.overflowed_ = a.overflowed_ || b.overflowed_ || __builtin_add_overflow(a.value_, b.value_, &s.value_);
  return s;
}

Size operator*(const Size& a, const Size& b) {
  Size s;
  s.approx_ = a.approx_ * b.approx_;
  s.overflowed_ = a.overflowed_ || b.overflowed_ || __builtin_mul_overflow(a.value_, b.value_, &s.value_);
  return s;
}

Size larger(const Size& a, const Size& b) {
  if (a.overflowed() || b.overflowed()) return a.overflowed() ? a : b;
  return a.value() >= b.value() ? a : b;
}

std::string format_bytes(const Size& bytes) {
  if (bytes.overflowed()) return fmt::format("{:.2g} bytes (more than int64 can count)", bytes.approx());
  double b = bytes.approx();
  if (b < 1024) return plural(bytes.value(), "byte");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = -1;
  while (b >= 1024 && u < 5) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

std::string format_count(const Size& count) {
  if (count.overflowed()) return fmt::format("{:.2g} (more than int64 can count)", count.approx());
  std::string digits = std::to_string(count.value()), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

std::int64_t memory_limit_bytes(std::string* source) {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  std::int64_t limit =
      pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::numeric_limits<std::int64_t>::max();
  std::string from = "physical memory";
  // A container's cgroup (v2) may allow less than the machine has: "max" or a number of bytes.
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  std::int64_t cg = 0;
  if (cgroup >> cg && cg > 0 && cg < limit) limit = cg, from = "the cgroup's memory.max";
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && as.rlim_cur < static_cast<rlim_t>(limit))
    limit = static_cast<std::int64_t>(as.rlim_cur), from = "the address-space limit (ulimit -v)";
  if (source) *source = from;
  return limit;
}

// --- Parameter counts: the layers' shapes, as nn/gpt.cpp and nn/transformer.cpp create them ---

namespace {

// LayerNorm over d: a gain, and a shift when `bias`.
Size layer_norm(const Size& d, bool bias) { return bias ? d * 2 : d; }
// Linear d_in -> d_out.
Size linear(const Size& d_in, const Size& d_out, bool bias) { return d_in * d_out + (bias ? d_out : Size(0)); }
// Multi-head attention: q, k, v and the output projection, each d -> d (heads split d, they add nothing).
Size attention(const Size& d, bool bias) { return linear(d, d * 3, bias) + linear(d, d, bias); }
Size feed_forward(const Size& d, const Size& hidden, bool bias) {
  return linear(d, hidden, bias) + linear(hidden, d, bias);
}
// SwiGLU: gate, up and down, no biases, of nn::swiglu_hidden(4 d) (at most 3 d + 8, the bound
// taken where 4 d is past what int64 can hold).
Size swiglu(std::int64_t d) {
  Size hidden = d <= std::numeric_limits<std::int64_t>::max() / 8 ? Size(nn::swiglu_hidden(4 * d)) : Size(d) * 3 + 8;
  return Size(d) * hidden * 3;
}

}  // namespace

Size gpt_parameter_count(const nn::GPTConfig& c) {
  Size d = c.n_embd;
  Size mlp = c.mlp == nn::MlpKind::Swiglu ? swiglu(c.n_embd) : feed_forward(d, d * 4, c.bias);
  Size block = layer_norm(d, c.bias) * 2 + attention(d, c.bias) + mlp;
  return Size(c.vocab_size) * d + Size(c.block_size) * d + Size(c.n_layer) * block + layer_norm(d, c.bias);
}

Size transformer_parameter_count(const nn::TransformerConfig& c) {
  Size d = c.d_model, ff = feed_forward(d, c.d_ff, true);
  Size encoder = layer_norm(d, true) * 2 + attention(d, true) + ff;
  Size decoder = layer_norm(d, true) * 3 + attention(d, true) * 2 + ff;  // self- and cross-attention
  Size total = Size(c.src_vocab) * d + Size(c.tgt_vocab) * d + Size(c.n_encoder_layers) * encoder +
               Size(c.n_decoder_layers) * decoder + linear(d, c.tgt_vocab, true);
  if (c.positions == nn::Positions::Learned) total = total + Size(c.max_len) * d;
  if (c.norm_first) total = total + layer_norm(d, true) * 2;
  return total;
}

// --- Activations: fitted to memory_stats().peak_bytes of one step, float32 (see the header) ---

namespace {

TrainingMemory with_parameters(const Size& parameters, const Size& activation_bytes) {
  TrainingMemory m{.parameters = parameters,
                   .parameter_bytes = parameters * 16,
                   .activation_bytes = activation_bytes,
                   .peak_bytes = 0};
  m.peak_bytes = larger(m.parameter_bytes + activation_bytes, parameters * 28);  // training, checkpointing
  return m;
}

}  // namespace

TrainingMemory gpt_training_memory(const nn::GPTConfig& c, std::int64_t batch) {
  // Floats kept per token: per layer about 15 C on the fast route (attention fused, no T x T
  // weights kept), 34 C and 4 H T on the reference route (the weights are kept); the logits
  // and their softmax, 2 V (5 V).
  Size tokens = Size(batch) * c.block_size, d = c.n_embd, layers = c.n_layer;
  bool reference = kernels() == Kernels::Reference;
  Size floats = reference
                    ? tokens * (d * (layers * 34 + 3) + layers * c.n_head * c.block_size * 4 + Size(c.vocab_size) * 5)
                    : tokens * (d * (layers * 15 + 6) + Size(c.vocab_size) * 2);
  return with_parameters(gpt_parameter_count(c), floats * 4);
}

TrainingMemory transformer_training_memory(const nn::TransformerConfig& c, std::int64_t batch,
                                           std::int64_t source_len) {
  // Per (encoder + decoder) layer pair about 33 d floats per token (57 d and 6 H T on the
  // reference route), counting the target's source_len + 1 tokens.
  Size tokens = Size(batch) * (Size(source_len) + 1), d = c.d_model;
  Size layers = std::max(c.n_encoder_layers, c.n_decoder_layers);
  bool reference = kernels() == Kernels::Reference;
  Size floats = reference ? tokens * (d * (layers * 57 + 12) + layers * c.n_heads * (Size(source_len) + 1) * 6)
                          : tokens * d * (layers * 33 + 7);
  return with_parameters(transformer_parameter_count(c), floats * 4);
}

void check_fits_in_memory(const std::string& what, const TrainingMemory& m) {
  std::string source;
  std::int64_t limit = memory_limit_bytes(&source);
  if (!(m.peak_bytes > limit)) return;
  refuse(
      "{} is too large for this machine: it would need about {} of memory, and {} allows {} (parameters: {}; "
      "with their gradients and AdamW moments: {}; one training step's activations: about {})",
      what, format_bytes(m.peak_bytes), source, format_bytes(limit), format_count(m.parameters),
      format_bytes(m.parameter_bytes), format_bytes(m.activation_bytes));
}

void check_fits_in_memory(const std::string& what, const Size& bytes) {
  std::string source;
  std::int64_t limit = memory_limit_bytes(&source);
  if (bytes > limit)
    refuse("{} would need about {} of memory, and {} allows {}", what, format_bytes(bytes), source,
           format_bytes(limit));
}

}  // namespace ag::examples
