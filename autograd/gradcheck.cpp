#include "gradcheck.h"

#include <cmath>

#include "error.h"
#include "generator.h"
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

}  // namespace

GradcheckResult gradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  // float64 copies of the inputs, as fresh leaves; the caller's tensors are left alone.
  std::vector<Tensor> x;
  bool any = false;
  for (const Tensor& in : inputs) {
    if (!in.defined() || !is_floating(in.dtype())) {
      x.push_back(in);
      continue;
    }
    Tensor copy = in.detach().to(kFloat64);  // always a new buffer
    if (in.requires_grad()) copy.requires_grad_(true);
    any = any || in.requires_grad();
    x.push_back(copy);
  }
  if (!any) throw_invalid("gradcheck", "none of the {} inputs requires grad: nothing to check", inputs.size());

  // Analytic: one backward pass of L = sum(f(x) * g).
  Tensor out = f(x);
  if (!out.defined() || !is_floating(out.dtype()))
    throw_invalid("gradcheck", "the function must return a float tensor");
  Generator generator(options.seed);
  Tensor g = randn(out.shape(), generator, kFloat64);
  if (out.requires_grad()) out.backward(out.dtype() == kFloat64 ? g : g.to(out.dtype()));

  // Numeric: central differences, one element at a time, without recording a graph.
  NoGradGuard no_grad;
  GradcheckResult result{true, ""};
  int failures = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (!x[k].defined() || !x[k].requires_grad()) continue;
    Tensor analytic = x[k].grad();
    double* v = x[k].data_ptr<double>();
    for (std::int64_t i = 0, n = x[k].numel(); i < n; ++i) {
      double saved = v[i];
      v[i] = saved + options.eps;
      double plus = weighted_sum(f(x), g);
      v[i] = saved - options.eps;
      double minus = weighted_sum(f(x), g);
      v[i] = saved;
      double numeric = (plus - minus) / (2.0 * options.eps);
      double a = analytic.defined() ? analytic.data_ptr<double>()[i] : 0.0;
      double abs_err = std::fabs(a - numeric);
      if (abs_err <= options.atol + options.rtol * std::fabs(numeric)) continue;  // NaN fails too
      result.passed = false;
      if (failures++ < options.max_reported)
        result.report += fmt::format(
            "gradcheck: input {} (shape {}), element {} (index {}): analytic {:.8g}, numeric {:.8g}, "
            "abs error {:.3g}, rel error {:.3g} (allowed: {:.3g} + {:.3g} * |numeric|)\n",
            k, shape_str(x[k].shape()), i, index_str(i, x[k].shape()), a, numeric, abs_err,
            abs_err / std::max(std::fabs(numeric), 1e-300), options.atol, options.rtol);
    }
  }
  if (failures > options.max_reported)
    result.report += fmt::format("gradcheck: ... {} mismatched elements in all\n", failures);
  return result;
}

}  // namespace ag
