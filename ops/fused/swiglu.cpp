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
//
// Forward mode, from the tangents of x and the three weights (a dot marks a tangent):
//   h1. = x. W1^T + x W1.^T,   h3. = x. W3^T + x W3.^T
//   a.  = silu'(h1) h1. h3 + silu(h1) h3.
//   y.  = a. W2^T + a W2.^T
//
// The gradients' tangents (forward over reverse; under create_graph, the backward of the backward,
// ops/route.h): each line of the backward moved along the tangents of everything it reads,
// with silu''(v) = s (1 - s) (2 + v (1 - 2 s)):
//   da.  = dy. W2 + dy W2.                     dW2. = dy.^T a + dy^T a.
//   dh3. = da. silu(h1) + da silu'(h1) h1.
//   dh1. = (da. h3 + da h3.) silu'(h1) + da h3 silu''(h1) h1.
//   dx.  = dh1. W1 + dh1 W1. + dh3. W3 + dh3 W3.
//   dW1. = dh1.^T x + dh1^T x.                 dW3. = dh3.^T x + dh3^T x.
// Both are written with differentiable ops on the saved h1 and h3 (a third derivative goes
// through the reference's ops, ops/reference/swiglu.cpp, as for every fused op).
//
// The kernels are the backend's (kernels/table.h: kernels/cpu/swiglu.cpp, kernels/naive/swiglu.cpp).
// The three products run under the policy the router hands them: under autocast they take bf16
// inputs, each weight rounded once per step.
#include "../../autograd/dispatch.h"
#include "../autocast_internal.h"
#include "../binary.h"
#include "../elementwise.h"
#include "../matmul.h"
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

// a + b, where an undefined tensor is a zero (an input without a tangent).
Tensor plus(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  return b.defined() ? a + b : a;
}
// a * b and a b^T, undefined when a factor is.
Tensor times(const Tensor& a, const Tensor& b) { return a.defined() && b.defined() ? a * b : Tensor(); }
Tensor by_transposed(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() ? matmul_transposed(a, false, b, true) : Tensor();
}

// silu and its first two derivatives at h1: s = sigmoid(h1),
//   silu = h1 s,   silu' = s (1 + h1 (1 - s)),   silu'' = s (1 - s) (2 + h1 (1 - 2 s)).
struct Silu {
  Tensor value, slope, curvature;
};
Silu silu_at(const Tensor& h1) {
  Tensor s = sigmoid(h1), one_minus_s = 1.0 - s;
  return {h1 * s, s * (1.0 + h1 * one_minus_s), s * one_minus_s * (2.0 + h1 * (1.0 - 2.0 * s))};
}

// What the rules read: the inputs as passed, and the h1 and h3 the forward pass saved ([R, H]).
struct SwigluValues {
  Tensor x, w_gate, w_up, w_down, h1, h3;
  // x, and a tangent of x, as the rows [R, in].
  Tensor rows(const Tensor& t) const { return t.defined() ? t.reshape({h1.size(0), w_gate.size(1)}) : Tensor(); }
};

// The tangents of h1 and h3 from those of x, W1 and W3 (t[0..2]; undefined where absent).
std::pair<Tensor, Tensor> hidden_tangents(const SwigluValues& v, const std::vector<Tensor>& t) {
  Tensor x = v.rows(v.x), x_t = v.rows(t[0]);
  return {plus(by_transposed(x_t, v.w_gate), by_transposed(x, t[1])),
          plus(by_transposed(x_t, v.w_up), by_transposed(x, t[2]))};
}

// y. (forward mode), as the rows [R, out]; undefined when no input moves.
Tensor swiglu_tangent(const SwigluValues& v, const std::vector<Tensor>& t) {
  auto [h1_t, h3_t] = hidden_tangents(v, t);
  Silu silu = silu_at(v.h1);
  Tensor a_t = plus(times(times(silu.slope, h1_t), v.h3), times(silu.value, h3_t));
  return plus(by_transposed(a_t, v.w_down), by_transposed(silu.value * v.h3, t[3]));
}

// dx. (as rows), dW1., dW3., dW2. for the gradients in `need`, from dy (rows [R, out]), its
// tangent dy_t (undefined: it stays) and the inputs' tangents.
std::vector<Tensor> swiglu_gradient_tangent(const SwigluValues& v, const Tensor& dy, const Tensor& dy_t,
                                            const std::vector<Tensor>& t, const std::vector<bool>& need) {
  auto [h1_t, h3_t] = hidden_tangents(v, t);
  Tensor x = v.rows(v.x), x_t = v.rows(t[0]);
  Silu silu = silu_at(v.h1);
  Tensor a = silu.value * v.h3;
  Tensor a_t = plus(times(times(silu.slope, h1_t), v.h3), times(silu.value, h3_t));
  // a b or a^T b, undefined when a factor is.
  auto product = [](const Tensor& a, bool transpose_a, const Tensor& b) {
    return a.defined() && b.defined() ? matmul_transposed(a, transpose_a, b, false) : Tensor();
  };
  Tensor da = matmul(dy, v.w_down);
  Tensor da_t = plus(product(dy_t, false, v.w_down), product(dy, false, t[3]));
  Tensor dh1 = da * v.h3 * silu.slope, dh3 = da * silu.value;
  Tensor dh3_t = plus(times(da_t, silu.value), times(da * silu.slope, h1_t));
  Tensor dh1_t =
      plus(times(plus(times(da_t, v.h3), times(da, h3_t)), silu.slope), times(da * v.h3 * silu.curvature, h1_t));
  std::vector<Tensor> r(4);
  if (need[0])
    r[0] = plus(plus(product(dh1_t, false, v.w_gate), product(dh1, false, t[1])),
                plus(product(dh3_t, false, v.w_up), product(dh3, false, t[2])));
  if (need[1]) r[1] = plus(product(dh1_t, true, x), product(dh1, true, x_t));
  if (need[2]) r[2] = plus(product(dh3_t, true, x), product(dh3, true, x_t));
  if (need[3]) r[3] = plus(product(dy_t, true, a), product(dy, true, a_t));
  return r;
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
  SwigluValues values{x, w_gate, w_up, w_down, h1, h3};
  auto tangent = [values, y_shape](const std::vector<Tensor>& t) {
    Tensor y_t = swiglu_tangent(values, t);
    return y_t.defined() ? y_t.reshape(y_shape) : Tensor();
  };
  auto gradient_tangent = [values, out = n.out](const Tensor& dy, const Tensor& dy_t, const std::vector<Tensor>& t,
                                                const std::vector<bool>& need) {
    auto rows = [&](const Tensor& g) { return g.defined() ? g.reshape({values.h1.size(0), out}) : Tensor(); };
    std::vector<Tensor> r = swiglu_gradient_tangent(values, rows(dy), rows(dy_t), t, need);
    if (r[0].defined()) r[0] = r[0].reshape(values.x.shape());
    return r;
  };
  return FastRun{y, backward, Saved{x, w_gate, w_up, w_down, h1, h3}, Tensor(), tangent, gradient_tangent};
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
