// The cpu backend's embedding and cross_entropy: a table lookup and its scatter-add, and the loss
// row by row with its softmax recomputed from the saved log-sum-exp. The math is at the top of
// their op, ops/fused/nn_ops.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fast_math.h"
#include "kernels.h"

namespace ag::backends::cpu {

// y[p, :] = W[ids[p], :]      W: [vocab, dim]   ids: [positions]   y: [positions, dim]
template <class T>
void embedding(std::int64_t positions, std::int64_t dim, const T* w, const std::int64_t* ids, T* y) {
  for (std::int64_t p = 0; p < positions; ++p) std::copy(w + ids[p] * dim, w + (ids[p] + 1) * dim, y + p * dim);
}

// dW: dy's rows added into the rows their ids picked (a scatter-add; repeated ids add up).
template <class T>
void embedding_backward(std::int64_t positions, std::int64_t dim, std::int64_t vocab, const std::int64_t* ids,
                        const T* dy, T* dw) {
  std::fill(dw, dw + vocab * dim, T(0));
  for (std::int64_t p = 0; p < positions; ++p)
    for (std::int64_t j = 0; j < dim; ++j) dw[ids[p] * dim + j] += dy[p * dim + j];
}

// The log-sum-exp of each counted row (kept for backward) and the sum of lse minus the target's
// logit over the counted rows.
template <class T>
double cross_entropy(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                     std::int64_t ignore_index, double* lse) {
  double total = 0.0;
  std::vector<T> e(static_cast<std::size_t>(classes));  // one row's exponentials
  for (std::int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    const T* row = x + r * classes;
    T m = fast::lane_max(row, classes, -std::numeric_limits<T>::infinity());
    std::copy(row, row + classes, e.begin());
    fast::exp_shifted(e.data(), classes, m);  // exp in T (SIMD for float32), summed in double
    double sum = fast::lane_sum(classes, [&](std::int64_t c) { return e[static_cast<std::size_t>(c)]; });
    lse[r] = m + std::log(sum);
    total += lse[r] - row[targets[r]];
  }
  return total;
}

// dx = g (softmax(x) - onehot(target)) on counted rows, 0 on ignored ones; softmax recomputed
// from the saved log-sum-exp as exp(x - lse).
template <class T>
void cross_entropy_backward(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                            std::int64_t ignore_index, const double* lse, double g, T* dx) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* drow = dx + r * classes;
    if (targets[r] == ignore_index) {
      std::fill(drow, drow + classes, T(0));
      continue;
    }
    // x - lse in double: lse rounded to float32 would be off by up to 5e-4 at logits of 1e4, and
    // p with it. Rounding the difference itself to T costs p a relative |x - lse| 2^-24 at most,
    // small wherever p is not negligible; the exp then runs in T (SIMD).
    const T* row = x + r * classes;
    for (std::int64_t c = 0; c < classes; ++c) drow[c] = static_cast<T>(static_cast<double>(row[c]) - lse[r]);
    fast::exp_shifted(drow, classes, T(0));
    T gt = static_cast<T>(g);
    for (std::int64_t c = 0; c < classes; ++c) drow[c] *= gt;
    drow[targets[r]] -= gt;
  }
}

// Forward mode, with p = exp(x - lse) per row: the loss's tangent times the counted rows.
template <class T>
double cross_entropy_jvp(std::int64_t rows, std::int64_t classes, const T* x, const T* dx, const std::int64_t* targets,
                         std::int64_t ignore_index, const double* lse) {
  double total = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    const T *row = x + r * classes, *drow = dx + r * classes;
    double expected = 0.0;  // sum_c p_c dx_c: the tangent of this row's log-sum-exp
    for (std::int64_t c = 0; c < classes; ++c) expected += std::exp(static_cast<double>(row[c]) - lse[r]) * drow[c];
    total += expected - drow[targets[r]];
  }
  return total;
}

// Forward over reverse: dx = g (p - onehot) moves with p as x moves along x_t,
//   d p_c = p_c (x_t_c - sum_j p_j x_t_j).
template <class T>
void cross_entropy_backward_tangent(std::int64_t rows, std::int64_t classes, const T* x, const T* x_t,
                                    const std::int64_t* targets, std::int64_t ignore_index, const double* lse, double g,
                                    T* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* orow = out + r * classes;
    if (targets[r] == ignore_index) {
      std::fill(orow, orow + classes, T(0));
      continue;
    }
    const T *row = x + r * classes, *trow = x_t + r * classes;
    double moved = 0.0;  // sum_c p_c x_t_c
    for (std::int64_t c = 0; c < classes; ++c) moved += std::exp(static_cast<double>(row[c]) - lse[r]) * trow[c];
    for (std::int64_t c = 0; c < classes; ++c)
      orow[c] = static_cast<T>(g * std::exp(static_cast<double>(row[c]) - lse[r]) * (trow[c] - moved));
  }
}

#define AG_LOOKUP(T)                                                                                                   \
  template void embedding(std::int64_t, std::int64_t, const T*, const std::int64_t*, T*);                              \
  template void embedding_backward(std::int64_t, std::int64_t, std::int64_t, const std::int64_t*, const T*, T*);       \
  template double cross_entropy(std::int64_t, std::int64_t, const T*, const std::int64_t*, std::int64_t, double*);     \
  template void cross_entropy_backward(std::int64_t, std::int64_t, const T*, const std::int64_t*, std::int64_t,        \
                                       const double*, double, T*);                                                     \
  template double cross_entropy_jvp(std::int64_t, std::int64_t, const T*, const T*, const std::int64_t*, std::int64_t, \
                                    const double*);                                                                    \
  template void cross_entropy_backward_tangent(std::int64_t, std::int64_t, const T*, const T*, const std::int64_t*,    \
                                               std::int64_t, const double*, double, T*);
AG_LOOKUP(float)
AG_LOOKUP(double)
#undef AG_LOOKUP

}  // namespace ag::backends::cpu
