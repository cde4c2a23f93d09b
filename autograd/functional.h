// Products with the Hessian and the Jacobian, built from ag::grad (grad.h): the second-order
// tools of torch.autograd.functional, for a function of one tensor.
//
//   hvp(f, x, v)     = H v,  H = d^2 f / dx^2        f returns one element (a loss)
//   jvp(f, x, v)     = J v,  J = d f(x) / dx         f returns any shape; the result has f's shape
//   hessian(f, x)    = H, shaped [*x.shape, *x.shape]
//   jacobian(f, x)   = J, shaped [*f(x).shape, *x.shape]
//
// hvp is one backward pass with create_graph and one through the gradient it built: the
// gradient g(x) = df/dx is a tensor of the graph, and the gradient of <g(x), v> is H v. jvp is
// forward mode without a forward-mode engine (the "double vjp" trick): with a dummy u,
// w(u) = J^T u is linear in u, so the gradient of <w(u), v> with respect to u is J v. hessian
// and jacobian call these once per element of x or of f(x): meant for small tensors.
//
// x itself is not touched: f is called on a fresh leaf holding x's values, and the results
// hold no graph. docs/higher_order.md walks through each one.
#pragma once

#include <functional>

#include "tensor.h"

namespace ag {

using FunctionOfTensor = std::function<Tensor(const Tensor&)>;

Tensor hvp(const FunctionOfTensor& f, const Tensor& x, const Tensor& v);
Tensor jvp(const FunctionOfTensor& f, const Tensor& x, const Tensor& v);
Tensor hessian(const FunctionOfTensor& f, const Tensor& x);
Tensor jacobian(const FunctionOfTensor& f, const Tensor& x);

}  // namespace ag
