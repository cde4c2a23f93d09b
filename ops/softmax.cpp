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
// Each formula is written once, with ops: the same code is the backward, the forward-mode rule
// and, under create_graph, the graph that differentiates it again. Hand loops for the two
// backward formulas did not pay against these ops and were dropped (docs/performance.md).
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

// One forward for both: log_softmax when `log` is set. `any_dead` (when given) is set when some
// row is fully masked (every logit -inf).
Tensor softmax_forward(const char* op, const Tensor& x, const DimLayout& l, bool log, bool* any_dead = nullptr) {
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
          if (any_dead) *any_dead = true;
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

// True on every element of a row whose log-probabilities are all -inf (a fully masked row);
// undefined when there is none. Found again only when the forward met such a row.
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

// v -> y (v - sum_k v_k y_k) along dim: softmax's vector-Jacobian product and, its Jacobian
// being symmetric, its Jacobian-vector product too. A fully masked row has y = 0: it gets 0.
Tensor softmax_jacobian_times(const Tensor& v, const Tensor& y, std::int64_t dim) {
  return y * (v - sum(v * y, dim, /*keepdim=*/true));
}

// log_softmax's two products, J^T dy = dy - p sum_k dy_k and J v = v - sum_k p_k v_k with
// p = exp(y); a fully masked row (`dead`, undefined when there is none) neither moves nor passes
// a gradient back.
Tensor zero_dead_rows(const Tensor& t, const Tensor& dead) { return dead.defined() ? masked_fill(t, dead, 0.0) : t; }
Tensor log_softmax_transpose_times(const Tensor& dy, const Tensor& y, std::int64_t dim, const Tensor& dead) {
  return zero_dead_rows(dy - exp(y) * sum(dy, dim, /*keepdim=*/true), dead);
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) {
  check_floating("softmax", x);
  DimLayout l = dim_layout("softmax", x.shape(), dim);
  Tensor y = softmax_forward("softmax", x, l, false);
  // Saved for backward: y only (the formula needs nothing else); under create_graph it is read
  // through its own history (detail::node_output), so that the formula is differentiated again.
  return record({"softmax", profile::Family::Softmax}, y, {x},
                fast_or_composed(
                    [dim, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{softmax_jacobian_times(dy, y, dim)};
                    },
                    [dim, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{softmax_jacobian_times(dy, detail::node_output(y), dim)};
                    }),
                Saved{y}, BackwardOrder::AnyOrder,
                [dim, y](const std::vector<Tensor>& t) { return softmax_jacobian_times(t[0], y, dim); });
}

Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  check_floating("log_softmax", x);
  DimLayout l = dim_layout("log_softmax", x.shape(), dim);
  bool any_dead = false;
  Tensor y = softmax_forward("log_softmax", x, l, true, &any_dead);
  Tensor dead = any_dead ? fully_masked_rows(y, l) : Tensor();
  return record({"log_softmax", profile::Family::Softmax}, y, {x},
                fast_or_composed(
                    [dim, dead, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{log_softmax_transpose_times(dy, y, dim, dead)};
                    },
                    [dim, dead, y = y.detach()](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{log_softmax_transpose_times(dy, detail::node_output(y), dim, dead)};
                    }),
                Saved{y}, BackwardOrder::AnyOrder, [dim, dead, y](const std::vector<Tensor>& t) {
                  return zero_dead_rows(t[0] - sum(exp(y) * t[0], dim, /*keepdim=*/true), dead);  // J v
                });
}

Tensor Tensor::softmax(std::int64_t dim) const { return ag::softmax(*this, dim); }
Tensor Tensor::log_softmax(std::int64_t dim) const { return ag::log_softmax(*this, dim); }

}  // namespace ag
