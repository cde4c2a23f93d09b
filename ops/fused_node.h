// The autograd side of a fused op: how what its fast kernel computed enters the graph.
//
// The router (ops/route.h) picks an op's kernel and product policy and runs it; what comes back is
// a FastRun: the output, the hand-derived backward, the tensors it reads, and the op's rules for
// forward mode and for its gradients' tangents. record_fused() records it, and is the one place
// a fused op meets autograd's switches (grad mode, create_graph, forward mode):
//
//   saving        the node keeps what the backward reads, and checks every input's version;
//   holding       an input whose bf16 copy is all the backward reads is held weakly (Held), so
//                 its float32 data goes when the caller drops it;
//   create_graph  a backward pass that builds a graph gets the fused gradients as one node whose
//                 backward is the op's two rules (GradientsInGraph, fused_node.cpp), or, without
//                 them, the chain rule through the op's composed backward or its reference;
//   forward mode  the output's tangent by the run's rule, the op's own, or the reference's;
//   forward over reverse  the gradients' tangents, by the run's rule.
//
// The op files ask here rather than read a switch themselves: may_release_inputs and
// will_differentiate.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "../autograd/node.h"
#include "../kernels/products.h"
#include "../runtime/profile.h"

namespace ag {

// The tangents of an op's input gradients dx_i = backward(x, dy)_i when the inputs move along
// `input_tangents` and dy along `dy_tangent` (each undefined: it stays), for the gradients in
// `need`: the derivative of the backward formula, one order up. It serves twice:
//
//   forward over reverse   the gradients' tangents in a DualLevel (node.h, DualBackwardFn);
//   reverse over reverse   the backward of the backward. With dx = J(x)^T dy, the gradient of
//                          <c, dx> is d/dy = J(x) c (the forward rule along c) and d/dx = the
//                          tangent of dx along c with dy held (this rule, dy_tangent undefined).
//
// So an op with a forward rule and this one differentiates its own backward with its fused
// kernels, and a backward pass with create_graph records one node for its gradients instead of
// running its composition (fused_node.cpp, GradientsInGraph).
using GradientTangentRule =
    std::function<std::vector<Tensor>(const Tensor& dy, const Tensor& dy_tangent,
                                      const std::vector<Tensor>& input_tangents, const std::vector<bool>& need)>;

namespace detail {

// An input as a node's closures hold it: the tensor itself, or, when the fast backward kept a
// bf16 copy of it to read instead (under autocast, linear's x and attention's q, k and v), the
// copy (rounded()), with the tensor held weakly beside it, so that the float32 tensor lives only
// as long as the caller keeps it. What reads the tensor itself on the rarer paths (a backward
// with create_graph, a forward-mode rule) calls get(): the tensor while it lives, and after that
// a float32 tensor made from the copy, in the tensor's place in the graph (the same grad_fn):
// the values the forward's bf16 products read. shape() is the tensor's (empty for an undefined
// one).
class Held {
 public:
  Held() = default;
  Held(const Tensor& t, std::shared_ptr<const bf16::Buffer> rounded);
  Tensor get() const;
  // The bf16 copy it was held beside (null when the tensor itself is held), and the tensor's shape.
  const std::shared_ptr<const bf16::Buffer>& rounded() const { return rounded_; }
  const Shape& shape() const { return shape_; }

 private:
  Tensor strong_;
  std::weak_ptr<TensorImpl> weak_;
  std::shared_ptr<const bf16::Buffer> rounded_;
  Shape shape_;
  std::shared_ptr<Node> grad_fn_;
};

// Whether an op that runs its products in bf16 may keep a bf16 copy of an activation in place
// of the activation (Held): a backward will run (grad mode, and an input that requires grad) and
// no DualLevel is live, whose backward passes (forward over reverse, ag::hvp's route) read the
// inputs' tangents, which only the tensors themselves carry.
bool may_release_inputs(const std::vector<Tensor>& inputs);

// Whether the result of an op on `inputs` will be differentiated in either mode: a node will be
// recorded (grad mode, and an input that requires grad) or a tangent will be computed (an input
// with a tangent at the live forward-mode level). A fast run keeps what only a derivative reads
// (GELU's slope) when this is true; the op files ask here rather than read grad mode or tangents.
bool will_differentiate(const std::vector<Tensor>& inputs);

}  // namespace detail

// What the fast forward computed: the output, the backward that goes with it (the hand-derived
// formula, run when the pass does not build a graph), the tensors that backward reads, and what
// the op hands out beside the output.
struct FastRun {
  Tensor output;
  BackwardFn backward;
  Saved saved;
  Tensor aside = {};
  // The forward-mode rule that goes with this run, which may read what the run computed
  // (attention's log-sum-exp). Unset: RoutedOp::tangent, or the reference's tangent.
  ForwardFn tangent = {};
  // The gradients' tangents (below). Unset: forward over reverse runs the composed backward,
  // whose ops carry them, and a backward pass with create_graph differentiates the composition.
  GradientTangentRule gradient_tangent = {};
  // Per input (by position), the bf16 copy the fast backward reads in place of the float32 input
  // (under autocast, linear's x, read by dW = dy^T x, and attention's q, k and v), or null: the
  // node's closures then hold that input as a detail::Held too, so its float32 data is
  // freed as soon as the caller drops it. Empty: every input is held.
  std::vector<std::shared_ptr<const bf16::Buffer>> released = {};
};

using ComposedBackward = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const Tensor& dy,
                                                           const std::vector<bool>& need)>;

using TangentRule = std::function<Tensor(const std::vector<Tensor>& inputs, const std::vector<Tensor>& input_tangents)>;

// The create_graph switch for an op with one kernel and two forms of its backward: `fast` (a
// hand loop, outside the graph) and `composed` (the same formula as differentiable ops, through
// the saved tensors' history). A pass that builds a graph runs `composed`, any other `fast`.
// record_fused uses it too; the op records the result as an AnyOrder backward.
BackwardFn fast_or_composed(BackwardFn fast, BackwardFn composed);

// Records `run`, the fast forward of the op `name` on `inputs` (as passed), as the output's node.
// For what the run does not give: `composed` (the backward as ops, for create_graph) and
// `tangent` (the forward-mode rule); where either is unset, the chain rule or the tangent
// through `reference`, the op's specification.
Tensor record_fused(const OpName& name, const std::vector<Tensor>& inputs, FastRun run,
                    const std::function<Tensor(const std::vector<Tensor>&)>& reference, ComposedBackward composed,
                    TangentRule tangent);

}  // namespace ag
