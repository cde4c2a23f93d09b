// Shape ops. Each one's backward moves the gradient back the way the forward moved the data:
// reshape back, permute by the inverse permutation, scatter a slice into zeros, slice a cat.
#include "shape.h"

#include <numeric>

#include "../autograd/dispatch.h"
#include "../autograd/node.h"
#include "../kernels/table.h"
#include "../runtime/profile.h"
#include "dim_layout.h"
#include "route.h"

namespace ag {

namespace {

// dst[o, dst_begin + j*dst_step, :] = src[o, src_begin + j*src_step, :] for j < count, viewing
// both around `dim`: the one move behind slice, its backward, and cat, by the backend's kernel.
// Elements of any dtype are moved as bytes, never computed.
void copy_along(Tensor& dst, std::int64_t dst_begin, std::int64_t dst_step, const Tensor& src, std::int64_t src_begin,
                std::int64_t src_step, std::int64_t count, std::size_t dim) {
  profile::Scope scope(profile::Family::Reduction);
  DimLayout d = dim_layout("copy", dst.shape(), static_cast<std::int64_t>(dim));
  DimLayout s = dim_layout("copy", src.shape(), static_cast<std::int64_t>(dim));
  if (count == 0 || d.outer == 0 || d.inner == 0) return;  // nothing to move (and no null pointer to hand on)
  backends::CopySizes n{.outer = d.outer,
                        .inner = d.inner,
                        .element = static_cast<std::int64_t>(dtype_size(dst.dtype())),
                        .dst_n = d.n,
                        .dst_begin = dst_begin,
                        .dst_step = dst_step,
                        .src_n = s.n,
                        .src_begin = src_begin,
                        .src_step = src_step,
                        .count = count};
  current_backend().copy_along(n, src.raw_data(), dst.mutable_raw_data());  // one write, one version bump
}

}  // namespace

namespace {

// reshape, with `op` (reshape or view) naming the call in the errors.
Tensor reshape_for(const char* op, const Tensor& x, Shape shape) {
  check_defined(op, x);
  std::int64_t infer = -1;
  Shape known_sizes;  // every size but the -1
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw_invalid(op, "shape {} has more than one -1", shape_str(shape));
      infer = static_cast<std::int64_t>(i);
    } else if (shape[i] < 0) {
      throw_invalid(op, "shape {} has a negative size", shape_str(shape));
    } else {
      known_sizes.push_back(shape[i]);
    }
  }
  if (infer >= 0) {
    std::int64_t known = shape_numel(known_sizes, op);
    if (known == 0 || x.numel() % known != 0)
      throw_invalid(op, "cannot infer the -1 in {} for {} elements (shape {})", shape_str(shape), x.numel(),
                    shape_str(x.shape()));
    shape[static_cast<std::size_t>(infer)] = x.numel() / known;
  }
  if (shape_numel(shape, op) != x.numel())
    throw_invalid(op, "cannot reshape {} ({} elements) to {} ({} elements)", shape_str(x.shape()), x.numel(),
                  shape_str(shape), shape_numel(shape));
  Tensor y(std::make_shared<TensorImpl>(x.impl()->storage, shape, x.dtype()));
  // y = x viewed as another shape:  dx = dy viewed as x's shape
  return record(
      {"reshape", profile::Family::Reduction}, y, {x},
      [x_shape = x.shape()](const Tensor& dy, const std::vector<bool>&) {
        return std::vector<Tensor>{reshape(dy, x_shape)};
      },
      Saved{}, BackwardOrder::AnyOrder,
      [shape = y.shape()](const std::vector<Tensor>& t) { return reshape(t[0], shape); });  // ẏ: ẋ viewed likewise
}

}  // namespace

Tensor reshape(const Tensor& x, Shape shape) { return reshape_for("reshape", x, std::move(shape)); }

