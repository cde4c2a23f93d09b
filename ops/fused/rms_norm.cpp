// rms_norm over the last dim, row by row (D = row length): layer norm without the centring and
// without a bias, as LLaMA-style models normalise.
//   ms = sum x^2 / D,   rrms = 1 / sqrt(ms + eps),   xhat = x rrms,   y = xhat w
// Backward (docs/layer_norm.md derives it). With g = dy w, and since d rrms / d x_j = -rrms^3 x_j / D:
//   dx_j = rrms g_j + sum_i g_i x_i (-rrms^3 x_j / D) = rrms (g_j - xhat_j mean(g xhat))
//   dw = sum over rows of dy xhat
// Saved: x, and per row rrms (xhat is recomputed from it, not stored).
// Forward mode, from the tangents dx and dw (each may be absent):
//   dxhat = rrms (dx - xhat mean(xhat dx)),   dy = dxhat w + xhat dw
//
// The readable twin is ops/reference/rms_norm.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../autograd/dispatch.h"
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

// Elements per chunk when the rows are split across threads, as for layer norm.
constexpr std::int64_t kRmsNormGrain = 8192;

// Rows [first, last) of the forward pass: the mean square in double, elementwise work in T.
template <class T>
[[gnu::always_inline]] inline void rms_norm_rows_impl(const T* px, const T* pw, T* py, double* pr, std::int64_t d,
                                                      double eps, std::int64_t first, std::int64_t last) {
  for (std::int64_t r = first; r < last; ++r) {
    const T* row = px + r * d;
    double ms = fast::lane_sum(d, [&](std::int64_t j) { return double{row[j]} * row[j]; }) / static_cast<double>(d);
    double rs = 1.0 / std::sqrt(ms + eps);
    pr[r] = rs;
    T s = static_cast<T>(rs);
    T* out = py + r * d;
    for (std::int64_t j = 0; j < d; ++j) out[j] = row[j] * s * pw[j];
  }
}

// Rows [first, last) of the backward pass. dx (when not null) is written; dy xhat is added into
// dw (when not null). scratch holds 2 d values: xhat and g of the current row.
template <class T>
[[gnu::always_inline]] inline void rms_norm_backward_rows_impl(const T* px, const T* pdy, const T* pw, const double* pr,
                                                               T* dx, T* dw, T* scratch, std::int64_t d,
                                                               std::int64_t first, std::int64_t last) {
  T *xhat = scratch, *g = scratch + d;
  for (std::int64_t r = first; r < last; ++r) {
    const T *row = px + r * d, *drow = pdy + r * d;
    T s = static_cast<T>(pr[r]);
    for (std::int64_t j = 0; j < d; ++j) {
      xhat[j] = row[j] * s;
      g[j] = drow[j] * pw[j];
    }
    if (dw)
      for (std::int64_t j = 0; j < d; ++j) dw[j] += drow[j] * xhat[j];
    if (!dx) continue;
    // dx = rrms (g - xhat mean(g xhat))
    T gx_mean =
        static_cast<T>(fast::lane_sum(d, [&](std::int64_t j) { return g[j] * xhat[j]; }) / static_cast<double>(d));
    T* dxrow = dx + r * d;
    for (std::int64_t j = 0; j < d; ++j) dxrow[j] = s * (g[j] - xhat[j] * gx_mean);
  }
}

// float32 is what a training step runs: compiled for AVX2 + FMA as well (kernels/cpu/fast_math.h).
AG_SIMD_CLONES void rms_norm_rows(const float* px, const float* pw, float* py, double* pr, std::int64_t d, double eps,
                                  std::int64_t first, std::int64_t last) {
  rms_norm_rows_impl(px, pw, py, pr, d, eps, first, last);
}
void rms_norm_rows(const double* px, const double* pw, double* py, double* pr, std::int64_t d, double eps,
                   std::int64_t first, std::int64_t last) {
  rms_norm_rows_impl(px, pw, py, pr, d, eps, first, last);
}
AG_SIMD_CLONES void rms_norm_backward_rows(const float* px, const float* pdy, const float* pw, const double* pr,
                                           float* dx, float* dw, float* scratch, std::int64_t d, std::int64_t first,
                                           std::int64_t last) {
  rms_norm_backward_rows_impl(px, pdy, pw, pr, dx, dw, scratch, d, first, last);
}
void rms_norm_backward_rows(const double* px, const double* pdy, const double* pw, const double* pr, double* dx,
                            double* dw, double* scratch, std::int64_t d, std::int64_t first, std::int64_t last) {
  rms_norm_backward_rows_impl(px, pdy, pw, pr, dx, dw, scratch, d, first, last);
}

