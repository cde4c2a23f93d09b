// The indexing ops of ops/indexing.h. Each checks its index, then calls its backend's loop
// (kernels/table.h: kernels/cpu/along_dim.cpp, kernels/naive/along_dim.cpp); the rules below
// are the four ops again, each the adjoint of its pair.
#include "indexing.h"

#include <algorithm>

#include "../autograd/dispatch.h"
#include "../autograd/node.h"
#include "../runtime/profile.h"
#include "dim_layout.h"
#include "route.h"
#include "shape.h"

namespace ag {

namespace {

void check_index(const char* op, const Tensor& index, std::int64_t size, std::int64_t dim, const Shape& x_shape) {
  check_defined(op, index);
  if (index.dtype() != kInt64)
    throw_invalid(op, "index must be int64, got {} with shape {}", dtype_name(index.dtype()), shape_str(index.shape()));
  const auto* at = index.data_ptr<std::int64_t>();
  for (std::int64_t p = 0; p < index.numel(); ++p)
    if (at[p] < 0 || at[p] >= size)
      throw_invalid(op, "index {} at position {} is outside 0..{} (dim {} of shape {})", at[p], p, size - 1, dim,
                    shape_str(x_shape));
}

// The shape with dim's size replaced by m.
Shape with_size(Shape shape, std::int64_t dim, std::int64_t m) {
  shape[static_cast<std::size_t>(dim)] = m;
  return shape;
}

// gather's and scatter_add's index: x's rank and x's sizes in every dim but dim.
void check_gather_shape(const char* op, const Shape& x_shape, std::int64_t dim, const Shape& index_shape,
                        const char* what) {
  bool ok = index_shape.size() == x_shape.size();
  for (std::size_t d = 0; ok && d < x_shape.size(); ++d)
    ok = static_cast<std::int64_t>(d) == dim || index_shape[d] == x_shape[d];
  if (!ok)
    throw_invalid(op, "{} of shape {} must match {} in every dim but dim {}", what, shape_str(index_shape),
                  shape_str(x_shape), dim);
}

}  // namespace

// y[o, j, i] = x[o, idx[j], i]       dx = index_add(zeros, dim, idx, dy)       ẏ = index_select(ẋ)
// Elements are moved, not computed, so any dtype is picked (int64 token ids too); a float x
// gets the rule.
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index) {
  profile::Scope scope(profile::Family::Reduction);
  check_defined("index_select", x);
  DimLayout l = dim_layout("index_select", x.shape(), dim);
  dim = normalize_dim("index_select", dim, x.dim());
  check_defined("index_select", index);
  if (index.dim() != 1) throw_invalid("index_select", "index must be 1-d, got shape {}", shape_str(index.shape()));
  check_index("index_select", index, l.n, dim, x.shape());
  std::int64_t m = index.numel();
  Tensor y = detail::empty_for("index_select", with_size(x.shape(), dim, m), x.dtype());
  if (y.numel() != 0)
    current_backend().select_along(l.sizes(), m, static_cast<std::int64_t>(dtype_size(x.dtype())), x.raw_data(),
                                   index.data_ptr<std::int64_t>(), y.mutable_raw_data());
  if (!is_floating(x.dtype())) return y;
  return record(
      {"index_select", profile::Family::Reduction}, y, {x},
      [dim, index, x_shape = x.shape()](const Tensor& dy, const std::vector<bool>&) {
        return std::vector<Tensor>{index_add(zeros(x_shape, dy.dtype()), dim, index, dy)};
      },
      Saved{index}, BackwardOrder::AnyOrder,
      [dim, index](const std::vector<Tensor>& t) { return index_select(t[0], dim, index); });
}

// y = s; y[o, idx[j], i] += src[o, j, i]      ds = dy      dsrc = index_select(dy, dim, idx)
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  profile::Scope scope(profile::Family::Reduction);
  check_same_floating("index_add", self, src);
  DimLayout l = dim_layout("index_add", self.shape(), dim);
  dim = normalize_dim("index_add", dim, self.dim());
  if (index.defined() && index.dim() != 1)
    throw_invalid("index_add", "index must be 1-d, got shape {}", shape_str(index.shape()));
  check_index("index_add", index, l.n, dim, self.shape());
  std::int64_t m = index.numel();
  if (src.shape() != with_size(self.shape(), dim, m))
    throw_invalid("index_add", "src of shape {} must be self's shape {} with {} in dim {}", shape_str(src.shape()),
                  shape_str(self.shape()), m, dim);
  Tensor y = self.detach().clone();
  if (src.numel() != 0)
    dispatch_floating(self.dtype(), "index_add", [&](auto tag) {
      using T = decltype(tag);
      current_backend().table<T>().index_add(l.sizes(), m, src.data_ptr<T>(), index.data_ptr<std::int64_t>(),
                                             y.mutable_data_ptr<T>());
    });
  return record(
      {"index_add", profile::Family::Reduction}, y, {self, src},
      [dim, index](const Tensor& dy, const std::vector<bool>& need) {
        return std::vector<Tensor>{need[0] ? dy : Tensor(), need[1] ? index_select(dy, dim, index) : Tensor()};
      },
      Saved{index}, BackwardOrder::AnyOrder,
      [dim, index, shape = self.shape()](const std::vector<Tensor>& t) {
        Tensor base = t[0].defined() ? t[0] : zeros(shape, t[1].dtype());
        return t[1].defined() ? index_add(base, dim, index, t[1]) : base;
      });
}

