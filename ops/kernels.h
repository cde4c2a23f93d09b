// Which implementation the ops with two of them run: the fast kernels (fused, tiled, SIMD,
// threaded) or the readable reference kernels of ops/reference/, which compute the same
// function in the plainest way there is. Both are always built; a whole run picks one.
//
//   ag::KernelGuard guard(ag::Kernels::Reference);   // every op below runs its reference twin
//
// The setting is process-wide, not per thread: the thread pool's workers and the caller see
// the same choice, and a training run is meant to use one route from start to end. The
// programs' `--kernels reference|fast` flag sets it once at start-up.
//
// The ops that switch: linear, linear_gelu, gelu, layer_norm, embedding, cross_entropy, the
// three layouts of scaled_dot_product_attention, and the optimizer updates of Adam / AdamW and
// clip_grad_norm. softmax and log_softmax (ops/softmax.cpp) have one implementation only, and it
// is already the plain one; the reference kernels call it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ag {

enum class Kernels { Fast, Reference };

Kernels kernels();
void set_kernels(Kernels k);

// "fast" or "reference", and back; parse_kernels throws std::invalid_argument naming the
// accepted values.
const char* kernels_name(Kernels k);
Kernels parse_kernels(std::string_view name);

// The ops that have both kernels, for switching one alone.
enum class KernelOp {
  Linear,
  LinearGelu,
  Gelu,
  LayerNorm,
  Embedding,
  CrossEntropy,
  Attention,   // scaled_dot_product_attention in all three layouts
  AdamUpdate,  // Adam's and AdamW's step
  ClipGradNorm,
};
// The op's name as in reference::call_counts() ("linear", "scaled_dot_product_attention", ...).
const char* kernel_op_name(KernelOp op);
// Finer than a whole run: the reference kernel for these ops, the fast one for the others, while
// kernels() is Fast. For measuring what each fast kernel buys (bench/gpt_train_step
// --reference-ops); names as kernel_op_name gives them, an unknown one is std::invalid_argument.
void set_reference_ops(const std::vector<std::string>& names);
// Whether `op` runs its reference kernel now: under Kernels::Reference, or when listed above.
bool use_reference(KernelOp op);

// RAII: `k` while the guard lives, the previous setting after.
class KernelGuard {
 public:
  explicit KernelGuard(Kernels k) : previous_(kernels()) { set_kernels(k); }
  ~KernelGuard() { set_kernels(previous_); }
  KernelGuard(const KernelGuard&) = delete;
  KernelGuard& operator=(const KernelGuard&) = delete;

 private:
  Kernels previous_;
};

namespace reference {
// How many times each reference kernel has run since the last reset, by op name: what a test
// reads to see that the reference route really ran the reference code.
std::map<std::string, std::int64_t> call_counts();
void reset_call_counts();
// Called on entry by every reference kernel.
void count_call(const char* op);
}  // namespace reference

}  // namespace ag
