// The router (route.h): the one place that reads the kernel switch and autocast for the ops with
// two kernels. What the fast run computed enters the graph through record_fused (fused_node.h).
#include "route.h"

#include "../runtime/profile.h"

namespace ag {

Routed route(const RoutedOp& op) {
  // 1. The kernel switch: the reference builds its own graph from its ops, and its aside (the
  // attention weights it computed in the graph) is handed out as the fast route hands it out.
  const char* name = op.kernel && !op.name ? kernel_op_name(*op.kernel) : op.name;
  profile::Family family = op.kernel ? kernel_op_family(*op.kernel) : op.family;
  if (op.kernel && use_reference(*op.kernel)) {
    Routed r = op.reference(op.inputs);
    return {r.output, r.aside.defined() ? r.aside.detach() : Tensor()};
  }

  // 2. Autocast: the product policy, fixed now and kept by the kernels for their backward, with
  // the backend whose kernels run it.
  const backends::Backend& backend = current_backend();
  bool bf16 = op.bf16_products && !op.inputs.empty() && detail::autocasts(op.inputs[0]);
  if (bf16 && !backend.bf16_products)
    throw_invalid(name,
                  "autocast asks for bf16 products, which the {} kernels do not compute (float32 and float64 only); "
                  "turn autocast off, or use the fast kernels",
                  backend.name);
  Products products = bf16 ? Products::bf16() : Products();
  FastRun run;
  {
    profile::Scope scope(family);
    run = op.fast(products, backend);
  }

  // 3. and 4., create_graph and forward mode, are the node's: fused_node.cpp.
  Tensor aside = run.aside;
  Tensor output = record_fused(
      OpName(name, family), op.inputs, std::move(run),
      [reference = op.reference](const std::vector<Tensor>& in) { return reference(in).output; }, op.composed,
      op.tangent);
  return {output, aside};
}

}  // namespace ag
