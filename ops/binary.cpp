// Binary arithmetic with broadcasting, and the comparisons (at the end of the file).
//
// Broadcasting copies an input along some dims, so by the chain rule the gradient of that
// input is the sum of the output's gradient over those same dims: sum_to undoes the shape
// that broadcast_to made (docs/autograd.md derives it).
//
//   a: shape A, b: shape B, y: shape S = broadcast(A, B).   dy: S;  da: A;  db: B.
//
// The loops are the backend's (kernels/table.h: kernels/cpu/broadcast.cpp,
// kernels/naive/broadcast.cpp); this file works out the shapes and the strides they read by.
#include "binary.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../autograd/dispatch.h"
#include "../autograd/grad_mode.h"
#include "../autograd/node.h"
#include "../kernels/table.h"
#include "../runtime/profile.h"
#include "masking.h"
#include "route.h"

namespace ag {

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {  // i counts from the right
    std::int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    std::int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      throw_invalid(op,
                    "shapes {} and {} cannot be broadcast: sizes {} and {} in dim {} from the right differ "
                    "and neither is 1",
                    shape_str(a), shape_str(b), sa, sb, i);
    out[out.size() - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

namespace {

// Strides for reading a tensor of shape `in` as if it had the (larger) shape `out`: 0 along
// dims that broadcasting adds or stretches, so every output position maps to an input element.
std::vector<std::int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<std::int64_t> strides(out.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::size_t d_in = in.size() - 1 - i, d_out = out.size() - 1 - i;
    if (in[d_in] != 1) strides[d_out] = stride;
    stride *= in[d_in];
  }
  return strides;
}

// The sizes of a broadcast loop over `shape`, reading inputs through strides sa (and sb).
backends::BroadcastSizes broadcast_sizes(const Shape& shape, const std::vector<std::int64_t>& sa,
                                         const std::vector<std::int64_t>* sb = nullptr) {
  return {shape.size(), shape.data(), sa.data(), sb ? sb->data() : nullptr};
}

// y = op(a, b) elementwise over the broadcast shape, by the backend's kernel.
Tensor broadcast_kernel(const char* op, backends::Arithmetic which, const Tensor& a, const Tensor& b) {
  check_same_floating(op, a, b);
  profile::Scope scope(profile::Family::Elementwise);
  Shape shape = broadcast_shapes(op, a.shape(), b.shape());
  Tensor y = detail::empty_for(op, shape, a.dtype());
  if (y.numel() == 0) return y;  // nothing to compute (and the other sizes may be huge)
  auto sa = broadcast_strides(a.shape(), shape), sb = broadcast_strides(b.shape(), shape);
  dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().arithmetic(which, broadcast_sizes(shape, sa, &sb), a.data_ptr<T>(), b.data_ptr<T>(),
                                            y.mutable_data_ptr<T>());
  });
  return y;
}

}  // namespace

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  check_floating("broadcast_to", x);
  if (x.shape().size() > shape.size() || broadcast_shapes("broadcast_to", x.shape(), shape) != shape)
    throw_invalid("broadcast_to", "cannot broadcast shape {} to {}", shape_str(x.shape()), shape_str(shape));
  Tensor y = detail::empty_for("broadcast_to", shape, x.dtype());
  if (y.numel() != 0)  // with no element, the other sizes may multiply past int64: no strides then
    dispatch_floating(x.dtype(), "broadcast_to", [&](auto tag) {
      using T = decltype(tag);
      auto sx = broadcast_strides(x.shape(), shape);
      current_backend().table<T>().broadcast(broadcast_sizes(shape, sx), x.data_ptr<T>(), y.mutable_data_ptr<T>());
    });
  // y[o] = x[map(o)]:  dx[i] = sum of dy[o] over every o with map(o) = i
  Shape x_shape = x.shape();
  return record(
      {"broadcast_to", profile::Family::Elementwise}, y, {x},
      [x_shape](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{sum_to(dy, x_shape)}; },
      Saved{}, BackwardOrder::AnyOrder, [shape](const std::vector<Tensor>& t) { return broadcast_to(t[0], shape); });
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  check_floating("sum_to", g);
  if (g.shape() == shape) return g;
  if (shape.size() > g.shape().size() || broadcast_shapes("sum_to", shape, g.shape()) != g.shape())
    throw_invalid("sum_to", "cannot sum shape {} down to {}", shape_str(g.shape()), shape_str(shape));
  Tensor y = zeros(shape, g.dtype());
  if (g.numel() != 0)  // nothing to add (and no strides formed from sizes that may be huge)
    dispatch_floating(g.dtype(), "sum_to", [&](auto tag) {
      using T = decltype(tag);
      auto sy = broadcast_strides(shape, g.shape());
      current_backend().table<T>().sum_broadcast(broadcast_sizes(g.shape(), sy), g.data_ptr<T>(),
                                                 y.mutable_data_ptr<T>());
    });
  // The adjoint of broadcast_to: dg = broadcast_to(dy, g.shape())
  Shape g_shape = g.shape();
  return record(
      {"sum_to", profile::Family::Reduction}, y, {g},
      [g_shape](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{broadcast_to(dy, g_shape)}; },
      Saved{}, BackwardOrder::AnyOrder, [shape](const std::vector<Tensor>& t) { return sum_to(t[0], shape); });
}

