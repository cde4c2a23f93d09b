// linear and linear_gelu. Notation: R = rows (every dim of x but the last, flattened).
//
// linear:  y = x W^T + b      x: [R, in]  W: [out, in]  y: [R, out]
//   dx = dy W          (dy_ro depends on x_ri through W_oi)
//   dW = dy^T x        (summed over the R rows)
//   db = sum_r dy_r
// linear_gelu:  h = x W^T + b,  y = GELU(h);  saved: x, W and GELU'(h)
//   dh = dy GELU'(h), then the three products above with dh in place of dy
// Forward mode, from the tangents of x, W and b (each may be absent):
//   linear:       dy = dx W^T + x dW^T + db
//   linear_gelu:  dh the same, dy = GELU'(h) dh  (the slope backward uses)
//
// The readable twins are in ops/reference/linear.cpp; the kernels are the backend's
// (kernels/table.h: kernels/cpu/linear.cpp, kernels/naive/linear.cpp). Their three products run
// under the policy the router hands them (ops/route.h, kernels/products.h): under autocast they
// take bf16 inputs, W rounded once per step and x once per call, its copy kept for dW.
#include "../../autograd/dispatch.h"
#include "../../autograd/forward.h"
#include "../../autograd/grad_mode.h"
#include "../autocast_internal.h"
#include "../binary.h"
#include "../elementwise.h"
#include "../nn_ops.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"

namespace ag {

namespace {

void check_linear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same_floating(op, x, weight);
  if (weight.dim() != 2 || x.dim() < 1 || x.shape().back() != weight.size(1))
    throw_invalid(op, "input of shape {} does not fit weight of shape {} (expected [..., {}])", shape_str(x.shape()),
                  shape_str(weight.shape()), weight.dim() == 2 ? weight.size(1) : -1);
  check_vector(op, "bias", bias, weight.size(0), x);
}

Shape linear_shape(const Tensor& x, const Tensor& weight) {
  Shape shape = x.shape();
  shape.back() = weight.size(0);
  return shape;
}

// x as linear's backward reads it (detail::Held): the float32 tensor, or under bf16 products only
// its rounded copy, which is all dW = r(dy)^T r(x) reads (the float32 x is then released:
// FastRun::released).
detail::Held whole(const Tensor& x) { return detail::Held(x, nullptr); }

backends::LinearSizes sizes(const Tensor& x, const Tensor& weight) {
  return {rows_of(x), weight.size(1), weight.size(0)};
}

// dx, dW and db from dy by the backend's kernel, under the forward's product policy: with
// `slope` = GELU'(h) (linear_gelu), from dh = dy GELU'(h). x may be undefined when dW is not
// wanted.
std::vector<Tensor> linear_backward(const Products& products, const backends::Backend& backend, const Tensor& dy,
                                    const detail::Held& x, const Tensor& w, const Tensor& slope,
                                    const std::vector<bool>& need) {
  backends::LinearSizes n{rows_of(dy), w.size(1), w.size(0)};
  Tensor dx = need[0] ? empty(x.shape(), dy.dtype()) : Tensor();
  Tensor dw = need[1] ? empty(w.shape(), dy.dtype()) : Tensor();
  Tensor db = need[2] ? empty({n.out}, dy.dtype()) : Tensor();
  const std::uint16_t* x_rounded = need[1] && x.rounded() ? x.rounded()->data.get() : nullptr;
  Tensor x_itself = need[1] && !x_rounded ? x.get() : Tensor();
  dispatch_floating(dy.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().linear_backward(products, n, dy.data_ptr<T>(), data_or_null<T>(slope), data_or_null<T>(x_itself),
                                       x_rounded, w.data_ptr<T>(), mutable_data_or_null<T>(dx),
                                       mutable_data_or_null<T>(dw), mutable_data_or_null<T>(db));
  });
  return {dx, dw, db};
}

