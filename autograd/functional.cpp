#include "functional.h"

#include "../ops/shape.h"
#include "../runtime/error.h"
#include "dispatch.h"
#include "forward.h"
#include "grad.h"
#include "grad_mode.h"

namespace ag {

namespace {

// A fresh leaf holding x's values, for f to be differentiated at.
Tensor leaf_at(const char* op, const Tensor& x) {
  check_defined(op, x);
  if (!is_floating(x.dtype()))
    throw_invalid(op, "x must be float32 or float64, got {} with shape {}", dtype_name(x.dtype()),
                  shape_str(x.shape()));
  return x.detach().clone().requires_grad_();
}

void check_like(const char* op, const char* name, const Tensor& v, const Tensor& like, const char* like_name) {
  check_defined(op, v);
  if (v.shape() != like.shape() || v.dtype() != like.dtype())
    throw_invalid(op, "{} is {} with shape {}, but {} is {} with shape {}", name, dtype_name(v.dtype()),
                  shape_str(v.shape()), like_name, dtype_name(like.dtype()), shape_str(like.shape()));
}

// f at the leaf, recorded even if the caller is under NoGradGuard.
Tensor call(const char* op, const FunctionOfTensor& f, const Tensor& leaf, bool scalar) {
  Tensor y = f(leaf);
  if (!y.defined() || !is_floating(y.dtype())) throw_invalid(op, "f must return a float tensor");
  if (scalar && y.numel() != 1)
    throw_invalid(op, "f must return one element (a loss), got shape {}; reduce it first (e.g. .sum())",
                  shape_str(y.shape()));
  return y;
}

// df/dx as a tensor of the graph (zeros, with no graph, where f does not depend on x).
Tensor gradient_with_graph(const Tensor& y, const Tensor& leaf) {
  if (!y.requires_grad()) return zeros_like(leaf);
  return grad({y}, {leaf}, {}, {.create_graph = true, .allow_unused = true})[0];
}

// The gradient of <g, v> with respect to `wrt`, values only: zeros where g does not depend on it.
Tensor gradient_of_product(const Tensor& g, const Tensor& wrt, const Tensor& v) {
  if (!g.requires_grad()) return zeros_like(wrt);
  Tensor r = grad({g}, {wrt}, {v}, {.retain_graph = true, .allow_unused = true})[0];
  return r.defined() ? r : zeros_like(wrt);
}

Shape concat(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

// e_i: one at flat position i, shaped like `like`.
Tensor basis(const Tensor& like, std::int64_t i) {
  Tensor e = zeros(like.shape(), like.dtype());
  if (e.dtype() == kFloat64)
    e.mutable_data_ptr<double>()[i] = 1.0;
  else
    e.mutable_data_ptr<float>()[i] = 1.0f;
  return e;
}

// rows[i] stacked into [rows.size(), ...] and reshaped to `shape`.
Tensor stack_rows(const std::vector<Tensor>& rows, const Shape& shape) {
  std::vector<Tensor> flat;
  for (const Tensor& r : rows) flat.push_back(r.reshape({1, r.numel()}));
  return cat(flat, 0).reshape(shape);
}

}  // namespace

Tensor hvp_reverse_over_reverse(const FunctionOfTensor& f, const Tensor& x, const Tensor& v) {
  Tensor leaf = leaf_at("hvp_reverse_over_reverse", x);
  check_like("hvp_reverse_over_reverse", "v", v, x, "x");
  AutoGradMode grad_mode(true);
  Tensor g = gradient_with_graph(call("hvp_reverse_over_reverse", f, leaf, true), leaf);
  Tensor hv = gradient_of_product(g, leaf, v);
  return hv.detach();
}

// H v as the tangent of the gradient: x moves along v, the forward pass carries tangents, and
// the backward pass carries them on into the gradient (node.h, DualBackwardFn), whose tangent is
// d/de grad f(x + e v) = H v. No graph of the backward pass is built.
Tensor hvp(const FunctionOfTensor& f, const Tensor& x, const Tensor& v) {
  Tensor leaf = leaf_at("hvp", x);
  check_like("hvp", "v", v, x, "x");
  AutoGradMode grad_mode(true);
  fwad::DualLevel level;
  Tensor y = call("hvp", f, fwad::make_dual(leaf, v.detach()), true);
  if (!y.requires_grad()) return zeros_like(leaf);
  Tensor g = grad({y}, {leaf}, {}, {.allow_unused = true})[0];
  Tensor hv = g.defined() ? fwad::tangent(g) : Tensor();
  return hv.defined() ? hv.detach() : zeros_like(leaf);
}

std::vector<Tensor> hvp(const std::function<Tensor()>& loss, const std::vector<Tensor>& params,
                        const std::vector<Tensor>& v) {
  if (v.size() != params.size())
    throw_invalid("hvp", "got {} parameters but {} directions (one per parameter)", params.size(), v.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    check_defined("hvp", params[i]);
    if (!params[i].requires_grad())
      throw_invalid("hvp", "parameter {} (shape {}) does not require grad", i, shape_str(params[i].shape()));
    check_like("hvp", fmt::format("direction {}", i).c_str(), v[i], params[i], fmt::format("parameter {}", i).c_str());
  }
  AutoGradMode grad_mode(true);
  fwad::DualLevel level;
  for (std::size_t i = 0; i < params.size(); ++i) fwad::set_tangent(params[i], v[i].detach());
  Tensor y = loss();
  if (!y.defined() || !is_floating(y.dtype())) throw_invalid("hvp", "loss() must return a float tensor");
  if (y.numel() != 1) throw_invalid("hvp", "loss() must return one element, got shape {}", shape_str(y.shape()));
  std::vector<Tensor> out(params.size());
  std::vector<Tensor> g;
  if (y.requires_grad()) g = grad({y}, params, {}, {.allow_unused = true});
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor hv = i < g.size() && g[i].defined() ? fwad::tangent(g[i]) : Tensor();
    out[i] = hv.defined() ? hv.detach() : zeros_like(params[i]);
  }
  return out;
}

JvpResult jvp(const FunctionOfTensors& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& tangents) {
  if (tangents.size() != inputs.size())
    throw_invalid("jvp", "got {} inputs but {} tangents (one per input; an undefined tangent for one that stays)",
                  inputs.size(), tangents.size());
  NoGradGuard no_grad;
  fwad::DualLevel level;
  std::vector<Tensor> duals(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!tangents[i].defined()) {
      duals[i] = inputs[i];
      continue;
    }
    check_defined("jvp", inputs[i]);
    if (tangents[i].shape() != inputs[i].shape() || tangents[i].dtype() != inputs[i].dtype())
      throw_invalid("jvp", "tangent {} is {} with shape {}, but input {} is {} with shape {}", i,
                    dtype_name(tangents[i].dtype()), shape_str(tangents[i].shape()), i, dtype_name(inputs[i].dtype()),
                    shape_str(inputs[i].shape()));
    duals[i] = fwad::make_dual(inputs[i].detach(), tangents[i].detach());
  }
  Tensor y = f(duals);
  if (!y.defined() || !is_floating(y.dtype())) throw_invalid("jvp", "f must return a float tensor");
  Tensor t = fwad::tangent(y);
  return {y.detach(), t.defined() ? t.detach() : zeros_like(y)};
}

