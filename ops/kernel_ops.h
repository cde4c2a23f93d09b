// The ops that have a fast kernel and a reference twin (ops/kernels.h says what a user switches),
// as the library's own code names them: the list they are made from, the enum the router and the
// optimizer pass around, and the call count every reference kernel keeps.
//
// Internal: read in the source tree, not installed. ops/route.h, the reference kernels of
// ops/reference/ and the switch itself (ops/kernels.cpp) include it; a user names these ops by
// their strings, in ag::set_reference_ops.
#pragma once

#include <atomic>

#include "../runtime/profile.h"

namespace ag {

// The ops that have both kernels, each with its name as its node, set_reference_ops and the call
// counts (ops/call_counts.h) spell it, and the family of work (runtime/profile.h) its forward and
// backward are charged to: the one list the enum, the names and the families are made from.
#define AG_KERNEL_OPS(X)                                                              \
  X(Linear, "linear", Elementwise) /* a product, and what it adds around it */        \
  X(LinearGelu, "linear_gelu", Elementwise)                                           \
  X(Gelu, "gelu", Elementwise)                                                        \
  X(LayerNorm, "layer_norm", Normalisation)                                           \
  X(RmsNorm, "rms_norm", Normalisation)                                               \
  X(Swiglu, "swiglu", Elementwise)                                                    \
  X(Embedding, "embedding", Reduction)                                                \
  X(CrossEntropy, "cross_entropy", Softmax)                                           \
  X(Attention, "scaled_dot_product_attention", Softmax) /* in all three layouts */    \
  X(AdamUpdate, "adam_update", Optimizer)               /* Adam's and AdamW's step */ \
  X(ClipGradNorm, "clip_grad_norm", Optimizer)

#define AG_KERNEL_OP_ENUM(id, name, family) id,
enum class KernelOp { AG_KERNEL_OPS(AG_KERNEL_OP_ENUM) };
#undef AG_KERNEL_OP_ENUM

// The op's name ("linear", "scaled_dot_product_attention", ...) and its family.
const char* kernel_op_name(KernelOp op);
profile::Family kernel_op_family(KernelOp op);

// Whether an op runs its reference kernel now is use_reference (declared in ops/route.h, since
// only the router reads the switch; defined in ops/kernels.cpp).

namespace detail {
// Whether reference kernel calls are counted now, and the count itself. Both live in
// ops/kernels.cpp; a test turns counting on with ag::testing::CountCalls (ops/call_counts.h).
extern std::atomic<bool> g_count_reference_calls;
void add_reference_call(KernelOp op);
}  // namespace detail

namespace reference {

// Called on entry by every reference kernel, so that a test can see the reference route really
// ran the reference code. Counting is off unless a test turns it on: off, this is one relaxed
// load and a branch not taken, nothing a training run on the reference kernels would notice;
// on, one relaxed atomic increment, no lock and no string.
inline void count_call(KernelOp op) {
  if (detail::g_count_reference_calls.load(std::memory_order_relaxed)) detail::add_reference_call(op);
}

}  // namespace reference

}  // namespace ag