// The tangent of h = x W^T + b from the tangents of x, W and b (undefined where absent).
Tensor linear_tangent(const Tensor& x, const Tensor& weight, const std::vector<Tensor>& t) {
  Tensor h;
  auto add_term = [&h](const Tensor& term) { h = h.defined() ? h + term : term; };
  if (t[0].defined()) add_term(linear(t[0], weight));
  if (t[1].defined()) add_term(linear(x, t[1]));
  if (t[2].defined()) add_term(h.defined() ? t[2] : broadcast_to(t[2], linear_shape(x, weight)));
  return h;
}

// Forward over reverse: linear's backward is bilinear in dy and (x, W), so its tangent is the
// same products with one factor moved at a time:
//   dx = dy W      ->  d(dx) = d(dy) W + dy dW
//   dW = dy^T x    ->  d(dW) = d(dy)^T x + dy^T dx
//   db = sum dy    ->  d(db) = sum d(dy)
std::vector<Tensor> linear_gradient_tangent(const Products& products, const backends::Backend& backend,
                                            const Tensor& dy, const Tensor& dy_t, const Tensor& x, const Tensor& w,
                                            const Tensor& x_t, const Tensor& w_t, const std::vector<bool>& need) {
  std::vector<Tensor> r(3);
  if (dy_t.defined()) r = linear_backward(products, backend, dy_t, whole(x), w, Tensor(), need);
  std::vector<bool> second{need[0] && w_t.defined(), need[1] && x_t.defined(), false};
  if (second[0] || second[1]) {
    std::vector<Tensor> s = linear_backward(products, backend, dy, whole(x_t.defined() ? x_t : x),
                                            w_t.defined() ? w_t : w, Tensor(), second);
    for (std::size_t i : {0u, 1u})
      if (second[i]) r[i] = r[i].defined() ? r[i] + s[i] : s[i];
  }
  return r;
}

// The fused forwards, W kept rounded for backward under bf16 products (one copy per parameter
// version, ops/autocast.h). There, with a backward to come, x is rounded whole once: the
// forward's bands read that copy, backward's dW reads it again, and the node keeps no float32 x
// (FastRun::released), so a saved activation costs half its float32 size and is rounded once.
// What reads x itself (a backward with create_graph, a forward-mode rule) reaches it through
// Held::get().
struct SavedInput {
  Products forward;  // the policy the forward's products run under (x's copy kept too)
  detail::Held x;    // what backward reads
};
SavedInput save_input(const Products& products, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Products forward = products;
  if (!products.in_bf16() || x.numel() == 0 || !detail::may_release_inputs({x, weight, bias}))
    return {forward, whole(x)};
  std::shared_ptr<const bf16::Buffer> copy = detail::keep_rounded(forward, x);
  return {forward, detail::Held(x, std::move(copy))};
}

FastRun linear_fast(Products products, const backends::Backend& backend, const Tensor& x, const Tensor& weight,
                    const Tensor& bias) {
  detail::keep_rounded(products, weight);
  SavedInput in = save_input(products, x, weight, bias);
  Tensor y = detail::empty_for("linear", linear_shape(x, weight), x.dtype());
  dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().linear(in.forward, sizes(x, weight), x.data_ptr<T>(), weight.data_ptr<T>(),
                              data_or_null<T>(bias), y.mutable_data_ptr<T>());
  });
  const backends::Backend* kernels = &backend;
  auto backward = [products, kernels, x = in.x, weight](const Tensor& dy, const std::vector<bool>& need) {
    return linear_backward(products, *kernels, dy, x, weight, Tensor(), need);
  };
  auto tangent = [held = in.x, weight](const std::vector<Tensor>& t) { return linear_tangent(held.get(), weight, t); };
  auto gradient_tangent = [products, kernels, held = in.x, weight](const Tensor& dy, const Tensor& dy_t,
                                                                   const std::vector<Tensor>& in_t,
                                                                   const std::vector<bool>& need) {
    return linear_gradient_tangent(products, *kernels, dy, dy_t, held.get(), weight, in_t[0], in_t[1], need);
  };
  FastRun run{y, backward, Saved{x, weight}, Tensor(), tangent, gradient_tangent};
  if (in.x.rounded()) run.released = {in.x.rounded(), nullptr, nullptr};
  return run;
}

