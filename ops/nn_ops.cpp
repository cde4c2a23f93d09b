// Layers' ops. Notation: R = rows (every dim but the last, flattened), D or C = the last dim.
#include "nn_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../autograd/dispatch.h"
#include "../autograd/grad_mode.h"
#include "../autograd/node.h"
#include "../runtime/parallel.h"
#include "binary.h"
#include "blas.h"
#include "elementwise.h"
#include "fast_math.h"
#include "kernels.h"
#include "reduce.h"
#include "reference/reference.h"

namespace ag {

namespace {

// The product of every dim but the last (1 for a 0-d or 1-d tensor).
std::int64_t rows_of(const Tensor& x) {
  return x.dim() <= 1 ? 1 : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
}

int blas_size(std::string_view op, std::int64_t v) {
  if (v > std::numeric_limits<int>::max()) throw_invalid(op, "size {} exceeds what BLAS can index", v);
  return static_cast<int>(v);
}

void check_vector(std::string_view op, const char* name, const Tensor& t, std::int64_t size, const Tensor& x) {
  if (!t.defined()) return;
  check_same_floating(op, x, t);
  if (t.shape() != Shape{size})
    throw_invalid(op, "{} has shape {}, expected [{}] for input of shape {}", name, shape_str(t.shape()), size,
                  shape_str(x.shape()));
}

// sum[o] += dy[r, o] over rows r of dy [rows, out]: a bias gradient. float32 is what a
// training step runs, so it is compiled for AVX2 + FMA as well (ops/fast_math.h).
AG_SIMD_CLONES void column_sums(const float* dy, std::int64_t rows, std::int64_t out, float* sum) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) sum[o] += dy[r * out + o];
}
void column_sums(const double* dy, std::int64_t rows, std::int64_t out, double* sum) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) sum[o] += dy[r * out + o];
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// linear:  y = x W^T + b      x: [R, in]  W: [out, in]  y: [R, out]
//   dx = dy W          (dy_ro depends on x_ri through W_oi)
//   dW = dy^T x        (summed over the R rows)
//   db = sum_r dy_r
// linear_gelu:  h = x W^T + b,  y = GELU(h);  saved: x, W and GELU'(h)
//   dh = dy GELU'(h), then the three products above with dh in place of dy
namespace {

void check_linear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same_floating(op, x, weight);
  if (weight.dim() != 2 || x.dim() < 1 || x.shape().back() != weight.size(1))
    throw_invalid(op, "input of shape {} does not fit weight of shape {} (expected [..., {}])", shape_str(x.shape()),
                  shape_str(weight.shape()), weight.dim() == 2 ? weight.size(1) : -1);
  check_vector(op, "bias", bias, weight.size(0), x);
}

// y = x W^T + b into y [rows, out], by bands of rows; after its product each band is handed to
// `epilogue(first_element, count)` on the same thread. With a bias every band starts as b's rows
// and the product is added on top (beta = 1); without one the product is written (beta = 0).
template <class T, class Epilogue>
void linear_forward(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias, T* py,
                    Epilogue epilogue) {
  std::int64_t in = weight.size(1), out = weight.size(0), rows = rows_of(x);
  if (rows == 0 || out == 0) return;
  int m = blas_size(op, rows), n = blas_size(op, out), k = blas_size(op, in);
  const T *px = x.data_ptr<T>(), *pw = weight.data_ptr<T>(), *pb = bias.defined() ? bias.data_ptr<T>() : nullptr;
  // Too few rows for two bands: one band here, whose product blas::gemm may split by columns.
  bool split = blas::worth_splitting(rows, out, std::max<std::int64_t>(in, 1)) && rows >= 2 * blas::kBand;
  blas::for_row_bands(m, split, [&](int r0, int r1) {
    T* band = py + std::int64_t{r0} * out;
    std::int64_t count = std::int64_t{r1 - r0} * out;
    if (pb)
      for (int r = r0; r < r1; ++r) std::copy(pb, pb + out, py + std::int64_t{r} * out);
    if (k > 0)
      blas::gemm(false, true, r1 - r0, n, k, T(1), px + std::int64_t{r0} * in, k, pw, k, pb ? T(1) : T(0), band, n);
    else if (!pb)
      std::fill(band, band + count, T(0));  // an empty sum, and no bias
    epilogue(std::int64_t{r0} * out, count);
  });
}