Tensor permute(const Tensor& x, std::vector<std::int64_t> dims) {
  check_defined("permute", x);
  profile::Scope scope(profile::Family::Reduction);
  const Shape& s = x.shape();
  std::size_t rank = s.size();
  if (dims.size() != rank)
    throw_invalid("permute", "got {} dims {} for a tensor of shape {}", dims.size(), shape_str(dims), shape_str(s));
  std::vector<bool> seen(rank, false);
  for (auto& d : dims) {
    d = normalize_dim("permute", d, static_cast<std::int64_t>(rank));
    if (seen[static_cast<std::size_t>(d)])
      throw_invalid("permute", "dims {} repeat dim {}: not a permutation", shape_str(dims), d);
    seen[static_cast<std::size_t>(d)] = true;
  }
  Shape out_shape(rank);
  std::vector<std::int64_t> in_strides(rank), src_stride(rank);
  for (std::size_t i = rank, stride = 1; i-- > 0;) {
    in_strides[i] = static_cast<std::int64_t>(stride);
    stride *= static_cast<std::size_t>(s[i]);
  }
  for (std::size_t i = 0; i < rank; ++i) {
    out_shape[i] = s[static_cast<std::size_t>(dims[i])];
    src_stride[i] = in_strides[static_cast<std::size_t>(dims[i])];  // moving along y's dim i moves x by this
  }
  Tensor y = empty(out_shape, x.dtype());
  if (y.numel() > 0)
    current_backend().permute(
        {rank, out_shape.data(), src_stride.data(), static_cast<std::int64_t>(dtype_size(x.dtype()))}, x.raw_data(),
        y.mutable_raw_data());
  // y = x with dims reordered by p:  dx = dy reordered by the inverse of p
  std::vector<std::int64_t> inverse(rank);
  for (std::size_t i = 0; i < rank; ++i) inverse[static_cast<std::size_t>(dims[i])] = static_cast<std::int64_t>(i);
  return record(
      {"permute", profile::Family::Reduction}, y, {x},
      [inverse](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{permute(dy, inverse)}; },
      Saved{}, BackwardOrder::AnyOrder, [dims](const std::vector<Tensor>& t) { return permute(t[0], dims); });
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  check_defined("transpose", x);
  std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<std::size_t>(normalize_dim("transpose", dim0, x.dim()))],
            dims[static_cast<std::size_t>(normalize_dim("transpose", dim1, x.dim()))]);
  return permute(x, dims);
}

