#include "tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include <sys/sysinfo.h>

#include "../kernels/table.h"
#include "../runtime/allocator.h"
#include "../runtime/error.h"
#include "context.h"
#include "dispatch.h"
#include "forward.h"
#include "grad_mode.h"
#include "memory.h"
#include "node.h"

namespace ag {

// --- memory accounting ---------------------------------------------------------------------
// Storages and TensorImpls update memory.h's counters, which live in memory.cpp; graph nodes
// are counted by Node's constructor and destructor in node.cpp.

Storage::Storage(std::size_t nbytes) : data_(allocate_block(nbytes)), nbytes_(nbytes) {
  detail::storage_allocated(nbytes);
}

Storage::~Storage() {
  free_block(data_, nbytes_);
  detail::storage_freed(nbytes_);
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage_, Shape shape_, DType dtype_)
    : storage(std::move(storage_)), shape(std::move(shape_)), dtype(dtype_) {
  detail::tensor_created();
}

TensorImpl::~TensorImpl() { detail::tensor_destroyed(); }

// --- shapes --------------------------------------------------------------------------------

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::int64_t checked_add(std::string_view op, std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) throw_length(op, "{}: {} + {} does not fit in int64", what, a, b);
  return sum;
}

std::int64_t shape_numel(const Shape& shape, std::string_view op) {
  for (auto s : shape)
    if (s < 0) throw_invalid(op, "shape {} has a negative size", shape_str(shape));
  // A 0 anywhere makes the count 0, however large the other sizes: [2^40, 2^40, 0] is empty.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t n = 1;
  for (auto s : shape) {
    if (__builtin_mul_overflow(n, s, &n))
      throw_invalid(op, "shape {} has more elements than int64 can count", shape_str(shape));
  }
  return n;
}

namespace {
// Memory and swap together: a larger tensor could never be backed, whatever the kernel's
// overcommit setting lets malloc promise. 0 if unknown.
std::uint64_t machine_memory_bytes() {
  static const std::uint64_t bytes = [] {
    struct sysinfo info {};
    if (sysinfo(&info) != 0) return std::uint64_t{0};
    return (std::uint64_t{info.totalram} + info.totalswap) * info.mem_unit;
  }();
  return bytes;
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / double(1ULL << 30)); }
}  // namespace

std::size_t shape_nbytes(const Shape& shape, DType dtype, std::string_view op) {
  auto n = static_cast<std::uint64_t>(shape_numel(shape, op));
  std::uint64_t nbytes = 0;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()) - 64;
  if (__builtin_mul_overflow(n, dtype_size(dtype), &nbytes) || nbytes > kMax)
    throw_length(op, "shape {} of {} needs {} x {} bytes, more than any allocation can hold", shape_str(shape),
                 dtype_name(dtype), n, dtype_size(dtype));
  std::uint64_t machine = machine_memory_bytes();
  if (machine != 0 && nbytes > machine)
    throw_length(op, "shape {} of {} needs {} bytes ({}), more than this machine's memory and swap ({})",
                 shape_str(shape), dtype_name(dtype), nbytes, gib(double(nbytes)), gib(double(machine)));
  return static_cast<std::size_t>(nbytes);
}

// --- metadata ------------------------------------------------------------------------------

const TensorImpl& Tensor::checked(const char* what) const {
  if (!impl_) throw_invalid(what, "called on an undefined tensor");
  return *impl_;
}

const Shape& Tensor::shape() const { return checked("shape").shape; }

std::int64_t Tensor::size(std::int64_t d) const { return shape()[normalize_dim("size", d, dim())]; }

std::int64_t Tensor::numel() const { return shape_numel(shape()); }

DType Tensor::dtype() const { return checked("dtype").dtype; }

const void* Tensor::raw_data() const { return checked("data").storage->data(); }
void* Tensor::mutable_raw_data() {
  checked("data").storage->bump_version();
  return impl_->storage->data();
}

std::uint64_t Tensor::version() const { return checked("version").storage->version(); }

template <Element T>
const T* Tensor::data_ptr() const {
  const auto& impl = checked("data_ptr");
  if (impl.dtype != dtype_of<T>())
    throw_invalid("data_ptr", "tensor has dtype {}, asked for {}", dtype_name(impl.dtype), dtype_name(dtype_of<T>()));
  return static_cast<const T*>(impl.storage->data());
}

template <Element T>
T* Tensor::mutable_data_ptr() {
  const T* p = std::as_const(*this).data_ptr<T>();
  impl_->storage->bump_version();
  return const_cast<T*>(p);
}