// dx, dW and db of y = x W^T + b from dy [rows, out]: dx = dy W, dW = dy^T x, db = column sums
// of dy. dW and db are sums over the rows. Split across threads, each band of rows sums its own
// part (a GEMM over just its rows, and its column sums) and the parts are added in band order:
// each thread then reads only the rows of dy and x it computed itself, and packs only those.
// Split instead over dW's rows, both threads read every row and pack all of x; the tiny and
// small GPT steps ran 6 % slower that way on two threads.
std::vector<Tensor> linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const std::vector<bool>& need) {
  std::int64_t in = w.size(1), out = w.size(0), rows = rows_of(x);
  Tensor dx, dw, db;
  bool full_work = rows * in * out > 0;  // the GEMMs below write every element (beta 0)
  dispatch_floating(dy.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    const T *pdy = dy.data_ptr<T>(), *px = x.data_ptr<T>();
    if (need[0]) {
      dx = full_work ? empty(x.shape(), dy.dtype()) : zeros(x.shape(), dy.dtype());
      if (full_work)
        blas::gemm(false, false, static_cast<int>(rows), static_cast<int>(in), static_cast<int>(out), pdy,
                   static_cast<int>(out), w.data_ptr<T>(), static_cast<int>(in), dx.data_ptr<T>());
    }
    if (!need[1] && !need[2]) return;
    bool split = blas::worth_splitting(out, in, rows) && rows >= 2 * blas::kBand;
    std::int64_t bands = (rows + blas::kBand - 1) / blas::kBand, chunks = split ? chunk_count(bands, 1) : 1;
    std::vector<Tensor> dw_parts(need[1] ? static_cast<std::size_t>(chunks) : 0);
    if (need[1]) {
      dw = full_work ? empty(w.shape(), dy.dtype()) : zeros(w.shape(), dy.dtype());
      dw_parts[0] = dw;
      for (std::size_t c = 1; c < dw_parts.size(); ++c) dw_parts[c] = empty(w.shape(), dy.dtype());
    }
    ChunkPartials<T> db_parts(need[2] ? chunks : 0, out);
    auto band = [&](std::int64_t c, std::int64_t r0, std::int64_t r1) {
      if (need[1] && full_work)
        blas::gemm(true, false, static_cast<int>(out), static_cast<int>(in), static_cast<int>(r1 - r0), pdy + r0 * out,
                   static_cast<int>(out), px + r0 * in, static_cast<int>(in),
                   dw_parts[static_cast<std::size_t>(c)].template data_ptr<T>());
      if (need[2]) column_sums(pdy + r0 * out, r1 - r0, out, db_parts[c]);
    };
    if (chunks == 1)
      band(0, 0, rows);  // blas::gemm may still split dW by its rows or columns here
    else
      parallel_for_chunks(bands, 1, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
        band(c, lo * blas::kBand, std::min(rows, hi * blas::kBand));
      });
    if (need[1] && chunks > 1) {
      T* pdw = dw.data_ptr<T>();
      parallel_for(dw.numel(), 4096, [&](std::int64_t begin, std::int64_t end) {
        for (std::size_t c = 1; c < dw_parts.size(); ++c) {
          const T* part = dw_parts[c].template data_ptr<T>();
          for (std::int64_t j = begin; j < end; ++j) pdw[j] += part[j];
        }
      });
    }
    if (need[2]) {
      db = zeros({out}, dy.dtype());
      db_parts.add_to(db.data_ptr<T>());
    }
  });
  return {dx, dw, db};
}

