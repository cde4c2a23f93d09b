// swiglu: the MLP of LLaMA-style models as one op, without biases. R = rows (every dim of x but
// the last, flattened), H = hidden.
//
//   h1 = x W1^T,   h3 = x W3^T           x: [R, in]   W1 (gate), W3 (up): [H, in]   h1, h3: [R, H]
//   a = silu(h1) h3,   silu(v) = v s,  s = sigmoid(v)
//   y = a W2^T                           W2 (down): [out, H]   y: [R, out]
//
// Backward, from dy, with h1 and h3 saved by the forward pass and a recomputed from them:
//   da  = dy W2,   dW2 = dy^T a                      (y = a W2^T: linear's rule)
//   dh3 = da silu(h1)                                (a = silu(h1) h3: the product rule)
//   dh1 = da h3 silu'(h1),   silu'(v) = s + v s (1 - s) = s (1 + v (1 - s))
//   dx  = dh1 W1 + dh3 W3,   dW1 = dh1^T x,   dW3 = dh3^T x   (x feeds both projections)
// Forward mode and create_graph go through the reference's ops (ops/reference/swiglu.cpp): its
// chain rule is the same formula.
//
// The kernels are the backend's (kernels/table.h: kernels/cpu/swiglu.cpp, kernels/naive/swiglu.cpp).
// The three products run under the policy the router hands them: under autocast they take bf16
// inputs, each weight rounded once per step.
#include "../../autograd/dispatch.h"
#include "../autocast_internal.h"
#include "../nn_ops.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"

namespace ag {

namespace {

void check_swiglu(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down) {
  const char* op = "swiglu";
  check_same_floating(op, x, w_gate);
  check_same_floating(op, x, w_up);
  check_same_floating(op, x, w_down);
  if (x.dim() < 1 || w_gate.dim() != 2 || x.shape().back() != w_gate.size(1))
    throw_invalid(op, "input of shape {} does not fit w_gate of shape {} (expected [hidden, {}])", shape_str(x.shape()),
                  shape_str(w_gate.shape()), x.dim() < 1 ? -1 : x.shape().back());
  if (w_up.shape() != w_gate.shape())
    throw_invalid(op, "w_up has shape {}, expected w_gate's {}", shape_str(w_up.shape()), shape_str(w_gate.shape()));
  if (w_down.dim() != 2 || w_down.size(1) != w_gate.size(0))
    throw_invalid(op, "w_down has shape {}, expected [out, {}] for the hidden size of w_gate {}",
                  shape_str(w_down.shape()), w_gate.size(0), shape_str(w_gate.shape()));
}

FastRun swiglu_fast(Products products, const backends::Backend& backend, const Tensor& x, const Tensor& w_gate,
                    const Tensor& w_up, const Tensor& w_down) {
  for (const Tensor& w : {w_gate, w_up, w_down}) detail::keep_rounded(products, w);
  backends::SwigluSizes n{rows_of(x), w_gate.size(1), w_gate.size(0), w_down.size(0)};
  Shape y_shape = x.shape();
  y_shape.back() = n.out;
  Tensor y = detail::empty_for("swiglu", y_shape, x.dtype());
  Tensor h1 = empty({n.rows, n.hidden}, x.dtype()), h3 = empty({n.rows, n.hidden}, x.dtype());
  dispatch_floating(x.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().swiglu(products, n, x.data_ptr<T>(), w_gate.data_ptr<T>(), w_up.data_ptr<T>(),
                              w_down.data_ptr<T>(), y.mutable_data_ptr<T>(), h1.mutable_data_ptr<T>(),
                              h3.mutable_data_ptr<T>());
  });
  const backends::Backend* kernels = &backend;
  auto backward = [products, kernels, n, x, w_gate, w_up, w_down, h1, h3](const Tensor& dy,
                                                                          const std::vector<bool>& need) {
    std::vector<Tensor> grads(4);
    const Tensor* shapes[] = {&x, &w_gate, &w_up, &w_down};
    for (std::size_t i = 0; i < 4; ++i)
      if (need[i]) grads[i] = empty(shapes[i]->shape(), dy.dtype());
    dispatch_floating(dy.dtype(), "swiglu", [&](auto tag) {
      using T = decltype(tag);
      kernels->table<T>().swiglu_backward(products, n, dy.data_ptr<T>(), x.data_ptr<T>(), w_gate.data_ptr<T>(),
                                          w_up.data_ptr<T>(), w_down.data_ptr<T>(), h1.data_ptr<T>(), h3.data_ptr<T>(),
                                          mutable_data_or_null<T>(grads[0]), mutable_data_or_null<T>(grads[1]),
                                          mutable_data_or_null<T>(grads[2]), mutable_data_or_null<T>(grads[3]));
    });
    return grads;
  };
  return FastRun{y, backward, Saved{x, w_gate, w_up, w_down, h1, h3}};
}

}  // namespace

// Its three products may take bf16 inputs.
Tensor swiglu(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down) {
  check_swiglu(x, w_gate, w_up, w_down);
  RoutedOp op{.kernel = KernelOp::Swiglu, .bf16_products = true, .inputs = {x, w_gate, w_up, w_down}};
  op.reference = [](const std::vector<Tensor>& in) -> Routed {
    return {reference::swiglu(in[0], in[1], in[2], in[3])};
  };
  op.fast = [&](const Products& products, const backends::Backend& backend) {
    return swiglu_fast(products, backend, x, w_gate, w_up, w_down);
  };
  return route(op).output;
}

}  // namespace ag
