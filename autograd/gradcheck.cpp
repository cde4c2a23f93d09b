#include "gradcheck.h"

#include <cmath>

#include "../ops/shape.h"
#include "../runtime/error.h"
#include "forward.h"
#include "generator.h"
#include "grad.h"
#include "grad_mode.h"

namespace ag {

namespace {

// "[1, 2]": the multi-index of flat offset `i` in `shape`.
std::string index_str(std::int64_t i, const Shape& shape) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return shape_str(index);
}

// L = sum(out * g), computed in double.
double weighted_sum(const Tensor& out, const Tensor& g) {
  Tensor o = out.dtype() == kFloat64 ? out : out.to(kFloat64);
  const double* po = o.data_ptr<double>();
  const double* pg = g.data_ptr<double>();
  double total = 0.0;
  for (std::int64_t i = 0, n = o.numel(); i < n; ++i) total += po[i] * pg[i];
  return total;
}

// f() as float64 values.
Tensor in_double(const Tensor& t) { return t.dtype() == kFloat64 ? t : t.to(kFloat64); }

// Forward mode, column by column: the tangent of f() when element i of tensors[k] alone moves
// with speed 1, against the central difference of f()'s whole output. Adds to `result`.
void check_columns(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                   const std::vector<std::string>& labels, const GradcheckOptions& options, GradcheckResult& result,
                   int& failures) {
  NoGradGuard no_grad;  // forward rules need no graph
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    Tensor x = tensors[k];
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) {
      Tensor column;
      Shape out_shape;
      {
        fwad::DualLevel level;
        Tensor e = zeros(x.shape(), kFloat64);
        e.mutable_data_ptr<double>()[i] = 1.0;
        detail::set_tangent(x, e);
        Tensor out = f();
        if (!out.defined() || !is_floating(out.dtype()))
          throw_invalid("gradcheck", "the function must return a float tensor");
        out_shape = out.shape();
        Tensor t = fwad::tangent(out);
        column = t.defined() ? in_double(t) : zeros(out.shape(), kFloat64);  // no tangent: it does not move
      }
      double* v = x.mutable_data_ptr<double>();
      double saved = v[i];
      v[i] = saved + options.eps;
      Tensor plus = in_double(f()).clone();  // a copy: f() may return a view of x (a reshape)
      v[i] = saved - options.eps;
      Tensor minus = in_double(f()).clone();
      v[i] = saved;
      const double *pc = column.data_ptr<double>(), *pp = plus.data_ptr<double>(), *pm = minus.data_ptr<double>();
      for (std::int64_t j = 0, m = column.numel(); j < m; ++j) {
        double numeric = (pp[j] - pm[j]) / (2.0 * options.eps);
        double abs_err = std::fabs(pc[j] - numeric);
        if (abs_err <= options.atol + options.rtol * std::fabs(numeric)) continue;  // NaN fails too
        result.passed = false;
        if (failures++ < options.max_reported)
          result.report += fmt::format(
              "gradcheck (forward mode): {} (shape {}), element {} (index {}) moving: output element {} (index "
              "{}): jvp {:.8g}, numeric {:.8g}, abs error {:.3g}, rel error {:.3g} (allowed: {:.3g} + {:.3g} * "
              "|numeric|)\n",
              labels[k], shape_str(x.shape()), i, index_str(i, x.shape()), j, index_str(j, out_shape), pc[j], numeric,
              abs_err, abs_err / std::max(std::fabs(numeric), 1e-300), options.atol, options.rtol);
      }
    }
  }
}

void check_reverse(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                   const std::vector<std::string>& labels, const GradcheckOptions& options, GradcheckResult& result,
                   int& failures);

// The check itself. `labels[k]` is how the report names tensors[k]: "input 2" (its position in
// the caller's list) or "parameter 'fc.weight'".
GradcheckResult check(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                      const std::vector<std::string>& labels, const GradcheckOptions& options) {
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    if (!t.defined() || t.dtype() != kFloat64 || !t.requires_grad() || !t.is_leaf())
      throw_invalid("gradcheck", "{} must be a float64 leaf that requires grad{}", labels[k],
                    t.defined() ? fmt::format(" (it is {} with shape {})", dtype_name(t.dtype()), shape_str(t.shape()))
                                : std::string(" (it is undefined)"));
  }
  for (Tensor t : tensors) t.zero_grad();
  GradcheckResult result{true, ""};
  int failures = 0;
  if (options.check_forward_ad) check_columns(f, tensors, labels, options, result, failures);
  if (options.check_backward_ad) check_reverse(f, tensors, labels, options, result, failures);
  if (failures > options.max_reported)
    result.report += fmt::format("gradcheck: ... {} mismatched elements in all\n", failures);
  return result;
}