template <Element T>
T Tensor::item() const {
  if (numel() != 1)
    throw_invalid("item", "needs a tensor with one element, got shape {} ({} elements)", shape_str(shape()), numel());
  return data_ptr<T>()[0];
}

double Tensor::item() const {
  if (numel() != 1)
    throw_invalid("item", "needs a tensor with one element, got shape {} ({} elements)", shape_str(shape()), numel());
  return dispatch_all(dtype(), [&](auto tag) { return static_cast<double>(data_ptr<decltype(tag)>()[0]); });
}

template <Element T>
T Tensor::at(std::initializer_list<std::int64_t> index) const {
  const Shape& s = shape();
  if (index.size() != s.size())
    throw_invalid("at", "index has {} entries but the tensor has shape {}", index.size(), shape_str(s));
  std::int64_t offset = 0;
  std::size_t d = 0;
  for (auto i : index) {
    if (i < -s[d] || i >= s[d])
      throw_invalid("at", "index {} is out of range for dim {} of size {} (shape {})", i, d, s[d], shape_str(s));
    offset = offset * s[d] + (i < 0 ? i + s[d] : i);
    ++d;
  }
  return data_ptr<T>()[offset];
}

template <Element T>
std::vector<T> Tensor::to_vector() const {
  const T* p = data_ptr<T>();
  return std::vector<T>(p, p + numel());
}

// NOLINTNEXTLINE(bugprone-macro-parentheses): T is a type name
#define AG_INSTANTIATE_ACCESS(T)                                       \
  template T* Tensor::mutable_data_ptr<T>();                           \
  template const T* Tensor::data_ptr<T>() const;                       \
  template T Tensor::item<T>() const;                                  \
  template T Tensor::at<T>(std::initializer_list<std::int64_t>) const; \
  template std::vector<T> Tensor::to_vector<T>() const;
AG_INSTANTIATE_ACCESS(float)
AG_INSTANTIATE_ACCESS(double)
AG_INSTANTIATE_ACCESS(std::int64_t)
AG_INSTANTIATE_ACCESS(bool)
#undef AG_INSTANTIATE_ACCESS

// --- conversion ----------------------------------------------------------------------------

namespace {
// ag::DType and the kernels' Scalar name the same types in the same order (kernels/table.h).
backends::Scalar scalar_of(DType t) { return static_cast<backends::Scalar>(t); }
static_assert(static_cast<int>(backends::Scalar::Float32) == static_cast<int>(kFloat32) &&
              static_cast<int>(backends::Scalar::Float64) == static_cast<int>(kFloat64) &&
              static_cast<int>(backends::Scalar::Int64) == static_cast<int>(kInt64) &&
              static_cast<int>(backends::Scalar::Bool) == static_cast<int>(kBool));

// Element-by-element static_cast from one dtype to another, by the backend's convert. A float
// that int64 cannot hold (NaN, an infinity, a number outside [-2^63, 2^63)) is refused, naming
// the first, rather than given the value the hardware happens to make of it.
void convert(const Tensor& from, Tensor& to) {
  std::int64_t bad = current_backend().convert(scalar_of(from.dtype()), scalar_of(to.dtype()), from.numel(),
                                               from.raw_data(), to.mutable_raw_data());
  if (bad < 0) return;
  double value = from.dtype() == kFloat32 ? from.data_ptr<float>()[bad] : from.data_ptr<double>()[bad];
  throw_invalid("to", "element {} of the {} tensor of shape {} is {}, which int64 cannot hold", bad,
                dtype_name(from.dtype()), shape_str(from.shape()), value);
}
}  // namespace

Tensor Tensor::to(DType target) const {
  Tensor out = empty(shape(), target);
  convert(*this, out);
  if (!is_floating(target) || !is_floating(dtype())) return out;
  // y = cast(x):  dx = cast_back(dy),  ẏ = cast(ẋ)
  DType source = dtype();
  return record(
      "to", out, {*this},
      [source](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy.to(source)}; }, Saved{},
      BackwardOrder::AnyOrder, [target](const std::vector<Tensor>& t) { return t[0].to(target); });
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype());
  std::memcpy(out.mutable_raw_data(), raw_data(), static_cast<std::size_t>(numel()) * dtype_size(dtype()));
  if (!is_floating(dtype())) return out;
  // y = x:  dx = dy,  ẏ = ẋ
  return record(
      "clone", out, {*this}, [](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy}; },
      Saved{}, BackwardOrder::AnyOrder, [](const std::vector<Tensor>& t) { return t[0].clone(); });
}

// --- autograd state ------------------------------------------------------------------------

bool Tensor::requires_grad() const { return checked("requires_grad").requires_grad; }

