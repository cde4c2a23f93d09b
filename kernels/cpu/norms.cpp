// The cpu backend's layer_norm and rms_norm, row by row over the last dim (d values a row). The
// math and the derivations are at the top of ops/fused/layer_norm.cpp and ops/fused/rms_norm.cpp
// (and in docs/layer_norm.md). Sums run in double, elementwise work in T; the rows are split
// across threads, each chunk of rows summing its own partial dw and db, added in chunk order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../runtime/parallel.h"
#include "fast_math.h"
#include "kernels.h"

namespace ag::backends::cpu {

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

// A missing weight is all ones and a missing bias all zeros: one branch-free inner loop.
template <class T>
const T* or_filled(const T* p, std::int64_t d, T value, std::vector<T>& storage) {
  if (p) return p;
  storage.assign(static_cast<std::size_t>(d), value);
  return storage.data();
}

}  // namespace

template <class T>
void layer_norm(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, const T* b, T* y, double* mean,
                double* rstd) {
  std::vector<T> ones, zeros;
  const T *pw = or_filled(w, d, T(1), ones), *pb = or_filled(b, d, T(0), zeros);
  parallel_for(rows, std::max<std::int64_t>(1, kLayerNormGrain / d), [&](std::int64_t first, std::int64_t last) {
    layer_norm_rows(x, pw, pb, y, mean, rstd, d, eps, first, last);
  });
}

template <class T>
void layer_norm_backward(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* mean,
                         const double* rstd, const T* dy, T* dx, T* dw, T* db) {
  std::vector<T> ones;
  const T* pw = or_filled(w, d, T(1), ones);
  if (dw) std::fill(dw, dw + d, T(0));
  if (db) std::fill(db, db + d, T(0));
  std::int64_t grain = std::max<std::int64_t>(1, kLayerNormGrain / d), chunks = chunk_count(rows, grain);
  ChunkPartials<T> partial_dw(dw ? chunks : 0, d), partial_db(db ? chunks : 0, d);
  parallel_for_chunks(rows, grain, [&](std::int64_t c, std::int64_t first, std::int64_t last) {
    std::vector<T> scratch(static_cast<std::size_t>(2 * d));
    layer_norm_backward_rows(x, dy, pw, mean, rstd, dx, dw ? partial_dw[c] : nullptr, db ? partial_db[c] : nullptr,
                             scratch.data(), d, first, last);
  });
  if (dw) partial_dw.add_to(dw);
  if (db) partial_db.add_to(db);
}

template <class T>
void rms_norm(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, T* y, double* rrms) {
  std::vector<T> ones;
  const T* pw = or_filled(w, d, T(1), ones);
  parallel_for(rows, std::max<std::int64_t>(1, kRmsNormGrain / d),
               [&](std::int64_t first, std::int64_t last) { rms_norm_rows(x, pw, y, rrms, d, eps, first, last); });
}

template <class T>
void rms_norm_backward(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* rrms, const T* dy,
                       T* dx, T* dw) {
  std::vector<T> ones;
  const T* pw = or_filled(w, d, T(1), ones);
  if (dw) std::fill(dw, dw + d, T(0));
  std::int64_t grain = std::max<std::int64_t>(1, kRmsNormGrain / d), chunks = chunk_count(rows, grain);
  ChunkPartials<T> partial_dw(dw ? chunks : 0, d);
  parallel_for_chunks(rows, grain, [&](std::int64_t c, std::int64_t first, std::int64_t last) {
    std::vector<T> scratch(static_cast<std::size_t>(2 * d));
    rms_norm_backward_rows(x, dy, pw, rrms, dx, dw ? partial_dw[c] : nullptr, scratch.data(), d, first, last);
  });
  if (dw) partial_dw.add_to(dw);
}

#define AG_NORMS(T)                                                                                                 \
  template void layer_norm(std::int64_t, std::int64_t, double, const T*, const T*, const T*, T*, double*, double*); \
  template void layer_norm_backward(std::int64_t, std::int64_t, const T*, const T*, const double*, const double*,   \
                                    const T*, T*, T*, T*);                                                          \
  template void rms_norm(std::int64_t, std::int64_t, double, const T*, const T*, T*, double*);                      \
  template void rms_norm_backward(std::int64_t, std::int64_t, const T*, const T*, const double*, const T*, T*, T*);
AG_NORMS(float)
AG_NORMS(double)
#undef AG_NORMS

}  // namespace ag::backends::cpu
