// layer_norm and rms_norm as plain loops, one row at a time; the fast twins are
// kernels/cpu/norms.cpp, the ops ops/fused/layer_norm.cpp and rms_norm.cpp, and
// docs/layer_norm.md derives both backwards. Sizes: R rows of D values.
//
//   x, y, dy, dx: [R, D]   w, b, dw, db: [D]   mean, rstd, rrms: [R] (float64)
//
// A null w reads as ones and a null b as zeros. Every sum runs in double; dw and db, sums over
// the rows, are gathered in double too and stored once.
#include <cmath>
#include <vector>

#include "naive.h"

namespace ag::backends::naive {

// mu = sum_j x_j / D,   var = sum_j (x_j - mu)^2 / D,   rstd = 1 / sqrt(var + eps)
// y_j = (x_j - mu) rstd w_j + b_j
template <class T>
void layer_norm(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, const T* b, T* y, double* mean,
                double* rstd) {
  count_call();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * d;
    double sum = 0;
    for (std::int64_t j = 0; j < d; ++j) sum += row[j];
    double mu = sum / static_cast<double>(d);
    double squares = 0;
    for (std::int64_t j = 0; j < d; ++j) squares += (row[j] - mu) * (row[j] - mu);
    double rs = 1 / std::sqrt(squares / static_cast<double>(d) + eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (std::int64_t j = 0; j < d; ++j) {
      double wj = w ? w[j] : 1.0, bj = b ? b[j] : 0.0;
      y[r * d + j] = static_cast<T>((row[j] - mu) * rs * wj + bj);
    }
  }
}

// With xhat = (x - mu) rstd and g = dy w (dL/dxhat):
//   dx = rstd (g - mean(g) - xhat mean(g xhat))     (mu and rstd move with every x_j of the row)
//   dw = sum over rows of dy xhat,   db = sum over rows of dy
// dx, dw, db may each be null (not wanted).
template <class T>
void layer_norm_backward(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* mean,
                         const double* rstd, const T* dy, T* dx, T* dw, T* db) {
  count_call();
  std::vector<double> sums(static_cast<std::size_t>(2 * d));  // dw's and db's
  double *dw_sum = sums.data(), *db_sum = dw_sum + d;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T *row = x + r * d, *drow = dy + r * d;
    auto xhat = [&](std::int64_t j) { return (row[j] - mean[r]) * rstd[r]; };
    auto g = [&](std::int64_t j) { return static_cast<double>(drow[j]) * (w ? w[j] : 1.0); };
    double g_sum = 0, gx_sum = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      g_sum += g(j);
      gx_sum += g(j) * xhat(j);
      dw_sum[j] += drow[j] * xhat(j);
      db_sum[j] += drow[j];
    }
    double g_mean = g_sum / static_cast<double>(d), gx_mean = gx_sum / static_cast<double>(d);
    if (dx)
      for (std::int64_t j = 0; j < d; ++j)
        dx[r * d + j] = static_cast<T>(rstd[r] * (g(j) - g_mean - xhat(j) * gx_mean));
  }
  for (std::int64_t j = 0; j < d; ++j) {
    if (dw) dw[j] = static_cast<T>(dw_sum[j]);
    if (db) db[j] = static_cast<T>(db_sum[j]);
  }
}

// ms = sum_j x_j^2 / D,   rrms = 1 / sqrt(ms + eps),   y_j = x_j rrms w_j
template <class T>
void rms_norm(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, T* y, double* rrms) {
  count_call();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * d;
    double squares = 0;
    for (std::int64_t j = 0; j < d; ++j) squares += static_cast<double>(row[j]) * row[j];
    double rs = 1 / std::sqrt(squares / static_cast<double>(d) + eps);
    rrms[r] = rs;
    for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = static_cast<T>(row[j] * rs * (w ? w[j] : 1.0));
  }
}

// With xhat = x rrms and g = dy w, since d rrms / d x_j = -rrms^3 x_j / D:
//   dx = rrms (g - xhat mean(g xhat))
//   dw = sum over rows of dy xhat
// dx, dw may each be null (not wanted).
template <class T>
void rms_norm_backward(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* rrms, const T* dy,
                       T* dx, T* dw) {
  count_call();
  std::vector<double> sums(static_cast<std::size_t>(d));
  double* dw_sum = sums.data();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T *row = x + r * d, *drow = dy + r * d;
    auto xhat = [&](std::int64_t j) { return row[j] * rrms[r]; };
    auto g = [&](std::int64_t j) { return static_cast<double>(drow[j]) * (w ? w[j] : 1.0); };
    double gx_sum = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      gx_sum += g(j) * xhat(j);
      dw_sum[j] += drow[j] * xhat(j);
    }
    double gx_mean = gx_sum / static_cast<double>(d);
    if (dx)
      for (std::int64_t j = 0; j < d; ++j) dx[r * d + j] = static_cast<T>(rrms[r] * (g(j) - xhat(j) * gx_mean));
  }
  if (dw)
    for (std::int64_t j = 0; j < d; ++j) dw[j] = static_cast<T>(dw_sum[j]);
}

// The two precisions of the table (table.cpp).
template void layer_norm(std::int64_t, std::int64_t, double, const float*, const float*, const float*, float*, double*,
                         double*);
template void layer_norm(std::int64_t, std::int64_t, double, const double*, const double*, const double*, double*,
                         double*, double*);
template void layer_norm_backward(std::int64_t, std::int64_t, const float*, const float*, const double*, const double*,
                                  const float*, float*, float*, float*);
template void layer_norm_backward(std::int64_t, std::int64_t, const double*, const double*, const double*,
                                  const double*, const double*, double*, double*, double*);
template void rms_norm(std::int64_t, std::int64_t, double, const float*, const float*, float*, double*);
template void rms_norm(std::int64_t, std::int64_t, double, const double*, const double*, double*, double*);
template void rms_norm_backward(std::int64_t, std::int64_t, const float*, const float*, const double*, const float*,
                                float*, float*);
template void rms_norm_backward(std::int64_t, std::int64_t, const double*, const double*, const double*, const double*,
                                double*, double*);

}  // namespace ag::backends::naive
