// softmax over dim k of the [outer, n, inner] view (ops/dim_layout.h):
//
//   y_k = exp(x_k - m) / sum_j exp(x_j - m),   m = max_j x_j
//
// Subtracting m changes nothing mathematically (it cancels between numerator and denominator)
// but keeps every exponent <= 0, so logits of magnitude 1e4 neither overflow nor underflow
// to 0/0.
//
// Backward, without ever forming the n x n Jacobian dy_k/dx_j = y_k ([k = j] - y_j):
//
//   dx_j = sum_k dy_k y_k ([k = j] - y_j) = y_j (dy_j - sum_k dy_k y_k)
//
// log_softmax:  y_k = x_k - m - log sum_j exp(x_j - m)
//               dy_k/dx_j = [k = j] - p_j  with p = softmax(x) = exp(y), so
//               dx_j = dy_j - p_j sum_k dy_k
//
// Forward mode: softmax's Jacobian is symmetric, so its tangent is the backward's formula again,
// ẏ = y (ẋ - sum_k ẋ_k y_k); log_softmax's is  ẏ = ẋ - sum_k p_k ẋ_k.
//
//   x, y, dy, dx: any shape, float32 or float64; the formulas run along `dim`.
#include "softmax.h"

#include <cmath>
#include <limits>

#include "../autograd/node.h"
#include "../runtime/profile.h"
#include "binary.h"
#include "dim_layout.h"
#include "elementwise.h"
#include "masking.h"
#include "reduce.h"
#include "route.h"

namespace ag {

namespace {

template <class T>
bool fully_masked(T max_value) {
  return max_value == -std::numeric_limits<T>::infinity();
}

// One forward for both: log_softmax when `log` is set.
Tensor softmax_forward(const char* op, const Tensor& x, const DimLayout& l, bool log) {
  profile::Scope scope(profile::Family::Softmax);
  Tensor y = empty_like(x);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    T* py = y.mutable_data_ptr<T>();
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t i = 0; i < l.inner; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t k = 0; k < l.n; ++k) m = std::max(m, px[l.at(o, k, i)]);
        if (fully_masked(m)) {  // no distribution: zeros (softmax) or -inf (log_softmax)
          for (std::int64_t k = 0; k < l.n; ++k) py[l.at(o, k, i)] = log ? m : T(0);
          continue;
        }
        // exp in the tensor's type (float math for float32), summed in double
        double sum = 0.0;
        for (std::int64_t k = 0; k < l.n; ++k) sum += (py[l.at(o, k, i)] = std::exp(px[l.at(o, k, i)] - m));
        if (log) {
          T log_sum = static_cast<T>(std::log(sum));
          for (std::int64_t k = 0; k < l.n; ++k) py[l.at(o, k, i)] = px[l.at(o, k, i)] - m - log_sum;
        } else {
          T inv = static_cast<T>(1.0 / sum);
          for (std::int64_t k = 0; k < l.n; ++k) py[l.at(o, k, i)] *= inv;
        }
      }
  });
  return y;
}

// dx_j = y_j (dy_j - sum_k dy_k y_k), row by row; a fully masked row has y = 0, so dx = 0 there.
Tensor softmax_backward(const Tensor& dy, const Tensor& y, const DimLayout& l) {
  Tensor dx = empty_like(y);
  dispatch_floating(y.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T *py = y.data_ptr<T>(), *pdy = dy.data_ptr<T>();
    T* pdx = dx.mutable_data_ptr<T>();
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t i = 0; i < l.inner; ++i) {
        double dot = 0.0;  // sum_k dy_k y_k
        for (std::int64_t k = 0; k < l.n; ++k) dot += static_cast<double>(pdy[l.at(o, k, i)]) * py[l.at(o, k, i)];
        // dx_j = y_j (dy_j - dot); a fully masked row has y = 0, so dx = 0 there
        for (std::int64_t k = 0; k < l.n; ++k)
          pdx[l.at(o, k, i)] = py[l.at(o, k, i)] * (pdy[l.at(o, k, i)] - static_cast<T>(dot));
      }
  });
  return dx;
}