// The same with GELU applied to each band as it leaves the product, GELU'(h) saved for backward.
FastRun linear_gelu_fast(Products products, const backends::Backend& backend, const Tensor& x, const Tensor& weight,
                         const Tensor& bias, GeluApproximation approximate) {
  detail::keep_rounded(products, weight);
  SavedInput in = save_input(products, x, weight, bias);
  bool need_slope = detail::will_differentiate({x, weight, bias});
  Tensor y = detail::empty_for("linear_gelu", linear_shape(x, weight), x.dtype()),
         slope = need_slope ? empty_like(y) : Tensor();
  dispatch_floating(x.dtype(), "linear_gelu", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().linear_gelu(in.forward, sizes(x, weight), x.data_ptr<T>(), weight.data_ptr<T>(),
                                   data_or_null<T>(bias), y.mutable_data_ptr<T>(), mutable_data_or_null<T>(slope),
                                   detail::gelu_form(approximate));
  });
  const backends::Backend* kernels = &backend;
  auto backward = [products, kernels, x = in.x, weight, slope](const Tensor& dy, const std::vector<bool>& need) {
    return linear_backward(products, *kernels, dy, x, weight, slope, need);
  };
  auto tangent = [held = in.x, weight, slope](const std::vector<Tensor>& t) {
    return slope * linear_tangent(held.get(), weight, t);
  };
  // Forward over reverse: dh = dy GELU'(h) moves with dy and with h, then linear's rule.
  auto gradient_tangent = [products, kernels, held = in.x, weight, bias, slope, approximate](
                              const Tensor& dy, const Tensor& dy_t, const std::vector<Tensor>& in_t,
                              const std::vector<bool>& need) {
    Tensor x = held.get();
    Tensor dh = dy * slope, dh_t = dy_t.defined() ? dy_t * slope : Tensor();
    Tensor h_t = linear_tangent(x, weight, in_t);
    if (h_t.defined()) {
      Tensor second = dy * detail::gelu_curvature(*kernels, linear(x, weight, bias), approximate) * h_t;
      dh_t = dh_t.defined() ? dh_t + second : second;
    }
    return linear_gradient_tangent(products, *kernels, dh, dh_t, x, weight, in_t[0], in_t[1], need);
  };
  FastRun run{y, backward, Saved{x, weight, slope}, Tensor(), tangent};
  if (detail::has_gelu_curvature(backend, x.dtype())) run.gradient_tangent = gradient_tangent;
  if (in.x.rounded()) run.released = {in.x.rounded(), nullptr, nullptr};
  return run;
}

}  // namespace

// Both ops: the three products of x W^T + b may take bf16 inputs.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear("linear", x, weight, bias);
  RoutedOp op{.kernel = KernelOp::Linear, .bf16_products = true, .inputs = {x, weight, bias}};
  op.reference = [](const std::vector<Tensor>& in) -> Routed { return {reference::linear(in[0], in[1], in[2])}; };
  op.fast = [&](const Products& products, const backends::Backend& backend) {
    return linear_fast(products, backend, x, weight, bias);
  };
  return route(op).output;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) {
  check_linear("linear_gelu", x, weight, bias);
  RoutedOp op{.kernel = KernelOp::LinearGelu, .bf16_products = true, .inputs = {x, weight, bias}};
  op.reference = [approximate](const std::vector<Tensor>& in) -> Routed {
    return {reference::linear_gelu(in[0], in[1], in[2], approximate)};
  };
  op.fast = [&](const Products& products, const backends::Backend& backend) {
    return linear_gelu_fast(products, backend, x, weight, bias, approximate);
  };
  return route(op).output;
}

}  // namespace ag
