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
// The readable twin is ops/reference/layer_norm.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../autograd/dispatch.h"
#include "../../autograd/forward.h"
#include "../../kernels/cpu/fast_math.h"
#include "../../runtime/parallel.h"
#include "../binary.h"
#include "../nn_ops.h"
#include "../reduce.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"
#include "../shape.h"

namespace ag {

namespace {

// Elements per chunk when layer norm splits its rows across threads: [512, 64] (the tiny GPT's
// activations) is split too. With each chunk's dw and db partials on their own cache lines
// (ChunkPartials), splitting it made the tiny step 1-2 % faster on two threads than keeping it on
// one.
constexpr std::int64_t kLayerNormGrain = 8192;

// Rows [first, last) of the forward pass: sums in double, elementwise work in T.
template <class T>
[[gnu::always_inline]] inline void layer_norm_rows_impl(const T* px, const T* pw, const T* pb, T* py, double* pm,
                                                        double* pr, std::int64_t d, double eps, std::int64_t first,
                                                        std::int64_t last) {
  for (std::int64_t r = first; r < last; ++r) {
    const T* row = px + r * d;
    double mu = fast::lane_sum(d, [&](std::int64_t j) { return row[j]; }) / static_cast<double>(d);
    double var = fast::lane_sum(d,
                                [&](std::int64_t j) {
                                  double dev = row[j] - mu;
                                  return dev * dev;
                                }) /
                 static_cast<double>(d);
    double rs = 1.0 / std::sqrt(var + eps);
    pm[r] = mu;
    pr[r] = rs;
    T m = static_cast<T>(mu), s = static_cast<T>(rs);
    T* out = py + r * d;
    for (std::int64_t j = 0; j < d; ++j) out[j] = (row[j] - m) * s * pw[j] + pb[j];
  }
}

// Rows [first, last) of the backward pass. dx (when not null) is written; dy xhat and dy are
// added into dw and db (when not null). scratch holds 2 d values: xhat and g of the current row.
template <class T>
[[gnu::always_inline]] inline void layer_norm_backward_rows_impl(const T* px, const T* pdy, const T* pw,
                                                                 const double* pm, const double* pr, T* dx, T* dw,
                                                                 T* db, T* scratch, std::int64_t d, std::int64_t first,
                                                                 std::int64_t last) {
  T *xhat = scratch, *g = scratch + d;
  for (std::int64_t r = first; r < last; ++r) {
    const T *row = px + r * d, *drow = pdy + r * d;
    T m = static_cast<T>(pm[r]), s = static_cast<T>(pr[r]);
    for (std::int64_t j = 0; j < d; ++j) {
      xhat[j] = (row[j] - m) * s;
      g[j] = drow[j] * pw[j];
    }
    if (dw)
      for (std::int64_t j = 0; j < d; ++j) dw[j] += drow[j] * xhat[j];
    if (db)
      for (std::int64_t j = 0; j < d; ++j) db[j] += drow[j];
    if (!dx) continue;
    // dx = rstd (g - mean(g) - xhat mean(g xhat))
    T g_mean = static_cast<T>(fast::lane_sum(d, [&](std::int64_t j) { return g[j]; }) / static_cast<double>(d));
    T gx_mean =
        static_cast<T>(fast::lane_sum(d, [&](std::int64_t j) { return g[j] * xhat[j]; }) / static_cast<double>(d));
    T* dxrow = dx + r * d;
    for (std::int64_t j = 0; j < d; ++j) dxrow[j] = s * (g[j] - g_mean - xhat[j] * gx_mean);
  }
}

// float32 is what a training step runs: compiled for AVX2 + FMA as well (kernels/cpu/fast_math.h).
AG_SIMD_CLONES void layer_norm_rows(const float* px, const float* pw, const float* pb, float* py, double* pm,
                                    double* pr, std::int64_t d, double eps, std::int64_t first, std::int64_t last) {
  layer_norm_rows_impl(px, pw, pb, py, pm, pr, d, eps, first, last);
}
void layer_norm_rows(const double* px, const double* pw, const double* pb, double* py, double* pm, double* pr,
                     std::int64_t d, double eps, std::int64_t first, std::int64_t last) {
  layer_norm_rows_impl(px, pw, pb, py, pm, pr, d, eps, first, last);
}
AG_SIMD_CLONES void layer_norm_backward_rows(const float* px, const float* pdy, const float* pw, const double* pm,
                                             const double* pr, float* dx, float* dw, float* db, float* scratch,
                                             std::int64_t d, std::int64_t first, std::int64_t last) {
  layer_norm_backward_rows_impl(px, pdy, pw, pm, pr, dx, dw, db, scratch, d, first, last);
}
void layer_norm_backward_rows(const double* px, const double* pdy, const double* pw, const double* pm, const double* pr,
                              double* dx, double* dw, double* db, double* scratch, std::int64_t d, std::int64_t first,
                              std::int64_t last) {
  layer_norm_backward_rows_impl(px, pdy, pw, pm, pr, dx, dw, db, scratch, d, first, last);
}

// dx, dw and db from dy (the formulas above), with xhat recomputed from the saved mean and rstd.
// Each chunk of rows sums its own partial dw and db; the partials are added in chunk order.
std::vector<Tensor> layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                        const Tensor& rstd, const std::vector<bool>& need) {
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  Tensor dx = need[0] ? empty_like(x) : Tensor();
  Tensor dw = need[1] ? zeros({d}, x.dtype()) : Tensor();
  Tensor db = need[2] ? zeros({d}, x.dtype()) : Tensor();
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.data_ptr<T>(), *pdy = dy.data_ptr<T>();
    std::vector<T> ones_w(w.defined() ? 0 : static_cast<std::size_t>(d), T(1));
    const T* pw = w.defined() ? w.data_ptr<T>() : ones_w.data();
    const double *pm = mean.data_ptr<double>(), *pr = rstd.data_ptr<double>();
    std::int64_t grain = std::max<std::int64_t>(1, kLayerNormGrain / d), chunks = chunk_count(rows, grain);
    ChunkPartials<T> partial_dw(need[1] ? chunks : 0, d), partial_db(need[2] ? chunks : 0, d);
    parallel_for_chunks(rows, grain, [&](std::int64_t c, std::int64_t first, std::int64_t last) {
      T* pdw = need[1] ? partial_dw[c] : nullptr;
      T* pdb = need[2] ? partial_db[c] : nullptr;
      std::vector<T> scratch(static_cast<std::size_t>(2 * d));
      layer_norm_backward_rows(px, pdy, pw, pm, pr, need[0] ? dx.mutable_data_ptr<T>() : nullptr, pdw, pdb,
                               scratch.data(), d, first, last);
    });
    if (need[1]) partial_dw.add_to(dw.mutable_data_ptr<T>());
    if (need[2]) partial_db.add_to(db.mutable_data_ptr<T>());
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
FastRun layer_norm_fast(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, std::int64_t rows,
                        std::int64_t d) {
  Tensor y = empty_like(x);
  Tensor mean = empty({rows}, kFloat64), rstd = empty({rows}, kFloat64);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    // A missing weight is all ones and a missing bias all zeros: one branch-free inner loop.
    std::vector<T> ones_w(weight.defined() ? 0 : static_cast<std::size_t>(d), T(1));
    std::vector<T> zeros_b(bias.defined() ? 0 : static_cast<std::size_t>(d), T(0));
    const T* pw = weight.defined() ? weight.data_ptr<T>() : ones_w.data();
    const T* pb = bias.defined() ? bias.data_ptr<T>() : zeros_b.data();
    T* py = y.mutable_data_ptr<T>();
    double *pm = mean.mutable_data_ptr<double>(), *pr = rstd.mutable_data_ptr<double>();
    parallel_for(rows, std::max<std::int64_t>(1, kLayerNormGrain / d), [&](std::int64_t first, std::int64_t last) {
      layer_norm_rows(px, pw, pb, py, pm, pr, d, eps, first, last);
    });
  });
  auto backward = [x, weight, mean, rstd](const Tensor& dy, const std::vector<bool>& need) {
    return layer_norm_backward(dy, x, weight, mean, rstd, need);
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
  RoutedOp op{.name = "layer_norm", .kernel = KernelOp::LayerNorm, .inputs = {x, weight, bias}};
  op.reference = [eps](const std::vector<Tensor>& in) -> Routed {
    return {reference::layer_norm(in[0], in[1], in[2], eps)};
  };
  op.fast = [&](const Products&) { return layer_norm_fast(x, weight, bias, eps, rows, d); };
  return route(op).output;
}

}  // namespace ag