Tensor& Tensor::requires_grad_(bool requires_grad) {
  const auto& impl = checked("requires_grad_");
  if (requires_grad && !is_floating(impl.dtype))
    throw_invalid("requires_grad_", "only float32 and float64 tensors can require grad, got {} with shape {}",
                  dtype_name(impl.dtype), shape_str(impl.shape));
  if (impl.grad_fn)
    throw_invalid("requires_grad_",
                  "tensor with shape {} was computed by '{}' and is not a leaf; call detach() first to make a "
                  "new leaf",
                  shape_str(impl.shape), impl.grad_fn->name());
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return checked("is_leaf").grad_fn == nullptr; }

Tensor Tensor::grad() const {
  const auto& impl = checked("grad");
  // A non-leaf's gradient exists only while backward runs. PyTorch warns and returns an
  // undefined tensor here; that undefined tensor then fails far away (the next step's "mul: got
  // an undefined tensor"), so attograd says at once what happened and what to do instead.
  if (impl.grad_fn && impl.grad_fn->retained_output() != impl_)
    throw_state("grad",
                "this {} tensor of shape {} is not a leaf: it was computed by '{}', and backward() keeps gradients "
                "only for leaves. To read its gradient, call retain_grad() on it before backward(). If it is a "
                "parameter updated by hand (w = w - lr * w.grad()), that update recorded it as the output of an "
                "op: update parameters in place with grad mode off instead, "
                "{{ ag::NoGradGuard no_grad; w.sub_(lr * w.grad()); }}, so that w stays the same leaf",
                dtype_name(impl.dtype), shape_str(impl.shape), impl.grad_fn->name());
  // A leaf no backward() has reached yet has no gradient: undefined, as in PyTorch, because
  // optimizers and clipping skip such parameters (nn/optim.h). Using it in an op is what fails,
  // and check_defined's message (autograd/dispatch.h) names this case.
  return impl.grad ? Tensor(impl.grad) : Tensor();
}

Tensor& Tensor::retain_grad() {
  const TensorImpl& impl = checked("retain_grad");
  if (!impl.requires_grad)
    throw_invalid("retain_grad", "the {} tensor of shape {} does not require grad, so it will get no gradient to keep",
                  dtype_name(impl.dtype), shape_str(impl.shape));
  if (impl.grad_fn) impl.grad_fn->retain_output(impl_);
  return *this;
}

bool Tensor::retains_grad() const {
  const auto& impl = checked("retains_grad");
  return impl.grad_fn && impl.grad_fn->retained_output() == impl_;
}

void Tensor::zero_grad() {
  checked("zero_grad");
  impl_->grad.reset();
}

std::uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) {
  TensorImpl& impl = const_cast<TensorImpl&>(checked("register_post_accumulate_grad_hook"));
  if (!impl.requires_grad || impl.grad_fn)
    throw_invalid("register_post_accumulate_grad_hook",
                  "the {} tensor of shape {} is {}: only a leaf that requires grad accumulates a gradient",
                  dtype_name(impl.dtype), shape_str(impl.shape),
                  impl.grad_fn ? "the output of an op" : "a tensor that does not require grad");
  static std::atomic<std::uint64_t> next_handle{1};
  std::uint64_t handle = next_handle++;
  impl.post_accumulate_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_post_accumulate_grad_hook(std::uint64_t handle) {
  auto& hooks = const_cast<TensorImpl&>(checked("remove_post_accumulate_grad_hook")).post_accumulate_hooks;
  std::erase_if(hooks, [&](const auto& h) { return h.first == handle; });
}

std::shared_ptr<Node> Tensor::grad_fn() const { return checked("grad_fn").grad_fn; }

Tensor Tensor::detach() const {
  const auto& impl = checked("detach");
  return Tensor(std::make_shared<TensorImpl>(impl.storage, impl.shape, impl.dtype));
}

void Tensor::set_data(const Tensor& source) {
  const auto& impl = checked("set_data");
  if (!source.defined()) throw_invalid("set_data", "source is an undefined tensor");
  if (impl.grad_fn)
    throw_invalid("set_data", "tensor with shape {} was computed by '{}'; only leaves can take new data",
                  shape_str(impl.shape), impl.grad_fn->name());
  if (impl.requires_grad && !is_floating(source.dtype()))
    throw_invalid("set_data", "a tensor that requires grad cannot take {} data", dtype_name(source.dtype()));
  if (detail::live_tangent(*this, "set_data").defined())
    throw_state("set_data", "the tensor of shape {} carries a forward-mode tangent, which new data would leave stale",
                shape_str(impl.shape));
  impl_->storage = source.impl()->storage;
  impl_->shape = source.shape();
  impl_->dtype = source.dtype();
  impl_->grad.reset();
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  checked("backward");
  run_backward(*this, gradient, retain_graph.value_or(create_graph), create_graph);
}

// --- construction --------------------------------------------------------------------------

Tensor detail::empty_for(std::string_view op, const Shape& shape, DType dtype) {
  std::size_t nbytes = shape_nbytes(shape, dtype, op);
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(nbytes);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(
        fmt::format("{}: out of memory: shape {} of {} needs {} bytes ({}), which the system refused", op,
                    shape_str(shape), dtype_name(dtype), nbytes, gib(double(nbytes))));
  }
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, dtype));
}