Shape linear_shape(const Tensor& x, const Tensor& weight) {
  Shape shape = x.shape();
  shape.back() = weight.size(0);
  return shape;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear("linear", x, weight, bias);
  if (kernels() == Kernels::Reference) return reference::linear(x, weight, bias);
  Tensor y = empty(linear_shape(x, weight), x.dtype());
  dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    linear_forward<decltype(tag)>("linear", x, weight, bias, y.data_ptr<decltype(tag)>(),
                                  [](std::int64_t, std::int64_t) {});
  });
  return record("linear", y, {x, weight, bias},
                [x = x.detach(), w = weight.detach()](const Tensor& dy, const std::vector<bool>& need) {
                  return linear_backward(dy, x, w, need);
                });
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) {
  check_linear("linear_gelu", x, weight, bias);
  if (kernels() == Kernels::Reference) return reference::linear_gelu(x, weight, bias, approximate);
  bool need_slope =
      is_grad_enabled() && (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  Tensor y = empty(linear_shape(x, weight), x.dtype()), slope = need_slope ? empty_like(y) : Tensor();
  dispatch_floating(x.dtype(), "linear_gelu", [&](auto tag) {
    using T = decltype(tag);
    T *py = y.data_ptr<T>(), *ps = need_slope ? slope.data_ptr<T>() : nullptr;
    linear_forward<T>("linear_gelu", x, weight, bias, py, [&](std::int64_t first, std::int64_t count) {
      detail::gelu_loop(py + first, py + first, ps ? ps + first : nullptr, count, approximate);
    });
  });
  return record("linear_gelu", y, {x, weight, bias},
                [x = x.detach(), w = weight.detach(), slope](const Tensor& dy, const std::vector<bool>& need) {
                  Tensor dh = empty_like(slope);
                  dispatch_floating(dy.dtype(), "linear_gelu", [&](auto tag) {
                    using T = decltype(tag);
                    const T *pdy = dy.data_ptr<T>(), *ps = slope.data_ptr<T>();
                    T* pdh = dh.data_ptr<T>();
                    parallel_for(dh.numel(), 8192, [&](std::int64_t begin, std::int64_t end) {
                      for (std::int64_t i = begin; i < end; ++i) pdh[i] = pdy[i] * ps[i];
                    });
                  });
                  return linear_backward(dh, x, w, need);
                });
}

// ---------------------------------------------------------------------------------------------
// embedding:  y[p, :] = W[ids[p], :]      W: [V, D]   ids: [P]   y: [P, D]
//   dW[v, :] = sum over positions p with ids[p] = v of dy[p, :]      (a scatter-add)
Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_floating("embedding", weight);
  check_defined("embedding", ids);
  if (weight.dim() != 2) throw_invalid("embedding", "weight must be [V, D], got shape {}", shape_str(weight.shape()));
  if (ids.dtype() != kInt64)
    throw_invalid("embedding", "ids must be int64, got {} with shape {}", dtype_name(ids.dtype()),
                  shape_str(ids.shape()));
  std::int64_t vocab = weight.size(0), dim = weight.size(1), positions = ids.numel();
  const auto* pid = ids.data_ptr<std::int64_t>();
  for (std::int64_t p = 0; p < positions; ++p)
    if (pid[p] < 0 || pid[p] >= vocab)
      throw_invalid("embedding", "id {} at position {} is outside the table's {} rows (ids shape {})", pid[p], p, vocab,
                    shape_str(ids.shape()));
  if (kernels() == Kernels::Reference) return reference::embedding(weight, ids);
  Shape y_shape = ids.shape();
  y_shape.push_back(dim);
  Tensor y = empty(y_shape, weight.dtype());
  dispatch_floating(weight.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    const T* pw = weight.data_ptr<T>();
    T* py = y.data_ptr<T>();
    for (std::int64_t p = 0; p < positions; ++p) std::copy(pw + pid[p] * dim, pw + (pid[p] + 1) * dim, py + p * dim);
  });
  return record("embedding", y, {weight, ids},
                [ids, w_shape = weight.shape()](const Tensor& dy, const std::vector<bool>&) {
                  Tensor dw = zeros(w_shape, dy.dtype());
                  dispatch_floating(dy.dtype(), "embedding", [&](auto tag) {
                    using T = decltype(tag);
                    const T* pdy = dy.data_ptr<T>();
                    const auto* pid = ids.data_ptr<std::int64_t>();
                    T* pdw = dw.data_ptr<T>();
                    std::int64_t dim = w_shape[1];
                    for (std::int64_t p = 0, n = ids.numel(); p < n; ++p)
                      for (std::int64_t j = 0; j < dim; ++j) pdw[pid[p] * dim + j] += pdy[p * dim + j];
                  });
                  return std::vector<Tensor>{dw, Tensor()};  // ids: not differentiable
                });
}

// ---------------------------------------------------------------------------------------------
// layer_norm over the last dim, row by row (D = row length):
//   mu = sum x / D,   var = sum (x - mu)^2 / D,   rstd = 1 / sqrt(var + eps)
//   xhat = (x - mu) rstd,   y = xhat w + b
// Backward (docs/layer_norm.md derives it). With g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))
//   dw = sum over rows of dy xhat,   db = sum over rows of dy
// Saved: x, and per row mu and rstd (xhat is recomputed from them, not stored).
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