// A tangent brought to the output's shape: a broadcast input moves every copy of itself.
Tensor spread(const Tensor& tangent, const Shape& shape) {
  return tangent.shape() == shape ? tangent : broadcast_to(tangent, shape);
}

// y = a + b        da = sum_to(dy)          db = sum_to(dy)            ẏ = ȧ + ḃ
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_kernel("add", backends::Arithmetic::Add, a, b);
  return record(
      {"add", profile::Family::Elementwise}, y, {a, b},
      [sa = a.shape(), sb = b.shape()](const Tensor& dy, const std::vector<bool>& need) {
        return std::vector<Tensor>{need[0] ? sum_to(dy, sa) : Tensor(), need[1] ? sum_to(dy, sb) : Tensor()};
      },
      Saved{}, BackwardOrder::AnyOrder,
      [shape = y.shape()](const std::vector<Tensor>& t) {
        return !t[0].defined() ? spread(t[1], shape) : !t[1].defined() ? spread(t[0], shape) : t[0] + t[1];
      });
}

// y = a - b        da = sum_to(dy)          db = -sum_to(dy)           ẏ = ȧ - ḃ
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_kernel("sub", backends::Arithmetic::Sub, a, b);
  return record(
      {"sub", profile::Family::Elementwise}, y, {a, b},
      [sa = a.shape(), sb = b.shape()](const Tensor& dy, const std::vector<bool>& need) {
        return std::vector<Tensor>{need[0] ? sum_to(dy, sa) : Tensor(), need[1] ? -sum_to(dy, sb) : Tensor()};
      },
      Saved{}, BackwardOrder::AnyOrder,
      [shape = y.shape()](const std::vector<Tensor>& t) {
        return !t[0].defined() ? -spread(t[1], shape) : !t[1].defined() ? spread(t[0], shape) : t[0] - t[1];
      });
}

// y = a * b        da = sum_to(dy * b)      db = sum_to(dy * a)        ẏ = ȧ b + a ḃ
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_kernel("mul", backends::Arithmetic::Mul, a, b);
  return record(
      {"mul", profile::Family::Elementwise}, y, {a, b},
      // a and b as passed: with create_graph the products below are differentiated through them.
      [a, b](const Tensor& dy, const std::vector<bool>& need) {
        return std::vector<Tensor>{need[0] ? sum_to(dy * b, a.shape()) : Tensor(),
                                   need[1] ? sum_to(dy * a, b.shape()) : Tensor()};
      },
      Saved{a, b}, BackwardOrder::AnyOrder,
      [a, b](const std::vector<Tensor>& t) {
        return !t[0].defined() ? a * t[1] : !t[1].defined() ? t[0] * b : t[0] * b + a * t[1];
      });
}