// Reverse mode: the gradient of sum(f() * g) against central differences of that sum.
void check_reverse(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                   const std::vector<std::string>& labels, const GradcheckOptions& options, GradcheckResult& result,
                   int& failures) {
  // Analytic: one backward pass of L = sum(f() * g).
  Tensor out = f();
  if (!out.defined() || !is_floating(out.dtype()))
    throw_invalid("gradcheck", "the function must return a float tensor");
  Generator generator(options.seed);
  Tensor g = randn(out.shape(), generator, kFloat64);
  if (out.requires_grad()) out.backward(out.dtype() == kFloat64 ? g : g.to(out.dtype()));
  std::vector<Tensor> analytic;
  for (const Tensor& t : tensors) analytic.push_back(t.grad());

  // Numeric: central differences, one element at a time, without recording a graph.
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    Tensor x = tensors[k];
    double* v = x.mutable_data_ptr<double>();
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) {
      double saved = v[i];
      v[i] = saved + options.eps;
      double plus = weighted_sum(f(), g);
      v[i] = saved - options.eps;
      double minus = weighted_sum(f(), g);
      v[i] = saved;
      double numeric = (plus - minus) / (2.0 * options.eps);
      double a = analytic[k].defined() ? analytic[k].data_ptr<double>()[i] : 0.0;
      double abs_err = std::fabs(a - numeric);
      if (abs_err <= options.atol + options.rtol * std::fabs(numeric)) continue;  // NaN fails too
      result.passed = false;
      if (failures++ < options.max_reported)
        result.report += fmt::format(
            "gradcheck: {} (shape {}), element {} (index {}): analytic {:.8g}, numeric {:.8g}, "
            "abs error {:.3g}, rel error {:.3g} (allowed: {:.3g} + {:.3g} * |numeric|)\n",
            labels[k], shape_str(x.shape()), i, index_str(i, x.shape()), a, numeric, abs_err,
            abs_err / std::max(std::fabs(numeric), 1e-300), options.atol, options.rtol);
    }
  }
}

}  // namespace

GradcheckResult gradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                   const GradcheckOptions& options) {
  if (tensors.empty()) throw_invalid("gradcheck", "no tensors to check");
  std::vector<std::string> labels;
  for (std::size_t k = 0; k < tensors.size(); ++k) labels.push_back(fmt::format("input {}", k));
  return check(f, tensors, labels, options);
}

GradcheckResult gradcheck_in_place(const std::function<Tensor()>& f,
                                   const std::vector<std::pair<std::string, Tensor>>& named,
                                   const GradcheckOptions& options) {
  if (named.empty()) throw_invalid("gradcheck", "no tensors to check");
  std::vector<Tensor> tensors;
  std::vector<std::string> labels;
  for (const auto& [name, t] : named) {
    tensors.push_back(t);
    labels.push_back(fmt::format("parameter '{}'", name));
  }
  return check(f, tensors, labels, options);
}

GradcheckResult gradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  // float64 copies of the inputs, as fresh leaves; the caller's tensors are left alone.
  std::vector<Tensor> x, checked;
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined() || !is_floating(in.dtype())) {
      x.push_back(in);
      continue;
    }
    Tensor copy = in.detach().to(kFloat64);  // always a new buffer
    if (in.requires_grad()) {
      checked.push_back(copy.requires_grad_(true));
      labels.push_back(fmt::format("input {}", i));
    }
    x.push_back(copy);
  }
  if (checked.empty())
    throw_invalid("gradcheck", "none of the {} inputs requires grad: nothing to check", inputs.size());
  return check([&] { return f(x); }, checked, labels, options);
}

namespace {

// The first derivative a pass with create_graph computes is the one the second derivative is
// taken of; gradcheck of that gradient cannot tell if it is wrong itself (it would be a
// consistent function of x), so it is held against the gradient without create_graph, which
// gradcheck checks against finite differences. `first_derivatives(create_graph)` returns the
// flattened gradients.
GradcheckResult same_first_derivative(const std::function<Tensor(bool)>& first_derivatives,
                                      const GradcheckOptions& options) {
  Tensor with = first_derivatives(true), without = first_derivatives(false);
  const Tensor a = with.detach(), b = without.detach();
  const double *pa = a.data_ptr<double>(), *pb = b.data_ptr<double>();
  GradcheckResult result{true, ""};
  int failures = 0;
  for (std::int64_t i = 0, n = a.numel(); i < n; ++i) {
    double err = std::fabs(pa[i] - pb[i]);
    if (err <= options.atol + options.rtol * std::fabs(pb[i])) continue;
    result.passed = false;
    if (failures++ < options.max_reported)
      result.report += fmt::format(
          "gradgradcheck: the gradient computed with create_graph differs from the one without it at element {} of "
          "the joined gradients: {:.8g} with, {:.8g} without\n",
          i, pa[i], pb[i]);
  }
  return result;
}

}  // namespace