// float32 is what a training step runs: compiled for AVX2 + FMA as well (ops/fast_math.h).
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

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_floating("layer_norm", x);
  if (x.dim() == 0) throw_invalid("layer_norm", "needs at least one dim, got a 0-d tensor");
  std::int64_t d = x.shape().back(), rows = rows_of(x);
  if (d == 0) throw_invalid("layer_norm", "cannot normalise over an empty last dim (shape {})", shape_str(x.shape()));
  if (!(eps > 0)) throw_invalid("layer_norm", "eps must be positive, got {}", eps);
  check_vector("layer_norm", "weight", weight, d, x);
  check_vector("layer_norm", "bias", bias, d, x);
  if (kernels() == Kernels::Reference) return reference::layer_norm(x, weight, bias, eps);
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
    T* py = y.data_ptr<T>();
    double *pm = mean.data_ptr<double>(), *pr = rstd.data_ptr<double>();
    parallel_for(rows, std::max<std::int64_t>(1, kLayerNormGrain / d), [&](std::int64_t first, std::int64_t last) {
      layer_norm_rows(px, pw, pb, py, pm, pr, d, eps, first, last);
    });
  });
  return record("layer_norm", y, {x, weight, bias},
                [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), mean, rstd, rows, d](
                    const Tensor& dy, const std::vector<bool>& need) {
                  Tensor dx = need[0] ? empty_like(x) : Tensor();
                  Tensor dw = need[1] ? zeros({d}, x.dtype()) : Tensor();
                  Tensor db = need[2] ? zeros({d}, x.dtype()) : Tensor();
                  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
                    using T = decltype(tag);
                    const T *px = x.data_ptr<T>(), *pdy = dy.data_ptr<T>();
                    std::vector<T> ones_w(w.defined() ? 0 : static_cast<std::size_t>(d), T(1));
                    const T* pw = w.defined() ? w.data_ptr<T>() : ones_w.data();
                    const double *pm = mean.data_ptr<double>(), *pr = rstd.data_ptr<double>();
                    // Each chunk of rows sums its own partial dw and db; the partials are added in order.
                    std::int64_t grain = std::max<std::int64_t>(1, kLayerNormGrain / d),
                                 chunks = chunk_count(rows, grain);
                    ChunkPartials<T> partial_dw(need[1] ? chunks : 0, d), partial_db(need[2] ? chunks : 0, d);
                    parallel_for_chunks(rows, grain, [&](std::int64_t c, std::int64_t first, std::int64_t last) {
                      T* pdw = need[1] ? partial_dw[c] : nullptr;
                      T* pdb = need[2] ? partial_db[c] : nullptr;
                      std::vector<T> scratch(static_cast<std::size_t>(2 * d));
                      layer_norm_backward_rows(px, pdy, pw, pm, pr, need[0] ? dx.data_ptr<T>() : nullptr, pdw, pdb,
                                               scratch.data(), d, first, last);
                    });
                    if (need[1]) partial_dw.add_to(dw.data_ptr<T>());
                    if (need[2]) partial_db.add_to(db.data_ptr<T>());
                  });
                  return std::vector<Tensor>{dx, dw, db};
                });
}

// ---------------------------------------------------------------------------------------------
// dropout:  y = x * keep / (1 - p),  keep_i ~ Bernoulli(1 - p)
//   dx = dy * keep / (1 - p)        (the same scaled mask, saved)
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  check_floating("dropout", x);
  if (!(p >= 0.0 && p <= 1.0)) throw_invalid("dropout", "probability must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  Tensor scale = empty_like(x);  // keep / (1 - p): 0 or 1/(1-p)
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    T* ps = scale.data_ptr<T>();
    T kept = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) ps[i] = generator.uniform() >= p ? kept : T(0);
  });
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * scale;
  }
  return record("dropout", y, {x},
                [scale](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy * scale}; });
}

