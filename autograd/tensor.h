// ag::Tensor: an n-dimensional array that remembers how it was computed.
//
// A Tensor is a cheap handle (a shared pointer) to a TensorImpl. Copying a Tensor copies the
// handle, not the numbers. Storage is always contiguous and row-major: element (i, j) of a
// [R, C] tensor sits at offset i * C + j.
//
// Autograd state lives next to the data:
//   requires_grad  whether gradients should flow to this tensor
//   grad           the accumulated gradient (leaves only), same shape and dtype
//   grad_fn        the graph node that produced this tensor (null for leaves)
//
// The graph points from outputs to inputs only (output -> node -> inputs' nodes), so there are
// no reference cycles: dropping the last handle to a loss frees the whole graph behind it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dtype.h"

namespace ag {

using Shape = std::vector<std::int64_t>;

// "[2, 3]": how shapes appear in every message.
std::string shape_str(const Shape& shape);
// Product of the sizes; throws if a size is negative or the product overflows int64.
std::int64_t shape_numel(const Shape& shape, std::string_view op = "tensor");
// The bytes a tensor of `shape` and `dtype` takes. Throws std::length_error, naming `op`, the
// shape and the bytes, when no allocation could hold it (more than PTRDIFF_MAX bytes, or more
// than this machine's memory and swap together).
std::size_t shape_nbytes(const Shape& shape, DType dtype, std::string_view op = "tensor");

// A block of bytes, 64-byte aligned (so BLAS and vector loops get aligned rows).
class Storage {
 public:
  explicit Storage(std::size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }

  // Counts the writes made in place: every mutable access to the data (Tensor::mutable_data_ptr
  // and mutable_raw_data, hence every optimizer step and in-place update) adds one.
  // An op saving this storage for backward notes the count, and backward refuses to run if it
  // has moved since (docs/autograd.md, "In-place changes").
  std::uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_;
  std::size_t nbytes_;
  std::atomic<std::uint64_t> version_{0};
};

class Node;
class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  DType dtype = kFloat32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // leaves only
  std::shared_ptr<Node> grad_fn;     // null for leaves and for tensors made without grad
  // Called when a backward pass has added its last gradient into `grad` (leaves only; see
  // Tensor::register_post_accumulate_grad_hook), by handle.
  std::vector<std::pair<std::uint64_t, std::function<void(const Tensor&)>>> post_accumulate_hooks;
  // Forward mode (forward.h): the tangent, valid only while the level that gave it lives.
  std::shared_ptr<TensorImpl> tangent;
  std::uint64_t tangent_level = 0;
  std::uint64_t tangent_version = 0;  // the storage's version when the tangent was given

  TensorImpl(std::shared_ptr<Storage> storage, Shape shape, DType dtype);
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;
};

