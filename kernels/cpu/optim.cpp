// The cpu backend's optimizer kernels: Adam's step (nn/optim.cpp; its readable twin is
// ops/reference/optim.cpp), SGD's, and the two passes of gradient clipping.
#include <cmath>

#include "../../runtime/parallel.h"
#include "fast_math.h"
#include "kernels.h"

namespace ag::backends::cpu {

// In the parameter's own type, as PyTorch does: one vectorisable pass per tensor.
//   d = g + l2 w,   m = b1 m + (1 - b1) d,   v = b2 v + (1 - b2) d^2
//   w = w decay - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// with l2 = weight_decay and decay = 1 for Adam, l2 = 0 and decay = 1 - lr weight_decay for AdamW.
template <class T>
void adam_update(std::int64_t n, T* w, const T* g, T* m, T* v, const AdamSettings& s) {
  double t = static_cast<double>(s.step);
  double bias1 = 1 - std::pow(s.beta1, t), bias2 = 1 - std::pow(s.beta2, t);
  T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2), eps = static_cast<T>(s.eps);
  T l2 = s.decoupled ? T(0) : static_cast<T>(s.weight_decay);
  T decay = static_cast<T>(s.decoupled ? 1 - s.lr * s.weight_decay : 1.0);  // AdamW shrinks w first
  T size = static_cast<T>(s.lr / bias1), inv_sqrt_bias2 = static_cast<T>(1.0 / std::sqrt(bias2));
  // Captured by value so that the loop reads locals, which GCC can keep in vector registers.
  parallel_for(n, 8192, [=](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) {
      T d = g[j] + l2 * w[j];
      m[j] = b1 * m[j] + (1 - b1) * d;
      v[j] = b2 * v[j] + (1 - b2) * d * d;
      w[j] = w[j] * decay - size * m[j] / (std::sqrt(v[j]) * inv_sqrt_bias2 + eps);
    }
  });
}

// SGD's step in double, as PyTorch's torch.optim.SGD, split across the pool.
template <class T>
void sgd_update(std::int64_t n, T* w, const T* g, T* buf, const SgdSettings& s) {
  parallel_for(n, 8192, [=](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) {
      double d = g[j] + s.weight_decay * w[j];
      if (buf) {
        buf[j] = static_cast<T>(s.first ? d : s.momentum * buf[j] + (1 - s.dampening) * d);
        d = s.nesterov ? d + s.momentum * buf[j] : buf[j];
      }
      w[j] = static_cast<T>(w[j] - s.lr * d);
    }
  });
}

// Summed in double with the SIMD lane sums.
template <class T>
double sum_of_squares(std::int64_t n, const T* x) {
  return fast::lane_sum(n, [&](std::int64_t j) { return static_cast<double>(x[j]) * x[j]; });
}

// Each product in double, rounded once to T.
template <class T>
void scale(std::int64_t n, T* x, double factor) {
  for (std::int64_t j = 0; j < n; ++j) x[j] = static_cast<T>(x[j] * factor);
}

template void adam_update(std::int64_t, float*, const float*, float*, float*, const AdamSettings&);
template void adam_update(std::int64_t, double*, const double*, double*, double*, const AdamSettings&);
template void sgd_update(std::int64_t, float*, const float*, float*, const SgdSettings&);
template void sgd_update(std::int64_t, double*, const double*, double*, const SgdSettings&);
template double sum_of_squares(std::int64_t, const float*);
template double sum_of_squares(std::int64_t, const double*);
template void scale(std::int64_t, float*, double);
template void scale(std::int64_t, double*, double);

}  // namespace ag::backends::cpu