// dx_j = dy_j - p_j sum_k dy_k, p = exp(y), row by row; a row of -inf (fully masked) gets none.
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, const DimLayout& l) {
  Tensor dx = empty_like(y);
  dispatch_floating(y.dtype(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    const T *py = y.data_ptr<T>(), *pdy = dy.data_ptr<T>();
    T* pdx = dx.mutable_data_ptr<T>();
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t i = 0; i < l.inner; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t k = 0; k < l.n; ++k) m = std::max(m, py[l.at(o, k, i)]);
        if (fully_masked(m)) {  // every y_k is -inf: no gradient
          for (std::int64_t k = 0; k < l.n; ++k) pdx[l.at(o, k, i)] = 0;
          continue;
        }
        double total = 0.0;  // sum_k dy_k
        for (std::int64_t k = 0; k < l.n; ++k) total += pdy[l.at(o, k, i)];
        // dx_j = dy_j - p_j * total, p_j = exp(y_j)
        for (std::int64_t k = 0; k < l.n; ++k)
          pdx[l.at(o, k, i)] = pdy[l.at(o, k, i)] - std::exp(py[l.at(o, k, i)]) * static_cast<T>(total);
      }
  });
  return dx;
}

// True on every element of a row whose log-probabilities are all -inf (a fully masked row);
// undefined when there is none.
Tensor fully_masked_rows(const Tensor& y, const DimLayout& l) {
  Tensor dead = zeros(y.shape(), kBool);
  bool any = false;
  dispatch_floating(y.dtype(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* py = y.data_ptr<T>();
    bool* pd = dead.mutable_data_ptr<bool>();
    for (std::int64_t o = 0; o < l.outer; ++o)
      for (std::int64_t i = 0; i < l.inner; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t k = 0; k < l.n; ++k) m = std::max(m, py[l.at(o, k, i)]);
        if (!fully_masked(m)) continue;
        any = true;
        for (std::int64_t k = 0; k < l.n; ++k) pd[l.at(o, k, i)] = true;
      }
  });
  return any ? dead : Tensor();
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) {
  check_floating("softmax", x);
  DimLayout l = dim_layout("softmax", x.shape(), dim);
  Tensor y = softmax_forward("softmax", x, l, false);
  // Saved for backward: y only (the formula needs nothing else).
  return record({"softmax", profile::Family::Softmax}, y, {x},
                fast_or_composed(
                    [l, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{softmax_backward(dy, y, l)};
                    },
                    [dim, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {  // the same formula as ops,
                      Tensor p = detail::node_output(y);                                 // through y's own history
                      return std::vector<Tensor>{p * (dy - sum(dy * p, dim, /*keepdim=*/true))};
                    }),
                Saved{y}, BackwardOrder::AnyOrder,
                [l, y](const std::vector<Tensor>& t) { return softmax_backward(t[0], y, l); });
}

Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  check_floating("log_softmax", x);
  DimLayout l = dim_layout("log_softmax", x.shape(), dim);
  Tensor y = softmax_forward("log_softmax", x, l, true);
  return record({"log_softmax", profile::Family::Softmax}, y, {x},
                fast_or_composed(
                    [l, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{log_softmax_backward(dy, y, l)};
                    },
                    [l, dim, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {
                      // the same formula as ops; a fully masked row still gets none
                      Tensor dx = dy - exp(detail::node_output(y)) * sum(dy, dim, /*keepdim=*/true);
                      Tensor dead = fully_masked_rows(y, l);
                      return std::vector<Tensor>{dead.defined() ? masked_fill(dx, dead, 0.0) : dx};
                    }),
                Saved{y}, BackwardOrder::AnyOrder, [l, dim, y](const std::vector<Tensor>& t) {
                  Tensor dy = t[0] - sum(exp(y) * t[0], dim, /*keepdim=*/true);
                  Tensor dead = fully_masked_rows(y, l);  // as in backward: such a row does not move
                  return dead.defined() ? masked_fill(dy, dead, 0.0) : dy;
                });
}

Tensor Tensor::softmax(std::int64_t dim) const { return ag::softmax(*this, dim); }
Tensor Tensor::log_softmax(std::int64_t dim) const { return ag::log_softmax(*this, dim); }

}  // namespace ag
