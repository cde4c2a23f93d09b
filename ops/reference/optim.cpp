// The optimizer's update and gradient clipping, element by element, in double.
//
// Adam (Kingma and Ba, 2015), step t = 1, 2, ... with gradient g:
//   g  = g + wd w                      only for Adam's L2 decay (decoupled = false)
//   m  = beta1 m + (1 - beta1) g       running mean of the gradient
//   v  = beta2 v + (1 - beta2) g^2     running mean of its square
//   m^ = m / (1 - beta1^t),  v^ = v / (1 - beta2^t)      both start at 0: undo that bias
//   w  = w (1 - lr wd)                 only for AdamW (Loshchilov and Hutter, 2019)
//   w  = w - lr m^ / (sqrt(v^) + eps)
//
// clip_grad_norm: norm = sqrt(sum over every gradient element of g^2); where
// scale = max_norm / (norm + 1e-6) is below 1, every g is multiplied by it, so the clipped norm
// is just under max_norm (PyTorch's rule: the 1e-6 keeps a zero norm from dividing by 0).
#include <cmath>

#include "../../autograd/dispatch.h"
#include "../kernel_ops.h"
#include "reference.h"

namespace ag::reference {

namespace {
template <class T>
void adam_update_impl(T* w, const T* g, T* m, T* v, std::int64_t n, const AdamSettings& s) {
  double t = static_cast<double>(s.step);
  double bias1 = 1 - std::pow(s.beta1, t), bias2 = 1 - std::pow(s.beta2, t);
  for (std::int64_t j = 0; j < n; ++j) {
    double grad = g[j] + (s.decoupled ? 0.0 : s.weight_decay * w[j]);
    double mj = s.beta1 * m[j] + (1 - s.beta1) * grad;
    double vj = s.beta2 * v[j] + (1 - s.beta2) * grad * grad;
    double m_hat = mj / bias1, v_hat = vj / bias2;
    double wj = s.decoupled ? w[j] * (1 - s.lr * s.weight_decay) : w[j];
    w[j] = static_cast<T>(wj - s.lr * m_hat / (std::sqrt(v_hat) + s.eps));
    m[j] = static_cast<T>(mj);
    v[j] = static_cast<T>(vj);
  }
}
}  // namespace

void adam_update(float* w, const float* g, float* m, float* v, std::int64_t n, const AdamSettings& s) {
  count_call(KernelOp::AdamUpdate);
  adam_update_impl(w, g, m, v, n, s);
}
void adam_update(double* w, const double* g, double* m, double* v, std::int64_t n, const AdamSettings& s) {
  count_call(KernelOp::AdamUpdate);
  adam_update_impl(w, g, m, v, n, s);
}

double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm) {
  count_call(KernelOp::ClipGradNorm);
  double sum_of_squares = 0.0;
  for (const Tensor& g : grads)
    dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto tag) {
      const auto* p = g.data_ptr<decltype(tag)>();
      for (std::int64_t j = 0; j < g.numel(); ++j) sum_of_squares += static_cast<double>(p[j]) * p[j];
    });
  double norm = std::sqrt(sum_of_squares);
  double scale = max_norm / (norm + 1e-6);
  if (scale >= 1) return norm;
  for (Tensor g : grads)  // a handle: the gradient itself is scaled
    dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = decltype(tag);
      T* p = g.mutable_data_ptr<T>();
      for (std::int64_t j = 0; j < g.numel(); ++j) p[j] = static_cast<T>(p[j] * scale);
    });
  return norm;
}

}  // namespace ag::reference
