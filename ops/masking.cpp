#include "masking.h"

#include "../autograd/dispatch.h"
#include "../autograd/node.h"
#include "../kernels/table.h"
#include "../runtime/profile.h"
#include "binary.h"
#include "route.h"

namespace ag {

namespace {

void check_bool(std::string_view op, const Tensor& mask) {
  check_defined(op, mask);
  if (mask.dtype() != kBool)
    throw_invalid(op, "mask must be bool, got {} with shape {}", dtype_name(mask.dtype()), shape_str(mask.shape()));
}

// The mask broadcast to `shape`, as a contiguous bool tensor (bytes 0 or 1).
Tensor expand_mask(std::string_view op, const Tensor& mask, const Shape& shape) {
  if (mask.shape() == shape) return mask;
  if (mask.dim() > static_cast<std::int64_t>(shape.size()) || broadcast_shapes(op, mask.shape(), shape) != shape)
    throw_invalid(op, "mask of shape {} does not broadcast to shape {}", shape_str(mask.shape()), shape_str(shape));
  // Broadcast through float: broadcast_to is a float op, and 0/1 survive the round trip exactly.
  return broadcast_to(mask.to(kFloat32), shape).to(kBool);
}

}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  profile::Scope scope(profile::Family::Elementwise);
  check_floating("masked_fill", x);
  check_bool("masked_fill", mask);
  const Tensor m = expand_mask("masked_fill", mask, x.shape());  // const: reading it is not a write
  Tensor y = empty_like(x);
  dispatch_floating(x.dtype(), "masked_fill", [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().masked_fill(x.numel(), x.data_ptr<T>(), m.data_ptr<bool>(), value,
                                             y.mutable_data_ptr<T>());
  });
  // y_i = mask_i ? value : x_i:   dx_i = mask_i ? 0 : dy_i,   ẏ_i = mask_i ? 0 : ẋ_i.
  // The mask gets no gradient. Both rules are this op again, with 0: under create_graph that
  // records the node that differentiates them again.
  return record(
      {"masked_fill", profile::Family::Elementwise}, y, {x},
      [m](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{masked_fill(dy, m, 0.0)}; },
      Saved{m}, BackwardOrder::AnyOrder, [m](const std::vector<Tensor>& t) { return masked_fill(t[0], m, 0.0); });
}

// y = c ? a : b, over the broadcast shape; a and b are first broadcast to it (broadcast_to, whose
// own rule sums their gradients back to their shapes), so the rules below meet one shape:
//   da = c ? dy : 0 = masked_fill(dy, !c, 0)      db = c ? 0 : dy = masked_fill(dy, c, 0)
//   ẏ = c ? ȧ : ḃ = where(c, ȧ, ḃ)
// Every rule is an op of this file: under create_graph it is differentiated again the same way.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  profile::Scope scope(profile::Family::Elementwise);
  check_bool("where", condition);
  check_same_floating("where", a, b);
  Shape shape = broadcast_shapes("where", broadcast_shapes("where", condition.shape(), a.shape()), b.shape());
  const Tensor c = expand_mask("where", condition, shape);  // const: reading it is not a write
  const Tensor not_c = logical_not(c);
  Tensor ea = a.shape() == shape ? a : broadcast_to(a, shape);
  Tensor eb = b.shape() == shape ? b : broadcast_to(b, shape);
  Tensor y = detail::empty_for("where", shape, a.dtype());
  dispatch_floating(a.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().where(y.numel(), c.data_ptr<bool>(), ea.data_ptr<T>(), eb.data_ptr<T>(),
                                       y.mutable_data_ptr<T>());
  });
  return record(
      {"where", profile::Family::Elementwise}, y, {ea, eb},
      [c, not_c](const Tensor& dy, const std::vector<bool>& need) {
        return std::vector<Tensor>{need[0] ? masked_fill(dy, not_c, 0.0) : Tensor(),
                                   need[1] ? masked_fill(dy, c, 0.0) : Tensor()};
      },
      Saved{c, not_c}, BackwardOrder::AnyOrder,
      [c, not_c](const std::vector<Tensor>& t) {
        if (!t[0].defined()) return masked_fill(t[1], c, 0.0);
        if (!t[1].defined()) return masked_fill(t[0], not_c, 0.0);
        return where(c, t[0], t[1]);
      });
}

Tensor where(const Tensor& condition, const Tensor& a, double b) {
  check_floating("where", a);
  return where(condition, a, scalar(b, a.dtype()));
}

Tensor where(const Tensor& condition, double a, const Tensor& b) {
  check_floating("where", b);
  return where(condition, scalar(a, b.dtype()), b);
}

Tensor causal_mask(std::int64_t tq, std::int64_t tk) {
  if (tq < 0 || tk < 0) throw_invalid("causal_mask", "lengths must be non-negative, got Tq={} Tk={}", tq, tk);
  Tensor mask = detail::empty_for("causal_mask", {tq, tk}, kBool);
  current_backend().causal_mask(tq, tk, mask.mutable_data_ptr<bool>());
  return mask;
}

Tensor key_padding_mask(const std::vector<std::int64_t>& lengths, std::int64_t t) {
  if (t < 0) throw_invalid("key_padding_mask", "T must be non-negative, got {}", t);
  auto b = static_cast<std::int64_t>(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] < 0 || lengths[i] > t)
      throw_invalid("key_padding_mask", "length {} of sequence {} is outside 0..{}", lengths[i], i, t);
  Tensor mask = empty({b, 1, 1, t}, kBool);
  current_backend().key_padding_mask(b, t, lengths.data(), mask.mutable_data_ptr<bool>());
  return mask;
}

Tensor logical_not(const Tensor& mask) {
  check_bool("logical_not", mask);
  Tensor out = empty_like(mask);
  current_backend().logical(backends::Logical::Not, mask.numel(), mask.data_ptr<bool>(), nullptr,
                            out.mutable_data_ptr<bool>());
  return out;
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_bool("logical_and", a);
  check_bool("logical_and", b);
  Shape shape = broadcast_shapes("logical_and", a.shape(), b.shape());
  Tensor ea = expand_mask("logical_and", a, shape), eb = expand_mask("logical_and", b, shape);
  Tensor out = empty(shape, kBool);
  current_backend().logical(backends::Logical::And, out.numel(), ea.data_ptr<bool>(), eb.data_ptr<bool>(),
                            out.mutable_data_ptr<bool>());
  return out;
}

// a or b = not (not a and not b): De Morgan, on the two loops the backend has.
Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_bool("logical_or", a);
  check_bool("logical_or", b);
  return logical_not(logical_and(logical_not(a), logical_not(b)));
}

Tensor operator~(const Tensor& mask) { return logical_not(mask); }
Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }

Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return ag::masked_fill(*this, mask, value); }
Tensor Tensor::where(const Tensor& condition, const Tensor& other) const { return ag::where(condition, *this, other); }
Tensor Tensor::where(const Tensor& condition, double other) const { return ag::where(condition, *this, other); }

}  // namespace ag