namespace {

// slice's adjoint: zeros of x's shape with dy placed where the slice read, dx[o, b + j*step, i]
// = dy[o, j, i]. An op of its own, whose adjoint is the slice again, so that slice can be
// differentiated to any order.
Tensor unslice(const Tensor& dy, const Shape& x_shape, std::size_t d, std::int64_t b, std::int64_t step) {
  Tensor dx = zeros(x_shape, dy.dtype());
  std::int64_t n = dy.shape()[d];
  copy_along(dx, b, step, dy, 0, 1, n, d);
  return record(
      {"slice_backward", profile::Family::Reduction}, dx, {dy},
      [d, b, step, n](const Tensor& ddx, const std::vector<bool>&) {
        return std::vector<Tensor>{
            slice(ddx, static_cast<std::int64_t>(d), b, n == 0 ? b : b + (n - 1) * step + 1, step)};
      },
      Saved{}, BackwardOrder::AnyOrder,
      [x_shape, d, b, step](const std::vector<Tensor>& t) { return unslice(t[0], x_shape, d, b, step); });
}

}  // namespace

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) {
  check_defined("slice", x);
  auto d = static_cast<std::size_t>(normalize_dim("slice", dim, x.dim()));
  std::int64_t size = x.shape()[d];
  if (step <= 0) throw_invalid("slice", "step must be positive, got {}", step);
  std::int64_t b = start < 0 ? start + size : start, e = end < 0 ? end + size : end;
  if (b < 0 || e > size || b > e)
    throw_invalid("slice", "range [{}, {}) is out of bounds for dim {} of size {} (shape {})", start, end, d, size,
                  shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape[d] = (e - b + step - 1) / step;
  Tensor y = empty(out_shape, x.dtype());
  // y[o, j, i] = x[o, b + j*step, i]
  copy_along(y, 0, 1, x, b, step, out_shape[d], d);
  // dx = zeros with dy scattered back into the sliced positions
  return record(
      {"slice", profile::Family::Reduction}, y, {x},
      [x_shape = x.shape(), d, b, step](const Tensor& dy, const std::vector<bool>&) {
        return std::vector<Tensor>{unslice(dy, x_shape, d, b, step)};
      },
      Saved{}, BackwardOrder::AnyOrder,
      [dim, b, e, step](const std::vector<Tensor>& t) {
        return slice(t[0], dim, b, e, step);  // ẏ: the same slice of ẋ
      });
}

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  if (tensors.empty()) throw_invalid("cat", "needs at least one tensor");
  const Tensor& first = tensors[0];
  check_defined("cat", first);
  auto d = static_cast<std::size_t>(normalize_dim("cat", dim, first.dim()));
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    check_defined("cat", t);
    bool same_rest = t.dim() == first.dim();
    for (std::size_t i = 0; same_rest && i < out_shape.size(); ++i)
      same_rest = i == d || t.shape()[i] == first.shape()[i];
    if (!same_rest)
      throw_invalid("cat", "tensor {} has shape {} but tensor 0 has shape {}: all sizes but dim {} must agree", k,
                    shape_str(t.shape()), shape_str(first.shape()), d);
    if (t.dtype() != first.dtype())
      throw_invalid("cat", "tensor {} is {} but tensor 0 is {} ({})", k, dtype_name(t.dtype()),
                    dtype_name(first.dtype()), to_hint(first.dtype(), t.dtype()));
    std::int64_t sum = 0;  // the message only on overflow, as in split
    if (__builtin_add_overflow(out_shape[d], t.shape()[d], &sum))
      checked_add("cat", out_shape[d], t.shape()[d], "the sizes along dim " + std::to_string(d));  // throws
    out_shape[d] = sum;
  }
  Tensor y = detail::empty_for("cat", out_shape, first.dtype());
  std::vector<std::int64_t> offsets;  // where each input starts along dim
  std::int64_t offset = 0;
  for (const Tensor& t : tensors) {
    offsets.push_back(offset);
    copy_along(y, offset, 1, t, 0, 1, t.shape()[d], d);
    offset += t.shape()[d];
  }
  // y = [x_0; x_1; ...] along dim:  dx_k = the slice of dy where x_k was placed
  return record(
      {"cat", profile::Family::Reduction}, y, tensors,
      [offsets, d](const Tensor& dy, const std::vector<bool>& need) {
        std::vector<Tensor> dx(offsets.size());
        for (std::size_t k = 0; k < offsets.size(); ++k) {
          std::int64_t end = k + 1 < offsets.size() ? offsets[k + 1] : dy.shape()[d];
          if (need[k]) dx[k] = slice(dy, static_cast<std::int64_t>(d), offsets[k], end);
        }
        return dx;
      },
      Saved{}, BackwardOrder::AnyOrder,
      [tensors, dim](const std::vector<Tensor>& t) {
        std::vector<Tensor> parts(t.size());  // ẏ = [ẋ_0; ẋ_1; ...], zeros for a part without one
        for (std::size_t k = 0; k < t.size(); ++k) parts[k] = t[k].defined() ? t[k] : zeros_like(tensors[k]);
        return cat(parts, dim);
      });
}