Tensor jvp(const FunctionOfTensor& f, const Tensor& x, const Tensor& v) {
  check_defined("jvp", x);
  if (!is_floating(x.dtype()))
    throw_invalid("jvp", "x must be float32 or float64, got {} with shape {}", dtype_name(x.dtype()),
                  shape_str(x.shape()));
  check_like("jvp", "v", v, x, "x");
  return jvp([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}, {v}).tangent;
}

Tensor hessian(const FunctionOfTensor& f, const Tensor& x) {
  Tensor leaf = leaf_at("hessian", x);
  AutoGradMode grad_mode(true);
  Tensor g = gradient_with_graph(call("hessian", f, leaf, true), leaf);
  std::vector<Tensor> rows;  // row i: the gradient of g_i
  for (std::int64_t i = 0; i < leaf.numel(); ++i) rows.push_back(gradient_of_product(g, leaf, basis(g, i)).detach());
  if (rows.empty()) return zeros(concat(x.shape(), x.shape()), x.dtype());
  NoGradGuard no_grad;
  return stack_rows(rows, concat(x.shape(), x.shape()));
}

Tensor jacobian(const FunctionOfTensor& f, const Tensor& x) {
  Tensor leaf = leaf_at("jacobian", x);
  AutoGradMode grad_mode(true);
  Tensor y = call("jacobian", f, leaf, false);
  std::vector<Tensor> rows;  // row i: the gradient of y_i
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    if (!y.requires_grad()) {
      rows.push_back(zeros_like(leaf));
      continue;
    }
    Tensor r = grad({y}, {leaf}, {basis(y, i)}, {.retain_graph = true, .allow_unused = true})[0];
    rows.push_back(r.defined() ? r : zeros_like(leaf));
  }
  if (rows.empty() || leaf.numel() == 0) return zeros(concat(y.shape(), x.shape()), x.dtype());
  NoGradGuard no_grad;
  return stack_rows(rows, concat(y.shape(), x.shape()));
}

}  // namespace ag
