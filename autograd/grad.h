// ag::grad: gradients handed back instead of accumulated, and gradients of gradients.
//
//   auto [dx] = ag::grad({loss}, {x});                      // dloss/dx; x.grad() untouched
//
// With create_graph the backward pass is itself recorded: the gradients it returns are tensors
// of the graph, computed by ops, and can be differentiated again, to any order.
//
//   ag::Tensor y = (x * x * x).sum();                      // y = sum x^3
//   auto g = ag::grad({y}, {x}, {}, {.create_graph = true})[0];   // 3 x^2, with a graph
//   auto h = ag::grad({g.sum()}, {x})[0];                  // 6 x
//
// The same as libtorch's torch::autograd::grad. docs/higher_order.md shows how each op's
// backward builds its graph, and autograd/functional.h builds hvp, jvp, hessian and jacobian
// from this function.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "tensor.h"

namespace ag {

struct GradOptions {
  // Keep the graph's saved tensors, so that another pass can run through it. Left unset it
  // follows create_graph, as in libtorch: a graph that was differentiated once with
  // create_graph is usually differentiated again.
  std::optional<bool> retain_graph = std::nullopt;
  // Record the backward pass, so that the returned gradients can be differentiated again.
  bool create_graph = false;
  // An input the outputs do not depend on gets an undefined gradient; otherwise it is an
  // error that names the input.
  bool allow_unused = false;
};

// The gradient of sum_k <outputs[k], grad_outputs[k]> with respect to each input, in input
// order. Every input must require grad; it may be a leaf or a tensor an op computed, and the
// gradient is the total one, through every path (also through other inputs). grad_outputs
// may be empty (every output then holds one element, a loss) or give one tensor per output,
// shaped like it; with create_graph, the result is also differentiated through them. Nothing is
// written into any .grad().
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, const GradOptions& options = {});

namespace detail {
// ag::grad, and when `through_inputs` is false the gradient that reaches each input straight
// from the outputs, not through another input: an op's partial derivatives.
std::vector<Tensor> grad_of(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& grad_outputs, const GradOptions& options, bool through_inputs);

// For a backward formula run with create_graph (creating_graph() is true) whose op has a
// readable twin composed of differentiable ops: the gradients with respect to `inputs` of
// <f(inputs), grad_output>, obtained by running f on the inputs and differentiating the graph
// it builds, with create_graph. The result joins the graph, so the op's gradient can be
// differentiated to any order. An input with needs[i] false gets an undefined gradient; one
// that f does not use, zeros.
std::vector<Tensor> backward_by_composition(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                            const std::vector<Tensor>& inputs, const Tensor& grad_output,
                                            const std::vector<bool>& needs);
}  // namespace detail

}  // namespace ag
