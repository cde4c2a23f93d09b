// Which implementation the ops with two of them run: the fast kernels (fused, tiled, SIMD,
// threaded) or the readable reference kernels of ops/reference/, which compute the same
// function in the plainest way there is. Both are always built; the router (ops/route.h) is
// the one place that reads this switch.
//
//   ag::KernelGuard guard(ag::Kernels::Reference);   // every op below runs its reference twin
//
// The setting belongs to the calling thread, as grad mode and autocast do (route.h says why one
// scope serves all three): a new thread starts with the fast kernels. The programs'
// `--kernels reference|fast` flag sets it once on the main thread at start-up.
//
// The ops that switch are listed once, in AG_KERNEL_OPS below. softmax and log_softmax
// (ops/softmax.cpp) have one implementation only, and it is already the plain one; the reference
// kernels call it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ag {

// Fast: the cpu backend's kernels (kernels/cpu/). Reference: the readable twins of ops/reference/,
// composed of differentiable ops. Naive: the plain-loop backend (kernels/naive/), one thread, no
// BLAS, no SIMD; float32 and float64 only (it takes no bf16 product policy, so autocast refuses it).
enum class Kernels { Fast, Reference, Naive };

Kernels kernels();
void set_kernels(Kernels k);

// "fast", "reference" or "naive", and back; parse_kernels throws std::invalid_argument naming
// the accepted values.
const char* kernels_name(Kernels k);
Kernels parse_kernels(std::string_view name);

// The ops that have both kernels, each with its name as reference::call_counts() and
// set_reference_ops spell it: the one list the enum and the names are made from.
#define AG_KERNEL_OPS(X)                                                     \
  X(Linear, "linear")                                                        \
  X(LinearGelu, "linear_gelu")                                               \
  X(Gelu, "gelu")                                                            \
  X(LayerNorm, "layer_norm")                                                 \
  X(RmsNorm, "rms_norm")                                                     \
  X(Swiglu, "swiglu")                                                        \
  X(Embedding, "embedding")                                                  \
  X(CrossEntropy, "cross_entropy")                                           \
  X(Attention, "scaled_dot_product_attention") /* in all three layouts */    \
  X(AdamUpdate, "adam_update")                 /* Adam's and AdamW's step */ \
  X(ClipGradNorm, "clip_grad_norm")

#define AG_KERNEL_OP_ENUM(id, name) id,
enum class KernelOp { AG_KERNEL_OPS(AG_KERNEL_OP_ENUM) };
#undef AG_KERNEL_OP_ENUM

// The op's name as in reference::call_counts() ("linear", "scaled_dot_product_attention", ...).
const char* kernel_op_name(KernelOp op);
// Finer than a whole run: the reference kernel for these ops, the fast one for the others, while
// kernels() is Fast; on the calling thread, like the switch itself. For measuring what each fast kernel buys
// (bench/gpt_train_step
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
// How many times each reference kernel has run since the last reset, by op name (the ops that
// ran at least once): what a test reads to see that the reference route really ran the
// reference code.
std::map<std::string, std::int64_t> call_counts();
void reset_call_counts();
// Called on entry by every reference kernel: one relaxed atomic increment, no lock and no
// string, so that counting costs a training run on the reference kernels nothing it would notice.
void count_call(KernelOp op);
}  // namespace reference

}  // namespace ag
