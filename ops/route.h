// The router: how every op with two kernels runs, in one place.
//
// An op with a fast kernel and a readable reference twin declares itself once, as a RoutedOp:
//
//   the reference   the specification (ops/reference/), composed of differentiable ops
//   the fast kernel its forward under a matrix-product policy, returning its hand-derived backward
//   its products    whether its matrix products may take bf16 inputs under autocast
//
// and its public function is the argument check followed by route(op):
//
//   Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
//     check_linear("linear", x, weight, bias);
//     RoutedOp op{.kernel = KernelOp::Linear, .bf16_products = true, .inputs = {x, weight, bias}};
//     op.reference = [](const std::vector<Tensor>& in) -> Routed { return {reference::linear(in[0], in[1], in[2])}; };
//     op.fast = [&](const Products& products, const backends::Backend& backend) {
//       return linear_fast(products, backend, x, weight, bias);
//     };
//     return route(op).output;
//   }
//
// route() applies four switches the same way to every such op: the first two itself, the last
// two through record_fused (ops/fused_node.h), the autograd side of every such op:
//
//   1. the kernel switch (ops/kernels.h): under Kernels::Reference, or with the op listed in
//      set_reference_ops, the reference runs instead, and its own ops build the graph; else the
//      fast run computes with the kernels of one backend (kernels/table.h): the cpu backend's,
//      or under Kernels::Naive the plain loops of kernels/naive/, which the backward keeps;
//   2. autocast (ops/autocast.h): a float32 op whose products may be bf16 gets Products::bf16()
//      while autocast is on, every other op the BLAS policy (kernels/products.h); a fast run whose
//      backward reads only a bf16 copy of an input releases the float32 one (FastRun::released);
//   3. create_graph (autograd/grad.h): a backward pass that builds a graph needs gradients that
//      can be differentiated again. An op whose fast run has a forward rule and its gradients'
//      tangents (FastRun::gradient_tangent) computes them with the fast backward and records
//      them as one node whose own backward is those two rules; any other op runs the chain rule
//      through the reference (or its own composed backward), as that node does too when it is
//      differentiated with create_graph in turn (third order);
//   4. forward mode (autograd/forward.h): when a tangent reaches the op, its tangent comes from
//      the fast run's own rule (FastRun::tangent), else the op's (RoutedOp::tangent), else the
//      reference's, computed by running the reference on dual inputs.
//
// The switches have one scope: each is a setting of the calling thread (as grad mode and
// autocast are in PyTorch), read when an op is called. A new thread starts with the fast kernels,
// grad mode on and autocast off; the thread pool's workers only run parts of a kernel an op has
// already chosen, so they never read a switch. A node's backward runs with the choices its
// forward made (the kernel and the product policy), wherever and whenever backward is called;
// only create_graph is the backward pass's own.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "../autograd/context.h"  // current_backend: the backend whose kernels serve ops now
#include "../kernels/products.h"
#include "../kernels/table.h"
#include "fused_node.h"
#include "kernel_ops.h"
#include "kernels.h"

namespace ag {

// The readers of the first two switches, declared here rather than beside the switches (the
// user's ops/kernels.h and ops/autocast.h) because the router is their one caller; create_graph's
// is autograd's (detail::creating_graph, autograd/node.h).
//
// Whether `op` runs its reference kernel now: under Kernels::Reference, or when set_reference_ops
// lists it (ops/kernels.cpp).
bool use_reference(KernelOp op);
namespace detail {
// Whether an op on this tensor runs its matrix products in bf16: autocast on for the calling
// thread, and a float32 tensor (ops/autocast.cpp).
bool autocasts(const Tensor& t);
}  // namespace detail

// What an op hands back: its output (in the graph) and, for attention, a plain tensor beside it
// (the weights, outside the graph; undefined when not asked for).
struct Routed {
  Tensor output;
  Tensor aside = {};
};

namespace detail {

// GELU's form as the kernels spell it.
inline backends::GeluForm gelu_form(GeluApproximation approximate) {
  return approximate == GeluApproximation::None ? backends::GeluForm::Exact : backends::GeluForm::Tanh;
}

// GELU''(x), elementwise, by the backend's kernel (ops/fused/gelu.cpp): the tangent of the slope
// that gelu's and linear_gelu's backward read. has_gelu_curvature says whether the backend has
// the kernel for x's dtype; without it those ops give no rule for their gradients' tangents.
Tensor gelu_curvature(const backends::Backend& backend, const Tensor& x, GeluApproximation approximate);
bool has_gelu_curvature(const backends::Backend& backend, DType dtype);

}  // namespace detail

struct RoutedOp {
  // Which op it is (ops/kernel_ops.h): its name, its profile family and the switch that may pick
  // the reference. Unset: an op with one kernel, named by `name` and `family`.
  std::optional<KernelOp> kernel = {};
  const char* name = nullptr;  // the node's name, where it is not the kernel op's (attention's layouts)
  profile::Family family = profile::Family::Reduction;  // of an op with no kernel op; else the kernel op's
  bool bf16_products = false;                           // whether its matrix products may take bf16 inputs (autocast)
  std::vector<Tensor> inputs = {};                      // as passed: the node's inputs, the reference's arguments
  std::function<Routed(const std::vector<Tensor>&)> reference = {};  // the specification
  // The forward by the kernels of the backend the switch chose (kernels/table.h), under the
  // product policy autocast chose; its backward keeps both.
  std::function<FastRun(const Products&, const backends::Backend&)> fast = {};
  // The backward as differentiable ops, for create_graph (3. above). Unset: the chain rule
  // through `reference` (autograd/grad.h, detail::backward_by_composition).
  ComposedBackward composed = {};
  // The forward-mode rule: the output's tangent from the inputs and their tangents (undefined
  // where an input has none). Unset: the reference's tangent, by running it on dual inputs
  // (detail::jvp_by_composition).
  TangentRule tangent = {};
};

Routed route(const RoutedOp& op);

// For ops outside the graph (the optimizer's update, gradient clipping): the reference kernel, or
// the chosen backend's, as the kernel switch says.
template <class Reference, class Kernel>
decltype(auto) route_kernel(KernelOp op, Reference&& reference, Kernel&& kernel) {
  if (use_reference(op)) return reference();
  return kernel(current_backend());
}

}  // namespace ag
