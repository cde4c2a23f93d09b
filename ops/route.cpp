// The router (route.h): the one place that reads the kernel switch, autocast and create_graph
// for the ops with two kernels.
#include "route.h"

#include "../autograd/forward.h"
#include "../autograd/grad.h"
#include "autocast.h"

namespace ag {

Routed route(const RoutedOp& op) {
  // 1. The kernel switch: the reference builds its own graph from its ops, and its aside (the
  // attention weights it computed in the graph) is handed out as the fast route hands it out.
  if (op.kernel && use_reference(*op.kernel)) {
    Routed r = op.reference(op.inputs);
    return {r.output, r.aside.defined() ? r.aside.detach() : Tensor()};
  }

  // 2. Autocast: the product policy, fixed now and kept by the kernels for their backward.
  Products products =
      op.bf16_products && !op.inputs.empty() && detail::autocasts(op.inputs[0]) ? Products::bf16() : Products();
  FastRun run = op.fast(products);

  // 3. create_graph: chosen by the backward pass when it runs this node.
  ComposedBackward composed = op.composed;
  if (!composed) {
    auto reference = op.reference;
    composed = [reference](const std::vector<Tensor>& inputs, const Tensor& dy, const std::vector<bool>& need) {
      return detail::backward_by_composition([&](const std::vector<Tensor>& in) { return reference(in).output; },
                                             inputs, dy, need);
    };
  }
  BackwardFn by_ops = [inputs = op.inputs, composed](const Tensor& dy, const std::vector<bool>& need) {
    return composed(inputs, dy, need);
  };
  // The composed backward reads every input, so each one's version is checked, whichever
  // backward runs.
  Saved saved = std::move(run.saved);
  saved.insert(saved.end(), op.inputs.begin(), op.inputs.end());
  // 4. Forward mode: the fast run's rule, the op's own, or the tangent through the reference's
  // ops, run on dual copies of the inputs.
  ForwardFn forward = std::move(run.tangent);
  if (!forward)
    forward = [reference = op.reference, rule = op.tangent, inputs = op.inputs](const std::vector<Tensor>& t) {
      if (rule) return rule(inputs, t);
      return detail::jvp_by_composition([&](const std::vector<Tensor>& in) { return reference(in).output; }, inputs,
                                        t);
    };
  Tensor output = record(op.name, run.output, op.inputs, fast_or_composed(std::move(run.backward), std::move(by_ops)),
                         std::move(saved), BackwardOrder::AnyOrder, std::move(forward));
  if (run.dual_backward && output.grad_fn()) output.grad_fn()->set_dual_backward(std::move(run.dual_backward));
  return {output, run.aside};
}

BackwardFn fast_or_composed(BackwardFn fast, BackwardFn composed) {
  return [fast = std::move(fast), composed = std::move(composed)](const Tensor& dy, const std::vector<bool>& need) {
    return detail::creating_graph() ? composed(dy, need) : fast(dy, need);
  };
}

}  // namespace ag