GradcheckResult gradgradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options) {
  std::vector<std::size_t> differentiable;  // positions of the inputs that require grad
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && is_floating(inputs[i].dtype()) && inputs[i].requires_grad()) differentiable.push_back(i);
  if (differentiable.empty())
    throw_invalid("gradgradcheck", "none of the {} inputs requires grad: nothing to check", inputs.size());
  // g: random weights for f's output, drawn once (seed + 1: not the weights gradcheck puts on
  // the gradient below).
  Shape out_shape;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> x;
    for (const Tensor& in : inputs)
      x.push_back(in.defined() && is_floating(in.dtype()) ? in.detach().to(kFloat64) : in);
    Tensor out = f(x);
    if (!out.defined() || !is_floating(out.dtype()))
      throw_invalid("gradgradcheck", "the function must return a float tensor");
    out_shape = out.shape();
  }
  Generator generator(options.seed + 1);
  std::vector<Tensor> with_g = inputs;
  with_g.push_back(randn(out_shape, generator, kFloat64).requires_grad_());

  auto first_derivatives_by = [&](const std::vector<Tensor>& a, bool create_graph) {
    AutoGradMode grad_mode(true);  // gradcheck's finite differences run under NoGradGuard
    std::vector<Tensor> x(a.begin(), a.end() - 1), wrt;
    for (std::size_t i : differentiable) wrt.push_back(x[i]);
    Tensor out = f(x);
    Tensor g = out.dtype() == kFloat64 ? a.back() : a.back().to(out.dtype());
    std::vector<Tensor> grads(wrt.size());
    if (out.requires_grad()) grads = grad({out}, wrt, {g}, {.create_graph = create_graph, .allow_unused = true});
    std::vector<Tensor> flat;
    for (std::size_t k = 0; k < wrt.size(); ++k)
      flat.push_back((grads[k].defined() ? grads[k] : zeros_like(wrt[k])).reshape({-1}));
    return cat(flat, 0);
  };
  auto first_derivatives = [&](const std::vector<Tensor>& a) { return first_derivatives_by(a, true); };
  std::vector<Tensor> at;  // float64 copies, to compare the two first derivatives at
  for (const Tensor& in : with_g)
    at.push_back(in.defined() && is_floating(in.dtype()) ? in.detach().to(kFloat64).requires_grad_(in.requires_grad())
                                                         : in);
  GradcheckResult same = same_first_derivative([&](bool create) { return first_derivatives_by(at, create); }, options);
  if (!same) return same;
  GradcheckResult r = gradcheck(first_derivatives, with_g, options);
  if (!r.passed) {
    std::string inputs_named = fmt::format(
        "gradgradcheck: the gradient is checked as a function of the inputs and of "
        "g, which is input {}; its elements are the gradients of inputs",
        inputs.size());
    for (std::size_t i : differentiable) inputs_named += fmt::format(" {}", i);
    r.report = inputs_named + ", flattened and joined\n" + r.report;
  }
  return r;
}

GradcheckResult gradgradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                       const GradcheckOptions& options) {
  if (tensors.empty()) throw_invalid("gradgradcheck", "no tensors to check");
  Shape out_shape;
  {
    NoGradGuard no_grad;
    Tensor out = f();
    if (!out.defined() || out.dtype() != kFloat64)
      throw_invalid("gradgradcheck", "the function must return a float64 tensor");
    out_shape = out.shape();
  }
  Generator generator(options.seed + 1);
  Tensor g = randn(out_shape, generator, kFloat64).requires_grad_();
  auto first_derivatives_by = [&](bool create_graph) {
    AutoGradMode grad_mode(true);
    Tensor out = f();
    std::vector<Tensor> grads(tensors.size());
    if (out.requires_grad()) grads = grad({out}, tensors, {g}, {.create_graph = create_graph, .allow_unused = true});
    std::vector<Tensor> flat;
    for (std::size_t k = 0; k < tensors.size(); ++k)
      flat.push_back((grads[k].defined() ? grads[k] : zeros_like(tensors[k])).reshape({-1}));
    return cat(flat, 0);
  };
  std::vector<Tensor> with_g = tensors;
  with_g.push_back(g);
  GradcheckResult same = same_first_derivative(first_derivatives_by, options);
  if (!same) return same;
  auto first_derivatives = [&] { return first_derivatives_by(true); };
  GradcheckResult r = gradcheck_in_place(first_derivatives, with_g, options);
  if (!r.passed)
    r.report = fmt::format(
                   "gradgradcheck: the gradients of tensors 0..{}, flattened and joined, checked as a function "
                   "of those tensors and of g (tensor {})\n",
                   tensors.size() - 1, tensors.size()) +
               r.report;
  return r;
}

}  // namespace ag