// y = a / b        da = sum_to(dy / b)      db = sum_to(-dy * a / b^2) = sum_to(-dy * y / b)
//                  ẏ = ȧ / b - a ḃ / b^2 = (ȧ - y ḃ) / b
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_kernel("div", backends::Arithmetic::Div, a, b);
  return record({"div", profile::Family::Elementwise}, y, {a, b},
                // With create_graph the same formula reads y with its history (the node's own output).
                fast_or_composed(
                    [b, y = y.detach(), sa = a.shape()](const Tensor& dy, const std::vector<bool>& need) {
                      return std::vector<Tensor>{need[0] ? sum_to(dy / b, sa) : Tensor(),
                                                 need[1] ? sum_to(-(dy * y) / b, b.shape()) : Tensor()};
                    },
                    [b, y = y.detach(), sa = a.shape()](const Tensor& dy, const std::vector<bool>& need) {
                      return std::vector<Tensor>{
                          need[0] ? sum_to(dy / b, sa) : Tensor(),
                          need[1] ? sum_to(-(dy * detail::node_output(y)) / b, b.shape()) : Tensor()};
                    }),
                Saved{b, y}, BackwardOrder::AnyOrder, [b, y](const std::vector<Tensor>& t) {
                  Tensor moved = !t[1].defined() ? t[0] : !t[0].defined() ? -(y * t[1]) : t[0] - y * t[1];
                  return spread(moved / b, y.shape());
                });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }

namespace {
// A number as a 0-d tensor matching `like`'s dtype (float ops check `like` themselves).
Tensor number_like(const char* op, double v, const Tensor& like) {
  check_floating(op, like);
  return scalar(v, like.dtype());
}
}  // namespace

