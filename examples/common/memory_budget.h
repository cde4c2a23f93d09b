// What a training run will need in memory, worked out from its configuration before anything
// is allocated, so a configuration too large for the machine is refused at the start with the
// sizes it would need, instead of dying in an allocation (or being killed) minutes later.
//
//   parameters P        counted exactly, as the model's constructor would create them
//   parameter bytes     4 P for the weights, 4 P gradients, 8 P AdamW moments (float32): 16 P
//   checkpoint bytes    the training state is serialised in memory before it is written: 12 P more
//   activations         what one training step keeps for its backward pass, an estimate fitted to
//                       memory_stats().peak_bytes of real steps (tests/examples/memory_budget_test.cpp
//                       holds it to within [0.7, 1.6] of the measured peak, on both kernel routes)
//
// Every product and sum is overflow-checked (Size): `--embd 1537228672809129301` is reported as
// "more than int64 can count", never wrapped around into a small number.
#pragma once

#include <attograd/attograd.h>

#include <cstdint>
#include <string>

namespace ag::examples {

// A count of elements or bytes that cannot wrap around: products and sums are checked, and a
// result past int64 is marked as such while `approx` keeps its magnitude for messages.
class Size {
 public:
  Size(std::int64_t n = 0);  // NOLINT(google-explicit-constructor): sizes are built from plain counts
  friend Size operator+(const Size& a, const Size& b);
  friend Size operator*(const Size& a, const Size& b);
  bool overflowed() const { return overflowed_; }
  std::int64_t value() const { return value_; }  // meaningful unless overflowed()
  double approx() const { return approx_; }
  bool operator>(std::int64_t limit) const { return overflowed_ || value_ > limit; }

 private:
  std::int64_t value_ = 0;
  double approx_ = 0;
  bool overflowed_ = false;
};

Size larger(const Size& a, const Size& b);

// "512 KiB", "3.2 GiB", "2.8e+37 bytes (more than int64 can count)".
std::string format_bytes(const Size& bytes);
std::string format_count(const Size& count);  // "1,234,567" or "2.8e+37 (more than int64 can count)"

// The memory this process may use: the machine's physical memory (sysconf), or the cgroup's
// memory.max or RLIMIT_AS when either is lower. `source` says which one it was.
std::int64_t memory_limit_bytes(std::string* source = nullptr);

struct TrainingMemory {
  Size parameters;        // counted as the constructor creates them
  Size parameter_bytes;   // weights, gradients and AdamW moments, float32
  Size activation_bytes;  // one training step's saved activations (estimate)
  Size peak_bytes;        // the larger of training (both above) and checkpointing (28 P)
};

// GPT (nn/gpt.h) on batches of `batch` windows of block_size tokens, with the kernels in use.
Size gpt_parameter_count(const nn::GPTConfig& config);
TrainingMemory gpt_training_memory(const nn::GPTConfig& config, std::int64_t batch);

// The encoder-decoder Transformer (nn/transformer.h) on batches of `batch` sources of up to
// `source_len` tokens (targets one longer); the learned positional table when config says so.
Size transformer_parameter_count(const nn::TransformerConfig& config);
TrainingMemory transformer_training_memory(const nn::TransformerConfig& config, std::int64_t batch,
                                           std::int64_t source_len);

// Refuses (Refused, examples/common/preflight.h) a run whose peak exceeds memory_limit_bytes(),
// with the parameter count and every part of the sum in the message. `what` names the model,
// e.g. "the model (--layers 4 --embd 128 ...)".
void check_fits_in_memory(const std::string& what, const TrainingMemory& memory);
// The same for one plain amount, e.g. the ids of a corpus or of a sample.
void check_fits_in_memory(const std::string& what, const Size& bytes);

}  // namespace ag::examples