enum class GeluApproximation { None, Tanh };

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: no data; defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata -------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t dim) const;  // negative dims count from the end
  std::int64_t numel() const;
  DType dtype() const;

  // --- element access (the dtype must match T) --------------------------------------------
  // PyTorch's split: data_ptr and const_data_ptr read; mutable_data_ptr is the one way to
  // write, and it bumps the storage's version, so a value saved for backward cannot change
  // unseen (a backward that reads it then refuses to run). A read never counts as a write.
  template <Element T>
  const T* data_ptr() const;
  template <Element T>
  const T* const_data_ptr() const {
    return data_ptr<T>();
  }
  template <Element T>
  T* mutable_data_ptr();
  template <Element T>
  T item() const;       // the single element of a one-element tensor
  double item() const;  // the same, converted to double
  template <Element T>
  T at(std::initializer_list<std::int64_t> index) const;
  template <Element T>
  std::vector<T> to_vector() const;

  // A copy with another dtype. Between float32 and float64 the gradient flows back (cast
  // back to the source dtype); to int64 or bool the result is cut from the graph.
  Tensor to(DType dtype) const;
  Tensor clone() const;  // a copy of the data, differentiable

  // --- autograd ---------------------------------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as a parameter to differentiate with respect to. Float dtypes only.
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;
  // How many times this tensor's storage has been written in place (Storage::version).
  std::uint64_t version() const;
  // The accumulated gradient. For a leaf it is undefined until a backward pass reaches it
  // (optimizers skip such parameters, as in PyTorch). A tensor an op computed keeps no gradient
  // unless retain_grad() was called on it before backward(); without that, grad() throws, and
  // the message says why: most often the tensor was meant to be a parameter but a manual update
  // (w = w - lr * w.grad()) recorded it as the output of 'sub'.
  Tensor grad() const;
  // Asks backward() to keep this non-leaf's gradient in grad(), adding up over passes like a
  // leaf's. Call it before backward(). A no-op on a leaf that requires grad, which keeps its
  // gradient anyway; on a tensor that does not require grad it throws, as no gradient will come.
  Tensor& retain_grad();
  bool retains_grad() const;
  void zero_grad();  // forgets the accumulated gradient
  // Calls hook(*this) once per backward pass, when the pass has added the last of its
  // gradients into this leaf's .grad: every op of the graph that used the leaf has run. Other
  // ops of the pass may still be running, so a hook can start work on the finished gradient
  // early (data-parallel training starts reducing it: distributed/data_parallel.h). As PyTorch's
  // register_post_accumulate_grad_hook; only for a leaf that requires grad. The hook runs on
  // the thread running backward. Returns a handle for remove_post_accumulate_grad_hook.
  std::uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook);
  void remove_post_accumulate_grad_hook(std::uint64_t handle);
  std::shared_ptr<Node> grad_fn() const;
  // Same data, cut from the graph: no grad_fn, requires_grad false.
  Tensor detach() const;
  // Makes this leaf hold `source`'s data, shape and dtype (shared, not copied), keeping its
  // identity: every handle to it sees the change. Drops the gradient. For Module::to() and
  // checkpoint loading; not recorded in any graph.
  void set_data(const Tensor& source);
  // Reverse-mode differentiation from this tensor. Without `gradient` the tensor must hold
  // one element (a loss); with it, `gradient` is dL/d(this) and has this tensor's shape.
  // The graph's saved tensors are freed afterwards unless `retain_graph` is true (left unset,
  // it follows create_graph). With `create_graph` the pass is recorded too: the gradients it
  // adds into .grad() are tensors of the graph, which can be differentiated again (ag::grad in
  // autograd/grad.h is the usual way to do that). A .grad() with a graph refers back to the
  // parameter through its graph, a cycle that only zero_grad() ends (docs/higher_order.md).
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;

  // --- ops: thin methods over the free functions in ops/ ----------------------------------
  Tensor operator-() const;
  Tensor pow(double exponent) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor relu() const;
  Tensor abs() const;
  Tensor sigmoid() const;
  Tensor gelu(GeluApproximation approximate = GeluApproximation::None) const;
  Tensor sum() const;
  Tensor sum(std::int64_t dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(std::int64_t dim, bool keepdim = false) const;
  Tensor max() const;
  std::tuple<Tensor, Tensor> max(std::int64_t dim, bool keepdim = false) const;  // values, indices
  Tensor amax(std::int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(std::int64_t dim, bool keepdim = false) const;  // values, indices
  Tensor amin(std::int64_t dim, bool keepdim = false) const;
  Tensor argmin(std::int64_t dim, bool keepdim = false) const;
  Tensor softmax(std::int64_t dim) const;
  Tensor log_softmax(std::int64_t dim) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  // this where `condition` is true, other elsewhere: ag::where(condition, *this, other).
  Tensor where(const Tensor& condition, const Tensor& other) const;
  Tensor where(const Tensor& condition, double other) const;
  // The larger and smaller of this and other, elementwise; this held within [min, max].
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor clamp(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;
  // Picking by an int64 index (ops/indexing.h): index_select and gather along `dim`, and
  // index(idx), which is this[idx] along dim 0 for an idx of any shape (idx's shape followed
  // by this tensor's other sizes), as libtorch's x.index({idx}).
  Tensor index_select(std::int64_t dim, const Tensor& index) const;
  Tensor gather(std::int64_t dim, const Tensor& index) const;
  Tensor index(const Tensor& idx) const;
  Tensor reshape(Shape shape) const;
  // libtorch's name for a reshape that shares the data. Storage here is always contiguous, so
  // every reshape already is such a view and view() is reshape under that name: it never
  // fails for a layout reason (transpose and permute copy, so their results are contiguous).
  Tensor view(Shape shape) const;
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  // The transpose of a matrix: transpose(0, 1) for 2-D, the tensor itself as a copy-free
  // reshape for 0-d and 1-d (as in PyTorch); more dims throw, pointing to transpose().
  Tensor t() const;
  Tensor permute(std::vector<std::int64_t> dims) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor broadcast_to(const Shape& shape) const;
  Tensor matmul(const Tensor& other) const;
  // The comparisons of ops/binary.h, a bool tensor each (also as operators: x == y, x < 0.5).
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(double other) const;
  Tensor lt(double other) const;
  Tensor le(double other) const;
  Tensor gt(double other) const;
  Tensor ge(double other) const;

  // --- in place ---------------------------------------------------------------------------
  // this += other and this -= other, other broadcasting to this tensor's shape and dtype. Never
  // recorded in a graph: for updates such as a hand-written optimizer step,
  //   { ag::NoGradGuard no_grad; w.sub_(lr * w.grad()); }
  // which keeps w the same leaf. A tensor that requires grad can be changed in place only with
  // grad mode off (the change would be invisible to backward).
  Tensor& add_(const Tensor& other);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double other);
  // Every element set to value (zero_: 0), any dtype; an int64 tensor takes only a value in its range.
  Tensor& fill_(double value);
  Tensor& zero_();
  // src's values written into this tensor: src broadcasts to this shape (a float src; int64 and
  // bool ones must have this shape) and is converted to this dtype, as Tensor::to converts.
  Tensor& copy_(const Tensor& src);

  // --- low level --------------------------------------------------------------------------
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  const void* raw_data() const;
  void* mutable_raw_data();  // a write, like mutable_data_ptr

 private:
  const TensorImpl& checked(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// --- construction -----------------------------------------------------------------------
// A tensor with uninitialised values (kernels fill it before anyone reads it).
Tensor empty(const Shape& shape, DType dtype = kFloat32);
namespace detail {
// empty() for an op that names itself in the errors: a size no machine can hold throws
// std::length_error, and memory the system refuses ag::OutOfMemoryError (a std::bad_alloc),
// both naming `op`, the shape and the bytes.
Tensor empty_for(std::string_view op, const Shape& shape, DType dtype);
}  // namespace detail
Tensor zeros(const Shape& shape, DType dtype = kFloat32);
Tensor ones(const Shape& shape, DType dtype = kFloat32);
Tensor full(const Shape& shape, double value, DType dtype = kFloat32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// A 0-d tensor (shape []) holding one value.
Tensor scalar(double value, DType dtype = kFloat32);
// start, start + step, ... up to but excluding end, each start + i step computed in double.
// int64 by default, as for positions and ids; a fractional start or step needs a float dtype
// (arange(0, 1, 0.25, ag::kFloat32)), and is refused with int64 rather than rounded.
Tensor arange(double start, double end, double step = 1.0, DType dtype = kInt64);
Tensor arange(std::int64_t end, DType dtype = kInt64);
// Copies `values` into a tensor of `shape`; the dtype follows T (float, double, int64_t, bool).
template <Element T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape);
// Another integer type (int, unsigned, ...) is converted to int64, as a libtorch user's
// std::vector<int> of ids expects; a value int64 cannot hold (an unsigned one past 2^63 - 1) is
// refused, naming it.
template <std::integral T>
requires(!Element<T>) Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  std::vector<std::int64_t> wide;
  wide.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::in_range<std::int64_t>(values[i]))
      throw std::invalid_argument("from_vector: element " + std::to_string(i) + ", " + std::to_string(values[i]) +
                                  ", is past int64's range");
    wide.push_back(static_cast<std::int64_t>(values[i]));
  }
  return from_vector(wide, shape);
}
// Converts `values` to `dtype`: handy for literals, tensor({1, 2, 3, 4}, {2, 2}).
Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype = kFloat32);

}  // namespace ag
