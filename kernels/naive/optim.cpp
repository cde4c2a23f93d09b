// The optimizers' steps and gradient clipping as plain loops, element by element in double; the
// fast twins are kernels/cpu/optim.cpp, the callers Adam::step and clip_grad_norm in nn/optim.cpp.
//
//   w, g, m, v, x: [n]
#include <cmath>

#include "naive.h"

namespace ag::backends::naive {

// One Adam step at step t = s.step (1, 2, ...), for each element:
//   g  = g + wd w                       Adam's L2 decay (not decoupled)
//   m  = beta1 m + (1 - beta1) g        running mean of the gradient
//   v  = beta2 v + (1 - beta2) g^2      running mean of its square
//   m^ = m / (1 - beta1^t),  v^ = v / (1 - beta2^t)      (both start at 0: undo that bias)
//   w  = w (1 - lr wd)                  AdamW's decoupled decay, applied to the old w
//   w  = w - lr m^ / (sqrt(v^) + eps)
template <class T>
void adam_update(std::int64_t n, T* w, const T* g, T* m, T* v, const AdamSettings& s) {
  count_call();
  double t = static_cast<double>(s.step);
  double bias1 = 1 - std::pow(s.beta1, t), bias2 = 1 - std::pow(s.beta2, t);
  for (std::int64_t i = 0; i < n; ++i) {
    double wi = w[i], gi = g[i];
    if (s.decoupled)
      wi *= 1 - s.lr * s.weight_decay;
    else
      gi += s.weight_decay * wi;
    double mi = s.beta1 * m[i] + (1 - s.beta1) * gi;
    double vi = s.beta2 * v[i] + (1 - s.beta2) * gi * gi;
    double m_hat = mi / bias1, v_hat = vi / bias2;
    w[i] = static_cast<T>(wi - s.lr * m_hat / (std::sqrt(v_hat) + s.eps));
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
  }
}

// One SGD step, for each element (PyTorch's torch.optim.SGD):
//   d   = g + wd w                                        L2 decay
//   buf = d on the first step, else mu buf + (1 - dampening) d      with momentum only
//   d   = d + mu buf (Nesterov), or buf                               with momentum only
//   w   = w - lr d
template <class T>
void sgd_update(std::int64_t n, T* w, const T* g, T* buf, const SgdSettings& s) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) {
    double d = g[i] + s.weight_decay * w[i];
    if (buf) {
      buf[i] = static_cast<T>(s.first ? d : s.momentum * buf[i] + (1 - s.dampening) * d);
      d = s.nesterov ? d + s.momentum * buf[i] : buf[i];
    }
    w[i] = static_cast<T>(w[i] - s.lr * d);
  }
}

// sum_i x_i^2, in double: the square of the gradients' global norm, one buffer at a time.
template <class T>
double sum_of_squares(std::int64_t n, const T* x) {
  count_call();
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

// x_i = x_i * factor, in double: clipping's rescale, max_norm / (norm + 1e-6).
template <class T>
void scale(std::int64_t n, T* x, double factor) {
  count_call();
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * factor);
}

// The two precisions of the table (table.cpp).
template void adam_update(std::int64_t, float*, const float*, float*, float*, const AdamSettings&);
template void adam_update(std::int64_t, double*, const double*, double*, double*, const AdamSettings&);
template void sgd_update(std::int64_t, float*, const float*, float*, const SgdSettings&);
template void sgd_update(std::int64_t, double*, const double*, double*, const SgdSettings&);
template double sum_of_squares(std::int64_t, const float*);
template double sum_of_squares(std::int64_t, const double*);
template void scale(std::int64_t, float*, double);
template void scale(std::int64_t, double*, double);

}  // namespace ag::backends::naive
