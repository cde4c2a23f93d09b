// Products with the Hessian and the Jacobian, built from ag::grad (grad.h): the second-order
// tools of torch.autograd.functional, for a function of one tensor.
//
//   hvp(f, x, v)     = H v,  H = d^2 f / dx^2        f returns one element (a loss)
//   hvp_reverse_over_reverse(f, x, v)   the same product by another route
//   jvp(f, x, v)     = J v,  J = d f(x) / dx         f returns any shape; the result has f's shape
//   hessian(f, x)    = H, shaped [*x.shape, *x.shape]
//   jacobian(f, x)   = J, shaped [*f(x).shape, *x.shape]
//
// hvp is forward over reverse (forward.h): x moves along v, the forward pass and one backward
// pass carry tangents, and H v is the tangent of the gradient g(x) = df/dx, computed by each
// op's own rule (node.h, DualBackwardFn) without a graph of the backward pass.
// hvp_reverse_over_reverse is the readable route: one backward pass with create_graph and one
// through the gradient it built, whose gradient of <g(x), v> is H v; every op with a second
// derivative takes part, where hvp also needs each op's forward rule. jvp is forward mode: one
// forward pass of f with the tangent v on x. hessian builds the gradient with its graph once and
// takes one backward pass through it per element of x (reverse over reverse, as
// hvp_reverse_over_reverse); jacobian takes one first-order backward pass per element of f(x).
// Both are meant for small tensors.
//
// x itself is not touched: f is called on a fresh leaf holding x's values, and the results
// hold no graph. docs/higher_order.md walks through each one.
#pragma once

#include <functional>
#include <vector>

#include "tensor.h"

namespace ag {

using FunctionOfTensor = std::function<Tensor(const Tensor&)>;

Tensor hvp(const FunctionOfTensor& f, const Tensor& x, const Tensor& v);
Tensor hvp_reverse_over_reverse(const FunctionOfTensor& f, const Tensor& x, const Tensor& v);

// H v for a loss of tensors it reaches by itself, a model's parameters:
//
//   std::vector<ag::Tensor> hv = ag::hvp([&] { return model.loss(x, y); }, model.parameters(), v);
//
// hv[i] = sum_j (d^2 loss / d params[i] d params[j]) v[j], shaped like params[i]. The same
// forward over reverse as hvp: loss() runs with each params[i] carrying the tangent v[i] (no
// DualLevel may be live), and the parameters are left as they were, values and gradients.
// params must require grad; a parameter the loss does not reach gets zeros.
std::vector<Tensor> hvp(const std::function<Tensor()>& loss, const std::vector<Tensor>& params,
                        const std::vector<Tensor>& v);
Tensor jvp(const FunctionOfTensor& f, const Tensor& x, const Tensor& v);

// f(inputs) and J v in one forward pass, for a function of several tensors (as torch.func.jvp):
// input i moves along tangents[i] (an undefined tangent: it stays). Float inputs only move;
// an index or mask input takes an undefined tangent. Neither f's output nor its tangent holds a
// graph.
using FunctionOfTensors = std::function<Tensor(const std::vector<Tensor>&)>;
struct JvpResult {
  Tensor output;
  Tensor tangent;  // J v, shaped like output
};
JvpResult jvp(const FunctionOfTensors& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& tangents);
Tensor hessian(const FunctionOfTensor& f, const Tensor& x);
Tensor jacobian(const FunctionOfTensor& f, const Tensor& x);

}  // namespace ag