// dx and dw from dy (the formulas above), xhat recomputed from the saved rrms. Each chunk of rows
// sums its own partial dw; the partials are added in chunk order.
std::vector<Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rrms,
                                      const std::vector<bool>& need) {
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  Tensor dx = need[0] ? empty_like(x) : Tensor();
  Tensor dw = need[1] ? zeros({d}, x.dtype()) : Tensor();
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.data_ptr<T>(), *pdy = dy.data_ptr<T>();
    std::vector<T> ones_w(w.defined() ? 0 : static_cast<std::size_t>(d), T(1));
    const T* pw = w.defined() ? w.data_ptr<T>() : ones_w.data();
    const double* pr = rrms.data_ptr<double>();
    T* pdx = need[0] ? dx.mutable_data_ptr<T>() : nullptr;
    std::int64_t grain = std::max<std::int64_t>(1, kRmsNormGrain / d), chunks = chunk_count(rows, grain);
    ChunkPartials<T> partial_dw(need[1] ? chunks : 0, d);
    parallel_for_chunks(rows, grain, [&](std::int64_t c, std::int64_t first, std::int64_t last) {
      std::vector<T> scratch(static_cast<std::size_t>(2 * d));
      rms_norm_backward_rows(px, pdy, pw, pr, pdx, need[1] ? partial_dw[c] : nullptr, scratch.data(), d, first, last);
    });
    if (need[1]) partial_dw.add_to(dw.mutable_data_ptr<T>());
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

// The fused forward: one pass per row for the mean square (its rrms kept in float64 for
// backward), one for y.
FastRun rms_norm_fast(const Tensor& x, const Tensor& weight, double eps, std::int64_t rows, std::int64_t d) {
  Tensor y = empty_like(x);
  Tensor rrms = empty({rows}, kFloat64);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    std::vector<T> ones_w(weight.defined() ? 0 : static_cast<std::size_t>(d), T(1));  // a missing weight is ones
    const T* pw = weight.defined() ? weight.data_ptr<T>() : ones_w.data();
    T* py = y.mutable_data_ptr<T>();
    double* pr = rrms.mutable_data_ptr<double>();
    parallel_for(rows, std::max<std::int64_t>(1, kRmsNormGrain / d),
                 [&](std::int64_t first, std::int64_t last) { rms_norm_rows(px, pw, py, pr, d, eps, first, last); });
  });
  auto backward = [x, weight, rrms](const Tensor& dy, const std::vector<bool>& need) {
    return rms_norm_backward(dy, x, weight, rrms, need);
  };
  auto tangent = [x, weight, rrms, rows, d](const std::vector<Tensor>& t) {
    return rms_norm_tangent(x, weight, rrms, t, rows, d);
  };
  return {y, backward, Saved{x, weight}, Tensor(), tangent};
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_floating("rms_norm", x);
  if (x.dim() == 0) throw_invalid("rms_norm", "needs at least one dim, got a 0-d tensor");
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  if (d == 0) throw_invalid("rms_norm", "cannot normalise over an empty last dim (shape {})", shape_str(x.shape()));
  if (!(eps > 0)) throw_invalid("rms_norm", "eps must be positive, got {}", eps);
  check_vector("rms_norm", "weight", weight, d, x);
  RoutedOp op{.name = "rms_norm", .kernel = KernelOp::RmsNorm, .inputs = {x, weight}};
  op.reference = [eps](const std::vector<Tensor>& in) -> Routed { return {reference::rms_norm(in[0], in[1], eps)}; };
  op.fast = [&](const Products&) { return rms_norm_fast(x, weight, eps, rows, d); };
  return route(op).output;
}

}  // namespace ag