// ---------------------------------------------------------------------------------------------
// cross_entropy, one row r per position (C classes, target t_r, N = rows not ignored):
//   loss = (1/N) sum_r (lse_r - x_{r, t_r}),   lse_r = log sum_c exp(x_rc)
//   dx_rc = dy (softmax(x_r)_c - [c = t_r]) / N,   and 0 on ignored rows
// Saved: the logits (shared, not copied) and lse per row; softmax is recomputed as exp(x - lse).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  check_floating("cross_entropy", logits);
  check_defined("cross_entropy", targets);
  if (targets.dtype() != kInt64)
    throw_invalid("cross_entropy", "targets must be int64 class indices, got {} with shape {}",
                  dtype_name(targets.dtype()), shape_str(targets.shape()));
  if (logits.dim() < 1 || Shape(logits.shape().begin(), logits.shape().end() - 1) != targets.shape())
    throw_invalid("cross_entropy", "logits of shape {} need targets of shape {}, got {}", shape_str(logits.shape()),
                  logits.dim() < 1 ? "[...]" : shape_str(Shape(logits.shape().begin(), logits.shape().end() - 1)),
                  shape_str(targets.shape()));
  std::int64_t classes = logits.shape().back(), rows = targets.numel();
  // Not the "every row ignored" case below: a batch with no rows at all is a bug upstream.
  if (rows == 0)
    throw_invalid("cross_entropy", "logits of shape {} hold no positions: an empty batch has no mean loss",
                  shape_str(logits.shape()));
  const auto* pt = targets.data_ptr<std::int64_t>();
  std::int64_t counted = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (pt[r] == ignore_index) continue;
    if (pt[r] < 0 || pt[r] >= classes)
      throw_invalid("cross_entropy", "target {} at position {} is outside [0, {}) and is not ignore_index ({})", pt[r],
                    r, classes, ignore_index);
    ++counted;
  }
  if (kernels() == Kernels::Reference) return reference::cross_entropy(logits, targets, ignore_index);
  Tensor lse = empty({rows}, kFloat64);
  double total = 0.0;
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.data_ptr<T>();
    double* pl = lse.data_ptr<double>();
    std::vector<T> e(static_cast<std::size_t>(classes));  // one row's exponentials
    for (std::int64_t r = 0; r < rows; ++r) {
      if (pt[r] == ignore_index) continue;
      const T* row = px + r * classes;
      T m = fast::lane_max(row, classes, -std::numeric_limits<T>::infinity());
      std::copy(row, row + classes, e.begin());
      fast::exp_shifted(e.data(), classes, m);  // exp in T (SIMD for float32), summed in double
      double sum = fast::lane_sum(classes, [&](std::int64_t c) { return e[static_cast<std::size_t>(c)]; });
      pl[r] = m + std::log(sum);
      total += pl[r] - row[pt[r]];
    }
  });
  Tensor loss = scalar(counted == 0 ? 0.0 : total / static_cast<double>(counted), logits.dtype());
  return record("cross_entropy", loss, {logits, targets},
                [x = logits.detach(), targets, lse, counted, ignore_index](const Tensor& dy, const std::vector<bool>&) {
                  // Every row is written below; only rows whose target is ignored stay zero.
                  Tensor dx = counted == targets.numel() ? empty(x.shape(), x.dtype()) : zeros(x.shape(), x.dtype());
                  if (counted == 0) return std::vector<Tensor>{dx, Tensor()};
                  dispatch_floating(x.dtype(), "cross_entropy", [&](auto tag) {
                    using T = decltype(tag);
                    const T* px = x.data_ptr<T>();
                    const auto* pt = targets.data_ptr<std::int64_t>();
                    const double* pl = lse.data_ptr<double>();
                    T* pdx = dx.data_ptr<T>();
                    std::int64_t classes = x.shape().back();
                    double g = static_cast<double>(dy.item<T>()) / static_cast<double>(counted);
                    for (std::int64_t r = 0, rows = targets.numel(); r < rows; ++r) {
                      if (pt[r] == ignore_index) continue;
                      // x - lse in double: lse rounded to float32 would be off by up to 5e-4 at
                      // logits of 1e4, and p with it. Rounding the difference itself to T costs p
                      // a relative |x - lse| 2^-24 at most, small wherever p is not negligible;
                      // the exp then runs in T (SIMD).
                      const T* row = px + r * classes;
                      T* drow = pdx + r * classes;
                      for (std::int64_t c = 0; c < classes; ++c)
                        drow[c] = static_cast<T>(static_cast<double>(row[c]) - pl[r]);
                      fast::exp_shifted(drow, classes, T(0));
                      T gt = static_cast<T>(g);
                      for (std::int64_t c = 0; c < classes; ++c) drow[c] *= gt;
                      drow[pt[r]] -= gt;
                    }
                  });
                  return std::vector<Tensor>{dx, Tensor()};  // targets: not differentiable
                });
}

}  // namespace ag