// y[o, j, i] = x[o, idx[o, j, i], i]       dx = scatter_add(zeros, dim, idx, dy)       ẏ = gather(ẋ)
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index) {
  profile::Scope scope(profile::Family::Reduction);
  check_floating("gather", x);
  DimLayout l = dim_layout("gather", x.shape(), dim);
  dim = normalize_dim("gather", dim, x.dim());
  check_defined("gather", index);
  check_gather_shape("gather", x.shape(), dim, index.shape(), "index");
  check_index("gather", index, l.n, dim, x.shape());
  std::int64_t m = index.size(dim);
  Tensor y = detail::empty_for("gather", index.shape(), x.dtype());
  if (y.numel() != 0)
    dispatch_floating(x.dtype(), "gather", [&](auto tag) {
      using T = decltype(tag);
      current_backend().table<T>().gather(l.sizes(), m, x.data_ptr<T>(), index.data_ptr<std::int64_t>(),
                                          y.mutable_data_ptr<T>());
    });
  return record(
      {"gather", profile::Family::Reduction}, y, {x},
      [dim, index, x_shape = x.shape()](const Tensor& dy, const std::vector<bool>&) {
        return std::vector<Tensor>{scatter_add(zeros(x_shape, dy.dtype()), dim, index, dy)};
      },
      Saved{index}, BackwardOrder::AnyOrder,
      [dim, index](const std::vector<Tensor>& t) { return gather(t[0], dim, index); });
}

// y = s; y[o, idx[o, j, i], i] += src[o, j, i]      ds = dy      dsrc = gather(dy, dim, idx)
Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  profile::Scope scope(profile::Family::Reduction);
  check_same_floating("scatter_add", self, src);
  DimLayout l = dim_layout("scatter_add", self.shape(), dim);
  dim = normalize_dim("scatter_add", dim, self.dim());
  check_defined("scatter_add", index);
  check_gather_shape("scatter_add", self.shape(), dim, index.shape(), "index");
  if (src.shape() != index.shape())
    throw_invalid("scatter_add", "src of shape {} must have index's shape {}", shape_str(src.shape()),
                  shape_str(index.shape()));
  check_index("scatter_add", index, l.n, dim, self.shape());
  std::int64_t m = index.size(dim);
  Tensor y = self.detach().clone();
  if (src.numel() != 0)
    dispatch_floating(self.dtype(), "scatter_add", [&](auto tag) {
      using T = decltype(tag);
      current_backend().table<T>().scatter_add(l.sizes(), m, src.data_ptr<T>(), index.data_ptr<std::int64_t>(),
                                               y.mutable_data_ptr<T>());
    });
  return record(
      {"scatter_add", profile::Family::Reduction}, y, {self, src},
      [dim, index](const Tensor& dy, const std::vector<bool>& need) {
        return std::vector<Tensor>{need[0] ? dy : Tensor(), need[1] ? gather(dy, dim, index) : Tensor()};
      },
      Saved{index}, BackwardOrder::AnyOrder,
      [dim, index, shape = self.shape()](const std::vector<Tensor>& t) {
        Tensor base = t[0].defined() ? t[0] : zeros(shape, t[1].dtype());
        return t[1].defined() ? scatter_add(base, dim, index, t[1]) : base;
      });
}

// Composed: each tensor gains a size-1 dim at `dim`, and cat joins them along it; cat's and
// unsqueeze's rules give the gradient.
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  if (tensors.empty()) throw_invalid("stack", "needs at least one tensor");
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    check_defined("stack", tensors[t]);
    if (tensors[t].shape() != tensors[0].shape())
      throw_invalid("stack", "tensor {} has shape {}, tensor 0 has {}: stacked tensors share one shape", t,
                    shape_str(tensors[t].shape()), shape_str(tensors[0].shape()));
  }
  dim = normalize_dim("stack", dim, tensors[0].dim() + 1);
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, dim));
  return cat(parts, dim);
}

Tensor randperm(std::int64_t n, Generator& generator) {
  if (n < 0) throw_invalid("randperm", "n must be non-negative, got {}", n);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  // Fisher-Yates: position i takes one of the positions 0..i still unplaced, each equally likely.
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(generator.integer(0, i + 1))]);
  return from_vector(order, {n});
}

Tensor randperm(std::int64_t n) { return randperm(n, default_generator()); }

Tensor Tensor::index_select(std::int64_t dim, const Tensor& index) const { return ag::index_select(*this, dim, index); }
Tensor Tensor::gather(std::int64_t dim, const Tensor& index) const { return ag::gather(*this, dim, index); }

// x[idx] along dim 0, idx of any shape: the result is idx's shape followed by x's other sizes.
Tensor Tensor::index(const Tensor& idx) const {
  check_defined("index", *this);
  check_defined("index", idx);
  if (dim() == 0) throw_invalid("index", "a 0-d tensor has no dim to index");
  Shape shape = idx.shape();
  shape.insert(shape.end(), this->shape().begin() + 1, this->shape().end());
  return ag::index_select(*this, 0, idx.reshape({-1})).reshape(shape);
}

}  // namespace ag