namespace {

// The pieces of x along dim d. A slice's backward writes its gradient into zeros the size of what
// it was cut from, so n pieces cut straight from x cost n passes over x in backward: quadratic in
// T for a recurrent network's T steps. Past kStraight pieces x is cut in two first, each half in
// two, and so on: each level costs a copy of x in forward and two passes over it in backward,
// about log2(n / kStraight) levels. A few pieces (attention's q, k and v, a cell's gates) are cut
// straight, which is cheaper there.
constexpr std::size_t kStraight = 8;
std::vector<Tensor> cut(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t d) {
  std::vector<Tensor> pieces;
  if (sizes.size() <= kStraight) {
    std::int64_t start = 0;
    for (std::int64_t size : sizes) {
      pieces.push_back(slice(x, d, start, start + size));
      start += size;
    }
    return pieces;
  }
  auto middle = sizes.begin() + static_cast<std::ptrdiff_t>(sizes.size() / 2);
  std::vector<std::int64_t> left(sizes.begin(), middle), right(middle, sizes.end());
  std::int64_t at = std::accumulate(left.begin(), left.end(), std::int64_t{0});
  pieces = cut(slice(x, d, 0, at), left, d);
  for (Tensor& t : cut(slice(x, d, at, x.size(d)), right, d)) pieces.push_back(std::move(t));
  return pieces;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  check_defined("split", x);
  auto d = normalize_dim("split", dim, x.dim());
  std::int64_t total = 0;
  for (auto s : sizes) {
    if (s < 0) throw_invalid("split", "sizes {} include a negative size", shape_str(sizes));
    // The message is built only when the sum overflows: for every piece it would cost
    // O(pieces) each, quadratic for a recurrent network's T steps.
    std::int64_t sum = 0;
    if (__builtin_add_overflow(total, s, &sum)) checked_add("split", total, s, "sizes " + shape_str(sizes));  // throws
    total = sum;
  }
  if (total != x.size(d))
    throw_invalid("split", "sizes {} add up to {}, but dim {} of shape {} has size {}", shape_str(sizes), total, d,
                  shape_str(x.shape()), x.size(d));
  return cut(x, sizes, d);
}

std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim) {
  check_defined("split", x);
  if (split_size <= 0) throw_invalid("split", "split_size must be positive, got {}", split_size);
  std::int64_t n = x.size(normalize_dim("split", dim, x.dim()));
  std::vector<std::int64_t> sizes;
  for (std::int64_t start = 0; start < n; start += sizes.back()) sizes.push_back(std::min(split_size, n - start));
  if (n == 0) sizes.push_back(0);  // an empty dim splits into one empty piece
  return split(x, sizes, dim);
}

Tensor unsqueeze(const Tensor& x, std::int64_t dim) {
  check_defined("unsqueeze", x);
  std::int64_t d = normalize_dim("unsqueeze", dim, x.dim() + 1);  // one past the last is allowed
  Shape s = x.shape();
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}

Tensor squeeze(const Tensor& x, std::int64_t dim) {
  check_defined("squeeze", x);
  auto d = static_cast<std::size_t>(normalize_dim("squeeze", dim, x.dim()));
  if (x.shape()[d] != 1)
    throw_invalid("squeeze", "dim {} of shape {} has size {}, not 1", d, shape_str(x.shape()), x.shape()[d]);
  Shape s = x.shape();
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(d));
  return reshape(x, s);
}

Tensor Tensor::reshape(Shape shape) const { return ag::reshape(*this, std::move(shape)); }
Tensor Tensor::view(Shape shape) const { return reshape_for("view", *this, std::move(shape)); }
Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const { return ag::transpose(*this, dim0, dim1); }
Tensor Tensor::t() const {
  check_defined("t", *this);
  if (dim() > 2)
    throw_invalid("t",
                  "expects a tensor with at most 2 dims, got shape {}; use transpose(dim0, dim1) to swap two of "
                  "its dims",
                  shape_str(shape()));
  if (dim() < 2) return ag::reshape(*this, shape());  // a vector or a number is its own transpose
  return ag::transpose(*this, 0, 1);
}
Tensor Tensor::permute(std::vector<std::int64_t> dims) const { return ag::permute(*this, std::move(dims)); }
Tensor Tensor::slice(std::int64_t dim, std::int64_t start, std::int64_t end) const {
  return ag::slice(*this, dim, start, end);
}
Tensor Tensor::unsqueeze(std::int64_t dim) const { return ag::unsqueeze(*this, dim); }
Tensor Tensor::squeeze(std::int64_t dim) const { return ag::squeeze(*this, dim); }

}  // namespace ag
