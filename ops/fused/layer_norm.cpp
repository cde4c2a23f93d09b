// layer_norm over the last dim, row by row (D = row length):
//   mu = sum x / D,   var = sum (x - mu)^2 / D,   rstd = 1 / sqrt(var + eps)
//   xhat = (x - mu) rstd,   y = xhat w + b
// Backward (docs/layer_norm.md derives it). With g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))
//   dw = sum over rows of dy xhat,   db = sum over rows of dy
// Saved: x, and per row mu and rstd (xhat is recomputed from them, not stored).
// Forward mode, from the tangents dx, dw, db (each may be absent; docs/forward_mode.md):
//   dxhat = rstd (dx - mean(dx) - xhat mean(xhat dx)),   dy = dxhat w + xhat dw + db
//
// The readable twin is ops/reference/layer_norm.cpp; the kernels are the backend's (kernels/table.h:
// kernels/cpu/norms.cpp, kernels/naive/norms.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../autograd/dispatch.h"
#include "../../autograd/forward.h"
#include "../binary.h"
#include "../nn_ops.h"
#include "../reduce.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"
#include "../shape.h"

namespace ag {

namespace {

// dx, dw and db from dy (the formulas above) by the backend's kernel, xhat recomputed from the
// saved mean and rstd.
std::vector<Tensor> layer_norm_backward(const backends::Backend& backend, const Tensor& dy, const Tensor& x,
                                        const Tensor& w, const Tensor& mean, const Tensor& rstd,
                                        const std::vector<bool>& need) {
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  Tensor dx = need[0] ? empty_like(x) : Tensor();
  Tensor dw = need[1] ? empty({d}, x.dtype()) : Tensor();
  Tensor db = need[2] ? empty({d}, x.dtype()) : Tensor();
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().layer_norm_backward(rows, d, x.data_ptr<T>(), data_or_null<T>(w), mean.data_ptr<double>(),
                                           rstd.data_ptr<double>(), dy.data_ptr<T>(), mutable_data_or_null<T>(dx),
                                           mutable_data_or_null<T>(dw), mutable_data_or_null<T>(db));
  });
  return {dx, dw, db};
}

// The tangent, from the saved statistics: row-wise ops on [R, D] views, no forward recomputed.
Tensor layer_norm_tangent(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          const std::vector<Tensor>& t, std::int64_t rows, std::int64_t d) {
  Tensor mu = mean.to(x.dtype()).reshape({rows, 1}), rs = rstd.to(x.dtype()).reshape({rows, 1});
  Tensor xhat = (x.reshape({rows, d}) - mu) * rs;
  Tensor dy;
  auto add_term = [&dy](const Tensor& term) { dy = dy.defined() ? dy + term : term; };
  if (t[0].defined()) {
    Tensor dx = t[0].reshape({rows, d});
    Tensor dxhat = rs * (dx - dx.mean(1, true) - xhat * (xhat * dx).mean(1, true));
    add_term(weight.defined() ? dxhat * weight : dxhat);
  }
  if (t[1].defined()) add_term(xhat * t[1]);
  if (t[2].defined()) add_term(dy.defined() ? t[2] : broadcast_to(t[2], {rows, d}));
  return dy.reshape(x.shape());
}

