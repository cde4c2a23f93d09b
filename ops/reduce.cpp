// Reductions over one dim, on the [outer, n, inner] view of ops/dim_layout.h: reducing over k
// leaves [outer, inner].
//
// Reducing over all elements is the same with outer = inner = 1 and n = numel.
//
//   x: [..., n, ...]   y, dy: x's shape without dim n (or with size 1 there, keepdim)
#include "reduce.h"

#include "../autograd/dispatch.h"
#include "../autograd/grad_mode.h"
#include "../autograd/node.h"
#include "../kernels/table.h"
#include "../runtime/profile.h"
#include "binary.h"
#include "dim_layout.h"
#include "route.h"
#include "shape.h"

namespace ag {

namespace {

using Layout = DimLayout;

Layout layout_of(const char* op, const Tensor& x, std::int64_t dim) { return dim_layout(op, x.shape(), dim); }

Layout layout_of_all(const Tensor& x) {
  Layout l;
  l.n = x.numel();
  return l;  // kept and reduced are both [] : a 0-d result
}

// y[o, i] = sum_k x[o, k, i]   (accumulated in double), by the backend's kernel
Tensor sum_kernel(const char* op, const Tensor& x, const Layout& l, const Shape& out_shape) {
  Tensor y = empty(out_shape, x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().sum_dim(l.sizes(), x.data_ptr<T>(), y.mutable_data_ptr<T>());
  });
  return y;
}

// The sum of a bool tensor (a count of the true ones) or an int64 one: int64, exact, by the
// backend's kernel; a sum past int64's range is refused. The mean is that sum over n, float32.
// Not differentiable: no node is recorded.
Tensor sum_exactly(const char* op, const Tensor& x, const Layout& l, bool keepdim, bool is_mean) {
  profile::Scope scope(profile::Family::Reduction);
  if (is_mean && l.n == 0) throw_invalid(op, "mean over an empty dim (shape {})", shape_str(x.shape()));
  Tensor y = empty(keepdim ? l.kept : l.reduced, kInt64);
  // ag::DType and backends::Scalar list the same types in the same order (kernels/table.h).
  std::int64_t bad = y.numel() == 0
                         ? -1
                         : current_backend().sum_integers(static_cast<backends::Scalar>(x.dtype()), l.sizes(),
                                                          x.raw_data(), y.mutable_data_ptr<std::int64_t>());
  if (bad >= 0)
    throw_invalid(op, "sum {} of the int64 tensor of shape {} passes int64's range (sum x.to(ag::kFloat64) instead)",
                  bad, shape_str(x.shape()));
  if (!is_mean) return y;
  return (y.to(kFloat64) / static_cast<double>(l.n)).to(kFloat32);
}

// y = sum_k x_k:     dx_k = dy   (dy copied back along the reduced dim)     ẏ = sum_k ẋ_k
// y = mean_k x_k:    dx_k = dy / n                                          ẏ = mean_k ẋ_k
Tensor sum_or_mean(const char* op, const Tensor& x, const Layout& l, bool keepdim, bool is_mean) {
  check_defined(op, x);
  if (x.dtype() == kInt64 || x.dtype() == kBool) return sum_exactly(op, x, l, keepdim, is_mean);
  profile::Scope scope(profile::Family::Reduction);
  check_floating(op, x);
  Tensor y = sum_kernel(op, x, l, keepdim ? l.kept : l.reduced);
  if (is_mean) {
    if (l.n == 0) throw_invalid(op, "mean over an empty dim (shape {})", shape_str(x.shape()));
    NoGradGuard no_grad;  // y is a fresh result, the division is part of this op's forward
    y = y / static_cast<double>(l.n);
  }
  return record(
      {op, profile::Family::Reduction}, y, {x},
      [l, is_mean, x_shape = x.shape()](const Tensor& dy, const std::vector<bool>&) {
        Tensor dx = broadcast_to(dy.reshape(l.kept), x_shape);
        return std::vector<Tensor>{is_mean ? dx / static_cast<double>(l.n) : dx};
      },
      Saved{}, BackwardOrder::AnyOrder,
      [op, l, keepdim, is_mean](const std::vector<Tensor>& t) { return sum_or_mean(op, t[0], l, keepdim, is_mean); });
}

Tensor at_winners(const Tensor& t, const Tensor& argmax, const DimLayout& l, const Shape& out_shape);

// max's adjoint: zeros of x's shape with dy at each winning position, dx[o, k*, i] = dy[o, i]
// (the gradient of a max goes to its argmax). An op of its own, whose adjoint is the gather of
// the winners again (at_winners), so that max is differentiated to any order by one rule.
Tensor to_winners(const Tensor& dy, const Tensor& argmax, const DimLayout& l, const Shape& x_shape) {
  Tensor dx = zeros(x_shape, dy.dtype());
  dispatch_floating(dy.dtype(), "max", [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().put_along(l.sizes(), dy.data_ptr<T>(), argmax.data_ptr<std::int64_t>(),
                                           dx.mutable_data_ptr<T>());
  });
  return record(
      {"max_backward", profile::Family::Reduction}, dx, {dy},
      [l, argmax, out_shape = dy.shape()](const Tensor& ddx, const std::vector<bool>&) {
        return std::vector<Tensor>{at_winners(ddx, argmax, l, out_shape)};
      },
      Saved{argmax}, BackwardOrder::AnyOrder,
      [l, argmax, x_shape](const std::vector<Tensor>& t) { return to_winners(t[0], argmax, l, x_shape); });
}

// y[o, i] = t[o, k*, i]: t read at each winning position. max's forward once its winners are
// known, and its tangent (ẏ = ẋ at the winners); its adjoint is to_winners.
Tensor at_winners(const Tensor& t, const Tensor& argmax, const DimLayout& l, const Shape& out_shape) {
  Tensor y = empty(out_shape, t.dtype());
  dispatch_floating(t.dtype(), "max", [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().take_along(l.sizes(), t.data_ptr<T>(), argmax.data_ptr<std::int64_t>(),
                                            y.mutable_data_ptr<T>());
  });
  return record(
      {"max", profile::Family::Reduction}, y, {t},
      [l, argmax, x_shape = t.shape()](const Tensor& dy, const std::vector<bool>&) {
        return std::vector<Tensor>{to_winners(dy, argmax, l, x_shape)};
      },
      Saved{argmax}, BackwardOrder::AnyOrder,
      [l, argmax, out_shape](const std::vector<Tensor>& u) { return at_winners(u[0], argmax, l, out_shape); });
}

// y[o, i] = x[o, k*, i] with k* = argmax_k:   dx[o, k*, i] = dy[o, i], zero elsewhere;  ẏ[o, i] = ẋ[o, k*, i]
// The kernel finds the winners (max_dim); the rest of the op is at_winners, whose one rule, the
// scatter to_winners and back, serves the backward, create_graph and forward mode alike.
Tensor max_impl(const char* op, const Tensor& x, const Layout& l, bool keepdim, Tensor* indices) {
  profile::Scope scope(profile::Family::Reduction);
  check_floating(op, x);
  if (l.n == 0) throw_invalid(op, "{} over an empty dim (shape {}) has no value", op, shape_str(x.shape()));
  const Shape& out_shape = keepdim ? l.kept : l.reduced;
  Tensor y = empty(out_shape, x.dtype());
  Tensor argmax = empty(out_shape, kInt64);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);  // the first largest value wins; a NaN beats any number, as in PyTorch
    current_backend().table<T>().max_dim(l.sizes(), x.data_ptr<T>(), y.mutable_data_ptr<T>(),
                                         argmax.mutable_data_ptr<std::int64_t>());
  });
  if (indices) *indices = argmax;
  // Saved for backward: the winning index of each output (int64, one per output element).
  return record(
      {op, profile::Family::Reduction}, y, {x},
      [l, argmax, x_shape = x.shape()](const Tensor& dy, const std::vector<bool>&) {
        return std::vector<Tensor>{to_winners(dy, argmax, l, x_shape)};
      },
      Saved{argmax}, BackwardOrder::AnyOrder,
      [l, argmax, out_shape](const std::vector<Tensor>& t) { return at_winners(t[0], argmax, l, out_shape); });
}

}  // namespace

