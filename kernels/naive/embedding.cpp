// embedding and cross_entropy, the two ends of a GPT, as plain loops; the fast twins are
// kernels/cpu/lookup.cpp, the ops ops/fused/nn_ops.cpp, and docs/cross_entropy.md derives both.
//
//   embedding:      W: [V, D]   ids: [P]   y, dy: [P, D]
//   cross_entropy:  x, dx: [R, C] logits   targets: [R]   lse: [R] (float64)
#include <algorithm>
#include <cmath>
#include <limits>

#include "naive.h"

namespace ag::backends::naive {

// y[p, :] = W[ids[p], :]: a row lookup.
template <class T>
void embedding(std::int64_t positions, std::int64_t dim, const T* w, const std::int64_t* ids, T* y) {
  count_call();
  for (std::int64_t p = 0; p < positions; ++p)
    for (std::int64_t j = 0; j < dim; ++j) y[p * dim + j] = w[ids[p] * dim + j];
}

// dW[v, :] = sum over the positions p with ids[p] = v of dy[p, :]
// (y[p, :] is a copy of W[ids[p], :]: a scatter-add, where repeated ids add up; rows no id
// picked get 0). dW is written whole; the adds run in T, position by position.
template <class T>
void embedding_backward(std::int64_t positions, std::int64_t dim, std::int64_t vocab, const std::int64_t* ids,
                        const T* dy, T* dw) {
  count_call();
  for (std::int64_t i = 0; i < vocab * dim; ++i) dw[i] = T(0);
  for (std::int64_t p = 0; p < positions; ++p)
    for (std::int64_t j = 0; j < dim; ++j) dw[ids[p] * dim + j] += dy[p * dim + j];
}

// For each counted row r (targets[r] != ignore_index), with t = targets[r]:
//   lse_r = log sum_c exp(x_rc) = m + log sum_c exp(x_rc - m),  m = max_c x_rc   (no overflow)
//   returns sum over counted rows of (lse_r - x_rt) = -log softmax(x_r)_t
// lse of an ignored row is not written.
template <class T>
double cross_entropy(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                     std::int64_t ignore_index, double* lse) {
  count_call();
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    const T* row = x + r * classes;
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < classes; ++c) m = std::max(m, static_cast<double>(row[c]));
    double sum = 0;
    for (std::int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - m);
    lse[r] = m + std::log(sum);
    total += lse[r] - row[targets[r]];
  }
  return total;
}

// d(lse_r - x_rt)/dx_rc = exp(x_rc - lse_r) - [c = t] = softmax(x_r)_c - onehot(t)_c, so
//   dx_rc = g (exp(x_rc - lse_r) - [c = t])   on counted rows,   dx_rc = 0 on ignored ones
// (g = dloss / the number of counted rows), computed in double and stored once.
template <class T>
void cross_entropy_backward(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                            std::int64_t ignore_index, const double* lse, double g, T* dx) {
  count_call();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < classes; ++c) {
      bool ignored = targets[r] == ignore_index;
      double onehot = c == targets[r] ? 1.0 : 0.0;
      dx[r * classes + c] = ignored ? T(0) : static_cast<T>(g * (std::exp(x[r * classes + c] - lse[r]) - onehot));
    }
}

// The two precisions of the table (table.cpp).
template void embedding(std::int64_t, std::int64_t, const float*, const std::int64_t*, float*);
template void embedding(std::int64_t, std::int64_t, const double*, const std::int64_t*, double*);
template void embedding_backward(std::int64_t, std::int64_t, std::int64_t, const std::int64_t*, const float*, float*);
template void embedding_backward(std::int64_t, std::int64_t, std::int64_t, const std::int64_t*, const double*, double*);
template double cross_entropy(std::int64_t, std::int64_t, const float*, const std::int64_t*, std::int64_t, double*);
template double cross_entropy(std::int64_t, std::int64_t, const double*, const std::int64_t*, std::int64_t, double*);
template void cross_entropy_backward(std::int64_t, std::int64_t, const float*, const std::int64_t*, std::int64_t,
                                     const double*, double, float*);
template void cross_entropy_backward(std::int64_t, std::int64_t, const double*, const std::int64_t*, std::int64_t,
                                     const double*, double, double*);

}  // namespace ag::backends::naive