// Forward over reverse: the tangent of the backward above when dy, x and w move, by ops on
// [R, D] views. With A = g - mean(g) - xhat mean(g xhat), so that dx = rstd A:
//   d(rstd) = -rstd^2 mean(xhat dx_in)           (dx_in: x's tangent)
//   d(xhat) = rstd (dx_in - mean(dx_in) - xhat mean(xhat dx_in))
//   d(g)    = d(dy) w + dy dw_in
//   d(dx)   = d(rstd) A + rstd (d(g) - mean(d(g)) - d(xhat) mean(g xhat) - xhat mean(d(g) xhat + g d(xhat)))
//   d(dw)   = sum over rows of d(dy) xhat + dy d(xhat),   d(db) = sum over rows of d(dy)
std::vector<Tensor> layer_norm_gradient_tangent(const Tensor& dy, const Tensor& dy_t, const Tensor& x,
                                                const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                                const std::vector<Tensor>& in_t, const std::vector<bool>& need,
                                                std::int64_t rows, std::int64_t d) {
  std::vector<Tensor> r(3);
  auto rows_of = [rows, d](const Tensor& t) { return t.reshape({rows, d}); };
  auto or_zeros = [&](const Tensor& t) { return t.defined() ? rows_of(t) : zeros({rows, d}, x.dtype()); };
  const Tensor& x_t = in_t[0];
  Tensor w_t = weight.defined() ? in_t[1] : Tensor();
  Tensor s = rstd.to(x.dtype()).reshape({rows, 1}), mu = mean.to(x.dtype()).reshape({rows, 1});
  Tensor xhat = (rows_of(x) - mu) * s, g2 = rows_of(dy), dyt = or_zeros(dy_t), xt = or_zeros(x_t);
  Tensor g = weight.defined() ? g2 * weight : g2;
  Tensor g_t = weight.defined() ? dyt * weight : dyt;
  if (w_t.defined()) g_t = g_t + g2 * w_t;
  Tensor s_t = -(s * s) * (xhat * xt).mean(1, true);
  Tensor xhat_t = s * (xt - xt.mean(1, true) - xhat * (xhat * xt).mean(1, true));
  Tensor gx = (g * xhat).mean(1, true);
  if (need[0]) {
    Tensor a = g - g.mean(1, true) - xhat * gx;
    Tensor moved = g_t - g_t.mean(1, true) - xhat_t * gx - xhat * (g_t * xhat + g * xhat_t).mean(1, true);
    r[0] = (s_t * a + s * moved).reshape(x.shape());
  }
  if (need[1]) r[1] = (dyt * xhat + g2 * xhat_t).sum(0);
  if (need[2]) r[2] = dyt.sum(0);
  return r;
}

// The fused forward: one pass per row for the statistics (kept in float64 for backward), one for
// y; backward is layer_norm_backward above.
FastRun layer_norm_fast(const backends::Backend& backend, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        double eps, std::int64_t rows, std::int64_t d) {
  Tensor y = empty_like(x);
  Tensor mean = empty({rows}, kFloat64), rstd = empty({rows}, kFloat64);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().layer_norm(rows, d, eps, x.data_ptr<T>(), data_or_null<T>(weight), data_or_null<T>(bias),
                                  y.mutable_data_ptr<T>(), mean.mutable_data_ptr<double>(),
                                  rstd.mutable_data_ptr<double>());
  });
  const backends::Backend* kernels = &backend;
  auto backward = [kernels, x, weight, mean, rstd](const Tensor& dy, const std::vector<bool>& need) {
    return layer_norm_backward(*kernels, dy, x, weight, mean, rstd, need);
  };
  auto tangent = [x, weight, mean, rstd, rows, d](const std::vector<Tensor>& t) {
    return layer_norm_tangent(x, weight, mean, rstd, t, rows, d);
  };
  auto gradient_tangent = [x, weight, mean, rstd, rows, d](const Tensor& dy, const Tensor& dy_t,
                                                           const std::vector<Tensor>& in_t,
                                                           const std::vector<bool>& need) {
    return layer_norm_gradient_tangent(dy, dy_t, x, weight, mean, rstd, in_t, need, rows, d);
  };
  return {y, backward, Saved{x, weight}, Tensor(), tangent, gradient_tangent};
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_floating("layer_norm", x);
  if (x.dim() == 0) throw_invalid("layer_norm", "needs at least one dim, got a 0-d tensor");
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  if (d == 0) throw_invalid("layer_norm", "cannot normalise over an empty last dim (shape {})", shape_str(x.shape()));
  if (!(eps > 0)) throw_invalid("layer_norm", "eps must be positive, got {}", eps);
  check_vector("layer_norm", "weight", weight, d, x);
  check_vector("layer_norm", "bias", bias, d, x);
  RoutedOp op{.kernel = KernelOp::LayerNorm, .inputs = {x, weight, bias}};
  op.reference = [eps](const std::vector<Tensor>& in) -> Routed {
    return {reference::layer_norm(in[0], in[1], in[2], eps)};
  };
  op.fast = [&](const Products&, const backends::Backend& backend) {
    return layer_norm_fast(backend, x, weight, bias, eps, rows, d);
  };
  return route(op).output;
}

}  // namespace ag