Tensor sum(const Tensor& x) {
  check_defined("sum", x);
  return sum_or_mean("sum", x, layout_of_all(x), false, false);
}
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_defined("sum", x);
  return sum_or_mean("sum", x, layout_of("sum", x, dim), keepdim, false);
}
Tensor mean(const Tensor& x) {
  check_defined("mean", x);
  return sum_or_mean("mean", x, layout_of_all(x), false, true);
}
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_defined("mean", x);
  return sum_or_mean("mean", x, layout_of("mean", x, dim), keepdim, true);
}
Tensor max(const Tensor& x) {
  check_floating("max", x);
  return max_impl("max", x, layout_of_all(x), false, nullptr);
}
Tensor amax(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_floating("amax", x);
  return max_impl("amax", x, layout_of("amax", x, dim), keepdim, nullptr);
}
std::tuple<Tensor, Tensor> max(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_floating("max", x);
  Tensor indices;
  Tensor values = max_impl("max", x, layout_of("max", x, dim), keepdim, &indices);
  return {values, indices};
}
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_floating("argmax", x);
  Tensor indices;
  NoGradGuard no_grad;
  max_impl("argmax", x, layout_of("argmax", x, dim), keepdim, &indices);
  return indices;
}

// The smallest value is the largest of -x, negated: min x = -max(-x), with the same winner
// (the first position, NaN first) and so the same gradient, which the two negations carry.
Tensor min(const Tensor& x) {
  check_floating("min", x);
  return -max_impl("min", -x, layout_of_all(x), false, nullptr);
}
Tensor amin(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_floating("amin", x);
  return -max_impl("amin", -x, layout_of("amin", x, dim), keepdim, nullptr);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_floating("min", x);
  Tensor indices;
  Tensor values = -max_impl("min", -x, layout_of("min", x, dim), keepdim, &indices);
  return {values, indices};
}
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_floating("argmin", x);
  Tensor indices;
  NoGradGuard no_grad;
  max_impl("argmin", -x, layout_of("argmin", x, dim), keepdim, &indices);
  return indices;
}