Tensor empty(const Shape& shape, DType dtype) { return detail::empty_for("empty", shape, dtype); }

namespace {
// A value stored as int64 must be a number inside int64's range: converting anything else is
// undefined in C++, so it is refused here, as PyTorch refuses such a fill.
void check_fits(std::string_view op, double value, DType dtype) {
  if (dtype == kInt64 && !(value >= -0x1p63 && value < 0x1p63))
    throw_invalid(op, "value {} cannot be stored in int64 (it is not a number inside [-2^63, 2^63))", value);
}

Tensor filled(std::string_view op, const Shape& shape, double value, DType dtype) {
  check_fits(op, value, dtype);
  Tensor t = detail::empty_for(op, shape, dtype);
  current_backend().fill(scalar_of(dtype), value, t.numel(), t.mutable_raw_data());
  return t;
}
}  // namespace

Tensor full(const Shape& shape, double value, DType dtype) { return filled("full", shape, value, dtype); }

// Every element set to value, in this tensor's storage (so every handle and view sees it); the
// write bumps the version, so a graph that saved this tensor refuses the changed values.
Tensor& Tensor::fill_(double value) {
  check_defined("fill_", *this);
  detail::check_in_place_update("fill_", *this);
  check_fits("fill_", value, dtype());
  current_backend().fill(scalar_of(dtype()), value, numel(), mutable_raw_data());
  return *this;
}
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor zeros(const Shape& shape, DType dtype) { return filled("zeros", shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return filled("ones", shape, 1.0, dtype); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype()); }
Tensor scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0.0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw_invalid("arange", "needs finite start, end and a non-zero step, got start={} end={} step={}", start, end,
                  step);
  // An int64 or bool result holds whole numbers only: arange(0, 1, 0.25) would be four zeros.
  if (!is_floating(dtype) && (std::trunc(start) != start || std::trunc(step) != step))
    throw_invalid("arange",
                  "start={} and step={} are not both whole numbers, so the {} result cannot hold the values; "
                  "pass a float dtype: arange({}, {}, {}, ag::kFloat32)",
                  start, step, dtype_name(dtype), start, end, step);
  double count = std::ceil((end - start) / step);
  // Converting a count past int64's range is undefined behaviour, so it is rejected first.
  if (count >= 0x1p63)
    throw_invalid("arange", "start={} end={} step={} gives {} elements, more than int64 can count", start, end, step,
                  count);
  auto n = static_cast<std::int64_t>(std::max(0.0, count));
  if (n > 0) {  // the values run from the first to the last, so those two must fit
    check_fits("arange", start, dtype);
    check_fits("arange", start + static_cast<double>(n - 1) * step, dtype);
  }
  Tensor t = detail::empty_for("arange", {n}, dtype);
  current_backend().arange(scalar_of(dtype), start, step, n, t.mutable_raw_data());
  return t;
}

Tensor arange(std::int64_t end, DType dtype) { return arange(0.0, static_cast<double>(end), 1.0, dtype); }

template <Element T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  auto n = shape_numel(shape, "from_vector");
  if (static_cast<std::int64_t>(values.size()) != n)
    throw_invalid("from_vector", "{} values do not fill shape {} ({} elements)", values.size(), shape_str(shape), n);
  Tensor t = detail::empty_for("from_vector", shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.mutable_data_ptr<T>());
  return t;
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor from_vector<std::int64_t>(const std::vector<std::int64_t>&, const Shape&);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&);

Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  auto n = shape_numel(shape, "tensor");
  if (static_cast<std::int64_t>(values.size()) != n)
    throw_invalid("tensor", "{} values do not fill shape {} ({} elements)", values.size(), shape_str(shape), n);
  for (double v : values) check_fits("tensor", v, dtype);
  Tensor t = detail::empty_for("tensor", shape, dtype);
  current_backend().convert(backends::Scalar::Float64, scalar_of(dtype), n, values.data(), t.mutable_raw_data());
  return t;
}

}  // namespace ag
