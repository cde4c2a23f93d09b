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

#include "../autograd/node.h"
#include "../kernels/table.h"
#include "../runtime/profile.h"
#include "binary.h"
#include "dim_layout.h"
#include "elementwise.h"
#include "masking.h"
#include "reduce.h"
#include "route.h"

namespace ag {

namespace {

// One forward for both, by the backend's kernel: log_softmax when `log` is set. A fully masked
// row (every logit -inf) has no distribution: it gets zeros (softmax) or -inf (log_softmax), and
// `any_dead` (when given) says whether there was one. A NaN makes its row NaN.
Tensor softmax_forward(const char* op, const Tensor& x, const DimLayout& l, bool log, bool* any_dead = nullptr) {
  profile::Scope scope(profile::Family::Softmax);
  Tensor y = empty_like(x);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    bool dead = current_backend().table<T>().softmax(l.sizes(), log, x.data_ptr<T>(), y.mutable_data_ptr<T>());
    if (any_dead) *any_dead = dead;
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
    any = current_backend().table<T>().dead_rows(l.sizes(), y.data_ptr<T>(), dead.mutable_data_ptr<bool>());
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