Tensor Tensor::sum() const { return ag::sum(*this); }
Tensor Tensor::sum(std::int64_t dim, bool keepdim) const { return ag::sum(*this, dim, keepdim); }
Tensor Tensor::mean() const { return ag::mean(*this); }
Tensor Tensor::mean(std::int64_t dim, bool keepdim) const { return ag::mean(*this, dim, keepdim); }
Tensor Tensor::max() const { return ag::max(*this); }
std::tuple<Tensor, Tensor> Tensor::max(std::int64_t dim, bool keepdim) const { return ag::max(*this, dim, keepdim); }
Tensor Tensor::amax(std::int64_t dim, bool keepdim) const { return ag::amax(*this, dim, keepdim); }
Tensor Tensor::argmax(std::int64_t dim, bool keepdim) const { return ag::argmax(*this, dim, keepdim); }
Tensor Tensor::min() const { return ag::min(*this); }
std::tuple<Tensor, Tensor> Tensor::min(std::int64_t dim, bool keepdim) const { return ag::min(*this, dim, keepdim); }
Tensor Tensor::amin(std::int64_t dim, bool keepdim) const { return ag::amin(*this, dim, keepdim); }
Tensor Tensor::argmin(std::int64_t dim, bool keepdim) const { return ag::argmin(*this, dim, keepdim); }

}  // namespace ag
