// detail::backward_by_composition: the gradient of an op that has a readable twin composed of
// differentiable ops, found by differentiating the twin with ag::grad (grad.h says when to use
// it). Its result joins the graph, so the op can be differentiated to any order.
#include <functional>
#include <vector>

#include "grad.h"
#include "node.h"

namespace ag {
namespace {

// x again as a tensor of its own: the same data, with a history of one identity op leading back
// to x (its gradient and its tangent pass through unchanged).
Tensor alias_of(const Tensor& x) {
  return record(
      "alias", x.detach(), {x},
      [](const Tensor& dy, const std::vector<bool>& need) { return std::vector<Tensor>{need[0] ? dy : Tensor()}; },
      Saved{}, BackwardOrder::AnyOrder, [](const std::vector<Tensor>& t) { return t[0]; });
}

}  // namespace

std::vector<Tensor> detail::backward_by_composition(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                                    const std::vector<Tensor>& inputs, const Tensor& grad_output,
                                                    const std::vector<bool>& needs) {
  // A tensor passed twice (attention(x, x, x)) needs one partial derivative per position: each
  // repeat is handed to f as an alias of itself, a tensor of its own whose history leads back
  // to the original, so that the walk below stops there.
  std::vector<Tensor> args = inputs;
  for (std::size_t i = 0; i < args.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (needs[i] && args[i].defined() && args[i].impl() == inputs[j].impl()) {
        args[i] = alias_of(args[i]);
        break;
      }
  Tensor output = f(args);
  std::vector<Tensor> wanted;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (needs[i]) wanted.push_back(args[i]);
  std::vector<Tensor> grads(inputs.size());
  if (!output.requires_grad()) {  // no input that needs a gradient is used: zeros
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (needs[i]) grads[i] = zeros_like(inputs[i]);
    return grads;
  }
  std::vector<Tensor> found =
      grad_of({output}, wanted, {grad_output}, {.retain_graph = true, .create_graph = true, .allow_unused = true},
              /*through_inputs=*/false);
  for (std::size_t i = 0, k = 0; i < inputs.size(); ++i)
    if (needs[i]) {
      grads[i] = found[k].defined() ? found[k] : zeros_like(inputs[i]);
      ++k;
    }
  return grads;
}

}  // namespace ag
