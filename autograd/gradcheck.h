// gradcheck: does an analytic gradient agree with finite differences?
//
// For a function f of tensors, gradcheck draws a fixed random tensor g shaped like f's output
// and checks the gradient of the scalar L = sum(f(inputs) * g) with respect to every input
// that requires grad, element by element, against the central difference
//
//     dL/dx_i  ~  (L(x + eps e_i) - L(x - eps e_i)) / (2 eps)
//
// in float64 (float32 inputs are copied to float64 first; f must accept them). Weighting the
// output by a random g instead of summing it checks every output element's contribution, with
// no cancellation between them, at the cost of one backward pass.
//
//   auto f = [](const std::vector<ag::Tensor>& in) { return in[0].matmul(in[1]).tanh(); };
//   ag::GradcheckResult r = ag::gradcheck(f, {x, w});
//   if (!r) fmt::print("{}\n", r.report);
//
// With options.check_forward_ad the forward-mode tangents are checked too, column by column.
//
// In GoogleTest, <attograd/testing.h> turns the result into an assertion with the report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tensor.h"

namespace ag {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // an element passes when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  std::uint64_t seed = 0;  // for the output weights g
  int max_reported = 5;    // mismatches listed in the report
  // Which derivatives to check (PyTorch's names). Reverse mode: the gradient of sum(f * g), as
  // above. Forward mode (autograd/forward.h): for each input element i, the tangent of f's
  // output when that element alone moves (the Jacobian's column i, J e_i) against the central
  // difference of the whole output, (f(x + eps e_i) - f(x - eps e_i)) / (2 eps), element by
  // element.
  bool check_backward_ad = true;
  bool check_forward_ad = false;
};

struct GradcheckResult {
  bool passed = false;
  std::string report;  // on failure: input, element, analytic, numeric, errors
  explicit operator bool() const { return passed; }
};

using TensorFunction = std::function<Tensor(const std::vector<Tensor>&)>;

GradcheckResult gradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// The same check for tensors that `f` reaches by itself, such as a module's parameters: each is
// perturbed in place and restored. They must be float64 leaves that require grad; their .grad()
// is cleared first. Typical use, after module.to(kFloat64):
//
//   auto params = module.parameters();
//   params.push_back(x);
//   gradcheck_in_place([&] { return module.forward(x); }, params);
GradcheckResult gradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                   const GradcheckOptions& options = {});
// The same with each tensor named, as a module's named_parameters() gives them: a failure reads
// "gradcheck: parameter 'blocks.0.attn.out_proj.weight' (shape [8, 8]), element ...".
//   gradcheck_in_place([&] { return module.forward(x); }, module.named_parameters());
GradcheckResult gradcheck_in_place(const std::function<Tensor()>& f,
                                   const std::vector<std::pair<std::string, Tensor>>& named,
                                   const GradcheckOptions& options = {});

// The second derivative, checked the same way: gradgradcheck runs gradcheck on the function
//
//     (inputs, g)  ->  the gradients of sum(f(inputs) * g) with respect to the inputs that
//                      require grad, computed by ag::grad with create_graph, flattened and joined
//
// for a fixed random g shaped like f's output (g requires grad too). Its Jacobian holds every
// second derivative of f, weighted by g, and the first derivatives again through g: the terms
// a backward formula that is linear in its grad_output must also get right. Each element is
// compared with central differences of that analytic gradient, in float64. Every op that f
// uses must support create_graph (docs/higher_order.md); one that does not makes this throw,
// naming it.
GradcheckResult gradgradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});
// The same for tensors that `f` reaches by itself, such as a module's parameters (float64 leaves
// that require grad, perturbed in place and restored, as for gradcheck_in_place).
GradcheckResult gradgradcheck_in_place(const std::function<Tensor()>& f, const std::vector<Tensor>& tensors,
                                       const GradcheckOptions& options = {});

}  // namespace ag
