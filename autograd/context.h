// Everything that changes what an op does on the calling thread, in one struct: grad mode, the
// backward pass running here and the node whose formula runs, forward mode's level, the graph
// observer (anomaly mode), and the two switches of ops/ (the kernel route and autocast).
//
// Each setting belongs to a thread, as in PyTorch: a new thread starts from the defaults below,
// and a guard on one thread never changes what another thread's ops do. Each field is read and
// written through the functions named beside it, in the file named there; among the ops, the
// router (ops/route.cpp: the kernel route and autocast) and the autograd side of its ops
// (ops/fused_node.cpp: grad mode, create_graph, forward mode) are the places that read them.
//
// Not here: the bookkeeping behind a setting (autocast's cache of bf16 copies, forward mode's list
// of the tensors given a tangent), which stays per thread beside the code that owns it.
//
// Internal: not installed. A user sets these through the guards (NoGradGuard, fwad::DualLevel,
// AutocastGuard, KernelGuard, anomaly mode's guard).
#pragma once

#include <cstdint>

namespace ag {

class Node;
class GraphObserver;

namespace backends {
struct Backend;  // kernels/table.h
}

namespace detail {

struct ThreadContext {
  bool grad_enabled = true;           // is_grad_enabled, set_grad_enabled (grad_mode.cpp)
  bool in_backward = false;           // a backward pass runs formulas here: in_backward (engine.cpp)
  const Node* running = nullptr;      // the node whose formula runs: creating_graph, node_output (node.cpp)
  std::uint64_t forward_level = 0;    // the live forward-mode level, 0 if none: fwad::is_active (forward.cpp)
  bool in_forward_rule = false;       // an op's forward rule runs: propagating_tangents (forward.cpp)
  GraphObserver* observer = nullptr;  // told of every op recorded: graph_observer (hooks.h, node.cpp)
  std::uint8_t kernels = 0;           // ag::Kernels, Fast first: kernels(), use_reference (ops/kernels.cpp)
  std::uint32_t reference_ops = 0;    // bit i: KernelOp i runs its reference twin (ops/kernels.cpp)
  bool autocast = false;              // bf16 products: is_autocast_enabled, autocasts (ops/autocast.cpp)
};

// The calling thread's.
ThreadContext& thread_context();

// ThreadContext::kernels for ag::Kernels::Naive (ops/kernels.h checks that it is).
inline constexpr std::uint8_t kNaiveKernels = 2;

}  // namespace detail

// The backend whose kernels compute what the calling thread runs now: the plain loops of
// kernels/naive/ under Kernels::Naive, else the cpu backend's (also under Kernels::Reference, for
// the primitive ops the reference twins are made of). Read by every op, and by the core itself
// for the elements it computes: the backward pass's sums of gradients (engine.cpp), and the
// conversions of Tensor::to and tensor(), arange and the fills of zeros, ones and full
// (tensor.cpp).
const backends::Backend& current_backend();
}  // namespace ag