Tensor operator+(const Tensor& a, double b) { return add(a, number_like("add", b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, number_like("sub", b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, number_like("mul", b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, number_like("div", b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(number_like("add", a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(number_like("sub", a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(number_like("mul", a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(number_like("div", a, b), b); }

Tensor Tensor::broadcast_to(const Shape& shape) const { return ag::broadcast_to(*this, shape); }

namespace {

// self = f(self, other), written into self's own storage, so every handle to self sees it and a
// leaf stays the same leaf. f is the out-of-place op (the math is written once); its result
// is copied in. The write bumps the storage's version, so a graph that saved self for backward
// refuses to use the changed values.
Tensor& update_in_place(const char* op, Tensor& self, const Tensor& other, Tensor (*f)(const Tensor&, const Tensor&)) {
  check_same_floating(op, self, other);
  detail::check_in_place_update(op, self);
  if (broadcast_shapes(op, self.shape(), other.shape()) != self.shape())
    throw_invalid(op, "other of shape {} does not broadcast to this tensor's shape {}", shape_str(other.shape()),
                  shape_str(self.shape()));
  Tensor result;
  {
    NoGradGuard no_grad;
    result = f(self, other);
  }
  std::memcpy(self.mutable_raw_data(), result.mutable_raw_data(),
              static_cast<std::size_t>(result.numel()) * dtype_size(self.dtype()));
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other) { return update_in_place("add_", *this, other, ag::add); }
Tensor& Tensor::sub_(const Tensor& other) { return update_in_place("sub_", *this, other, ag::sub); }
Tensor& Tensor::mul_(const Tensor& other) { return update_in_place("mul_", *this, other, ag::mul); }
Tensor& Tensor::mul_(double other) { return mul_(number_like("mul_", other, *this)); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined("copy_", *this);
  check_defined("copy_", src);
  detail::check_in_place_update("copy_", *this);
  Tensor values;
  {
    NoGradGuard no_grad;
    values = src.dtype() == dtype() ? src : src.to(dtype());
    if (values.shape() != shape()) {
      if (src.dim() > dim() || broadcast_shapes("copy_", src.shape(), shape()) != shape())
        throw_invalid("copy_", "src of shape {} does not broadcast to this tensor's shape {}", shape_str(src.shape()),
                      shape_str(shape()));
      if (!is_floating(dtype()))
        throw_invalid("copy_", "the {} tensor of shape {} is copied only from one of its shape, got {}",
                      dtype_name(dtype()), shape_str(shape()), shape_str(src.shape()));
      values = ag::broadcast_to(values, shape());
    }
  }
  if (numel() == 0) return *this;
  // memmove: src may be this tensor itself, or share its storage.
  std::memmove(mutable_raw_data(), values.raw_data(), static_cast<std::size_t>(numel()) * dtype_size(dtype()));
  return *this;
}

// --- the comparisons (binary.h) ---------------------------------------------------------------
//
//   y[o] = a[ia] op b[ib]      op one of == != < <= > >=,  y bool,  the loop the backend's compare
//
// No rule is recorded: the result is constant between the points where it jumps, so its
// derivative is 0 wherever it has one, and a bool carries no gradient.
namespace {

using backends::Comparison;

Tensor compare(const char* op, Comparison which, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  if (a.dtype() != b.dtype()) {
    // The hint names the type that holds both: a float over int64, int64 over bool.
    DType wider = is_floating(a.dtype()) ? a.dtype() : is_floating(b.dtype()) ? b.dtype() : kInt64;
    throw_invalid(op,
                  "dtypes differ: {} with shape {} and {} with shape {} (compare tensors of one dtype: convert one "
                  "with .to({}))",
                  dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()),
                  dtype_constant(wider));
  }
  profile::Scope scope(profile::Family::Elementwise);
  Shape shape = broadcast_shapes(op, a.shape(), b.shape());
  Tensor y = detail::empty_for(op, shape, kBool);
  if (y.numel() == 0) return y;  // nothing to compare (and the other sizes may be huge)
  auto sa = broadcast_strides(a.shape(), shape), sb = broadcast_strides(b.shape(), shape);
  // ag::DType and backends::Scalar list the same types in the same order (kernels/table.h).
  current_backend().compare(which, static_cast<backends::Scalar>(a.dtype()), broadcast_sizes(shape, sa, &sb),
                            a.raw_data(), b.raw_data(), y.mutable_data_ptr<bool>());
  return y;
}

// A number as a 0-d tensor of `like`'s dtype: rounded to a float dtype, or, for int64 and bool,
// only a number that dtype holds exactly.
Tensor number_to_compare(const char* op, double v, const Tensor& like) {
  check_defined(op, like);
  DType dtype = like.dtype();
  if (dtype == kInt64 && !(std::trunc(v) == v && v >= -0x1p63 && v < 0x1p63))
    throw_invalid(op,
                  "{} is not an int64 value, so an int64 tensor (shape {}) cannot be compared with it exactly; "
                  "compare x.to(ag::kFloat64) instead",
                  v, shape_str(like.shape()));
  if (dtype == kBool && v != 0.0 && v != 1.0)
    throw_invalid(op, "a bool tensor (shape {}) compares with 0 or 1 only, got {}", shape_str(like.shape()), v);
  return scalar(v, dtype);
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", Comparison::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", Comparison::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", Comparison::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", Comparison::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", Comparison::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", Comparison::Ge, a, b); }
Tensor eq(const Tensor& a, double b) { return eq(a, number_to_compare("eq", b, a)); }
Tensor ne(const Tensor& a, double b) { return ne(a, number_to_compare("ne", b, a)); }
Tensor lt(const Tensor& a, double b) { return lt(a, number_to_compare("lt", b, a)); }
Tensor le(const Tensor& a, double b) { return le(a, number_to_compare("le", b, a)); }
Tensor gt(const Tensor& a, double b) { return gt(a, number_to_compare("gt", b, a)); }
Tensor ge(const Tensor& a, double b) { return ge(a, number_to_compare("ge", b, a)); }

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
// A number first: the same comparison read from the other side (a < x is x > a).
Tensor operator==(double a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(double a, const Tensor& b) { return ne(b, a); }
Tensor operator<(double a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(double a, const Tensor& b) { return ge(b, a); }
Tensor operator>(double a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(double a, const Tensor& b) { return le(b, a); }

// --- maximum, minimum and clamp ------------------------------------------------------------
//
//   y = maximum(a, b)      da = sum_to(dy s_a)      db = sum_to(dy s_b)      ẏ = ȧ s_a + ḃ s_b
//
// s_a, the share of the slope that a gets: 1 where a wins, 0 where it loses, and 1/2 on a tie,
// where the one-sided slopes are 1 and 0 (PyTorch splits a tie the same way). The shares come
// from comparisons, constant between the points where they jump, so under create_graph the
// products above are differentiated through a and b alone. minimum mirrors it.
namespace {

Tensor extremum(const char* op, backends::Arithmetic which, const Tensor& a, const Tensor& b) {
  Tensor y = broadcast_kernel(op, which, a, b);
  const bool is_max = which == backends::Arithmetic::Maximum;
  // a loses where the other side is strictly better; a NaN loses nothing, as in PyTorch.
  auto shares = [a, b, is_max]() {
    Tensor tie = eq(a, b);
    Tensor a_loses = is_max ? lt(a, b) : gt(a, b), b_loses = is_max ? gt(a, b) : lt(a, b);
    return std::pair{logical_not(a_loses).to(a.dtype()).masked_fill(tie, 0.5),
                     logical_not(b_loses).to(a.dtype()).masked_fill(tie, 0.5)};
  };
  return record(
      {op, profile::Family::Elementwise}, y, {a, b},
      [a, b, shares](const Tensor& dy, const std::vector<bool>& need) {
        auto [sa, sb] = shares();
        return std::vector<Tensor>{need[0] ? sum_to(dy * sa, a.shape()) : Tensor(),
                                   need[1] ? sum_to(dy * sb, b.shape()) : Tensor()};
      },
      Saved{a, b}, BackwardOrder::AnyOrder,
      [shares](const std::vector<Tensor>& t) {
        auto [sa, sb] = shares();
        return !t[0].defined() ? t[1] * sb : !t[1].defined() ? t[0] * sa : t[0] * sa + t[1] * sb;
      });
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("maximum", backends::Arithmetic::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("minimum", backends::Arithmetic::Minimum, a, b); }

// y = min(max(x, lo), hi): x where lo <= x <= hi, else the bound.   dx = dy there, 0 elsewhere.
// Two masked_fills, whose rule is that one: the gradient stops where a bound replaced x. The
// upper mask reads the lower fill's result, so that with lo > hi everything becomes hi.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_floating("clamp", x);
  if (!min && !max) throw_invalid("clamp", "give min, max or both (x has shape {})", shape_str(x.shape()));
  if ((min && std::isnan(*min)) || (max && std::isnan(*max)))
    throw_invalid("clamp", "a bound is NaN (min {}, max {}): it would turn every element into NaN",
                  min ? fmt::format("{}", *min) : "none", max ? fmt::format("{}", *max) : "none");
  Tensor y = x;
  if (min) y = masked_fill(y, lt(y, *min), *min);
  if (max) y = masked_fill(y, gt(y, *max), *max);
  return y;
}
Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::nullopt); }
Tensor clamp_max(const Tensor& x, double max) { return clamp(x, std::nullopt, max); }

Tensor Tensor::maximum(const Tensor& other) const { return ag::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return ag::minimum(*this, other); }
Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const { return ag::clamp(*this, min, max); }
Tensor Tensor::clamp_min(double min) const { return ag::clamp_min(*this, min); }
Tensor Tensor::clamp_max(double max) const { return ag::clamp_max(*this, max); }

Tensor Tensor::eq(const Tensor& other) const { return ag::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return ag::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return ag::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return ag::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return ag::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return ag::ge(*this, other); }
Tensor Tensor::eq(double other) const { return ag::eq(*this, other); }
Tensor Tensor::ne(double other) const { return ag::ne(*this, other); }
Tensor Tensor::lt(double other) const { return ag::lt(*this, other); }
Tensor Tensor::le(double other) const { return ag::le(*this, other); }
Tensor Tensor::gt(double other) const { return ag::gt(*this, other); }
Tensor Tensor::ge(double other) const { return ag::ge(*this, other); }

}  // namespace ag
