// Autocast: matrix products in bfloat16, everything else in float32, as PyTorch's
// torch.autocast("cpu", dtype=torch.bfloat16) does.
//
//   {
//     ag::AutocastGuard autocast;            // throws where bf16 cannot run (ag::bf16_support())
//     ag::Tensor loss = model.forward(x, y); // linear, matmul and attention: bf16 products
//   }
//   loss.backward();                         // their backward products in bf16 too
//   optimizer.step();                        // float32 master weights and moments
//
// Under the guard, on its thread, these float32 ops round their matrix products' inputs to bf16
// and accumulate in float32, writing float32: linear and linear_gelu (y = x W^T, and dx, dW in
// backward), matmul and its batched forms (C = A B, dA, dB), and the fused attention's S = Q K^T
// and O = P V (dQ, dK, dV and the recomputed S in backward). An op records whether it ran in
// bf16, so its backward does the same wherever backward is called. Everything else is float32 as
// before: softmax and its row sums, layer norm's statistics, GELU, the loss, every gradient, the
// weights and the optimizer's moments. float64 ops never autocast, so gradcheck is unaffected.
//
// A parameter (a leaf that requires grad) is rounded to bf16 once and the copy is kept until the
// parameter is written (its version moves, as every optimizer step does) or the outermost guard
// ends: forward and backward, and every use in between, share one copy.
//
// An activation linear or linear_gelu reads (their x) is rounded once, and its bf16 copy is what
// the node keeps for dW: the float32 tensor is not held by the node, so it is freed as soon as
// the caller drops it (a saved activation costs half its float32 size). A backward with
// create_graph, which reads x itself, reads it while the caller keeps it and otherwise a float32
// tensor made from the copy, in x's place in the graph: the values the forward's products read.
// A forward inside a DualLevel (forward mode, ag::hvp) keeps x as every op does.
//
// The reference kernels (ops/kernels.h) are float32/float64 and stay so: under Kernels::Reference
// their compositions call matmul, which does autocast. Building a graph of the gradient
// (create_graph) runs the backward with the fused rules or as float32 compositions.
//
// This header is what a user calls. How an op rounds its tensors for the bf16 products (the
// cache above) is internal, in ops/autocast_internal.h, and the bf16 kernels themselves are in
// kernels/bf16/bf16.h; neither is installed.
#pragma once

#include <string>

namespace ag {

// Whether bf16 matrix products, and so autocast, can run here, on which unit, and if not, why not.
struct Bf16Support {
  bool available = false;
  std::string unit;    // "AMX" or "AVX512-BF16" when available
  std::string reason;  // one line: what was found, or what is missing
};
// Found once per process: oneDNN present in this build, and a CPU with a bf16 unit (AMX or
// AVX512-BF16, as oneDNN detects it, which honours ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA).
const Bf16Support& bf16_support();

// f as a bf16 product reads it: rounded to the nearest bfloat16 (8 significant bits, float32's
// range), ties to even, and widened back to float32. A NaN stays NaN; a value past bf16's largest
// becomes infinity. For seeing, on any CPU, what the rounding of autocast's inputs costs.
float bf16_round(float f);

// Whether autocast is on for this thread.
bool is_autocast_enabled();
// Turns autocast on or off for this thread; on throws std::runtime_error naming the reason where
// bf16 matrix products cannot run (bf16_support() says beforehand). A program that chooses for
// a whole run calls this once on its main thread (the examples do, in
// examples/common/precision_option.h); turning it off outside any guard also drops the
// parameters' bf16 copies.
void set_autocast_enabled(bool enabled);
// Drops the bf16 copies of parameters kept for reuse (the outermost guard does this on exit).
void clear_autocast_cache();

// RAII: autocast on (or off, with false) while the guard lives, the previous state after.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace ag
