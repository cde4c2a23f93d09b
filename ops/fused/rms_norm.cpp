// rms_norm over the last dim, row by row (D = row length): layer norm without the centring and
// without a bias, as LLaMA-style models normalise.
//   ms = sum x^2 / D,   rrms = 1 / sqrt(ms + eps),   xhat = x rrms,   y = xhat w
// Backward (docs/layer_norm.md derives it). With g = dy w, and since d rrms / d x_j = -rrms^3 x_j / D:
//   dx_j = rrms g_j + sum_i g_i x_i (-rrms^3 x_j / D) = rrms (g_j - xhat_j mean(g xhat))
//   dw = sum over rows of dy xhat
// Saved: x, and per row rrms (xhat is recomputed from it, not stored).
// Forward mode, from the tangents dx and dw (each may be absent):
//   dxhat = rrms (dx - xhat mean(xhat dx)),   dy = dxhat w + xhat dw
// The gradients' tangents (forward over reverse; under create_graph, the backward of the
// backward, ops/route.h), a dot marking a tangent, m = mean(g xhat):
//   rrms. = -rrms^2 mean(xhat x.),   xhat. = rrms (x. - xhat mean(xhat x.)),   g. = dy. w + dy w.
//   dx.   = rrms. (g - xhat m) + rrms (g. - xhat. m - xhat mean(g. xhat + g xhat.))
//   dw.   = sum over rows of (dy. xhat + dy xhat.)
//
// The readable twin is ops/reference/rms_norm.cpp; the kernels are the backend's (kernels/table.h:
// kernels/cpu/norms.cpp, kernels/naive/norms.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../autograd/dispatch.h"
#include "../binary.h"
#include "../nn_ops.h"
#include "../reduce.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"
#include "../shape.h"

namespace ag {

namespace {

// dx and dw from dy (the formulas above) by the backend's kernel, xhat recomputed from the saved
// rrms.
std::vector<Tensor> rms_norm_backward(const backends::Backend& backend, const Tensor& dy, const Tensor& x,
                                      const Tensor& w, const Tensor& rrms, const std::vector<bool>& need) {
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  Tensor dx = need[0] ? empty_like(x) : Tensor();
  Tensor dw = need[1] ? empty({d}, x.dtype()) : Tensor();
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().rms_norm_backward(rows, d, x.data_ptr<T>(), data_or_null<T>(w), rrms.data_ptr<double>(),
                                         dy.data_ptr<T>(), mutable_data_or_null<T>(dx), mutable_data_or_null<T>(dw));
  });
  return {dx, dw};
}

// The tangent, from the saved rrms: row-wise ops on [R, D] views, no forward recomputed.
Tensor rms_norm_tangent(const Tensor& x, const Tensor& weight, const Tensor& rrms, const std::vector<Tensor>& t,
                        std::int64_t rows, std::int64_t d) {
  Tensor r = rrms.to(x.dtype()).reshape({rows, 1});
  Tensor xhat = x.reshape({rows, d}) * r;
  Tensor dy;
  if (t[0].defined()) {
    Tensor dx = t[0].reshape({rows, d});
    Tensor dxhat = r * (dx - xhat * (xhat * dx).mean(1, true));
    dy = weight.defined() ? dxhat * weight : dxhat;
  }
  if (t[1].defined()) dy = dy.defined() ? dy + xhat * t[1] : xhat * t[1];
  return dy.reshape(x.shape());
}

// dx. and dw. (the lines above) for the gradients in `need`, from dy, its tangent dy_t and the
// tangents t of x and w (each undefined where it stays): row-wise ops on [R, D] views.
std::vector<Tensor> rms_norm_gradient_tangent(const Tensor& x, const Tensor& weight, const Tensor& rrms,
                                              const Tensor& dy, const Tensor& dy_t, const std::vector<Tensor>& t,
                                              const std::vector<bool>& need, std::int64_t rows, std::int64_t d) {
  Tensor r = rrms.to(x.dtype()).reshape({rows, 1});
  Tensor xhat = x.reshape({rows, d}) * r;
  Tensor zero = zeros({rows, d}, x.dtype());
  Tensor x_t = t[0].defined() ? t[0].reshape({rows, d}) : zero;
  Tensor g_dy = dy.reshape({rows, d}), g_dy_t = dy_t.defined() ? dy_t.reshape({rows, d}) : zero;
  Tensor g = weight.defined() ? g_dy * weight : g_dy;
  Tensor g_t = weight.defined() ? g_dy_t * weight : g_dy_t;
  if (t[1].defined()) g_t = g_t + g_dy * t[1];
  Tensor spread = (xhat * x_t).mean(1, true);
  Tensor r_t = -(r * r * spread), xhat_t = r * (x_t - xhat * spread);
  Tensor m = (g * xhat).mean(1, true), m_t = (g_t * xhat + g * xhat_t).mean(1, true);
  std::vector<Tensor> out(2);
  if (need[0]) out[0] = (r_t * (g - xhat * m) + r * (g_t - xhat_t * m - xhat * m_t)).reshape(x.shape());
  if (need[1]) out[1] = (g_dy_t * xhat + g_dy * xhat_t).sum(0);
  return out;
}

// The fused forward: one pass per row for the mean square (its rrms kept in float64 for
// backward), one for y.
FastRun rms_norm_fast(const backends::Backend& backend, const Tensor& x, const Tensor& weight, double eps,
                      std::int64_t rows, std::int64_t d) {
  Tensor y = empty_like(x);
  Tensor rrms = empty({rows}, kFloat64);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().rms_norm(rows, d, eps, x.data_ptr<T>(), data_or_null<T>(weight), y.mutable_data_ptr<T>(),
                                rrms.mutable_data_ptr<double>());
  });
  const backends::Backend* kernels = &backend;
  auto backward = [kernels, x, weight, rrms](const Tensor& dy, const std::vector<bool>& need) {
    return rms_norm_backward(*kernels, dy, x, weight, rrms, need);
  };
  auto tangent = [x, weight, rrms, rows, d](const std::vector<Tensor>& t) {
    return rms_norm_tangent(x, weight, rrms, t, rows, d);
  };
  auto gradient_tangent = [x, weight, rrms, rows, d](const Tensor& dy, const Tensor& dy_t, const std::vector<Tensor>& t,
                                                     const std::vector<bool>& need) {
    return rms_norm_gradient_tangent(x, weight, rrms, dy, dy_t, t, need, rows, d);
  };
  return {y, backward, Saved{x, weight}, Tensor(), tangent, gradient_tangent};
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_floating("rms_norm", x);
  if (x.dim() == 0) throw_invalid("rms_norm", "needs at least one dim, got a 0-d tensor");
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  if (d == 0) throw_invalid("rms_norm", "cannot normalise over an empty last dim (shape {})", shape_str(x.shape()));
  if (!(eps > 0)) throw_invalid("rms_norm", "eps must be positive, got {}", eps);
  check_vector("rms_norm", "weight", weight, d, x);
  RoutedOp op{.kernel = KernelOp::RmsNorm, .inputs = {x, weight}};
  op.reference = [eps](const std::vector<Tensor>& in) -> Routed { return {reference::rms_norm(in[0], in[1], eps)}; };
  op.fast = [&](const Products&, const backends::Backend& backend) {
    return rms_norm_fast(backend, x, weight, eps, rows, d);
  };
  return route(op).output;
}

}  // namespace ag
