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
// softmax and log_softmax (ops/softmax.cpp) have one implementation only, and it is already the
// plain one; the reference kernels call it. The library's own list of the ops that switch, and
// the call counts its tests read, are internal (ops/kernel_ops.h, ops/call_counts.h).
#pragma once

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

// Finer than a whole run: the reference kernel for the ops named, the fast one for the others,
// while kernels() is Fast; on the calling thread, like the switch itself. For measuring what
// each fast kernel buys (bench/gpt_train_step --reference-ops). An op is named as its function
// is ("linear", "layer_norm", "scaled_dot_product_attention", ...; "adam_update" for Adam's and
// AdamW's step, "clip_grad_norm"); a name with no reference kernel is std::invalid_argument,
// whose message lists the ones there are. An empty list puts every op back on its fast kernel.
void set_reference_ops(const std::vector<std::string>& names);

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

}  // namespace ag
