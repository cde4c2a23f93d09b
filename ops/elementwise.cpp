// Each op below is a line of forward math, f, and one line of its derivative, f', written in
// terms of either the input x or the output y, whichever is cheaper; only that one tensor is
// saved for backward. f and the backward dx = dy * f'(saved) run on the backend's kernels
// (kernels/table.h, `unary` and `unary_backward`: the loops are in kernels/cpu/elementwise.cpp
// and kernels/naive/elementwise.cpp), named here by the op's Unary entry; so do the forward-mode
// rule, ẏ = ẋ * f'(saved). f' written here with ops is what a backward pass that builds a graph
// (create_graph) runs, so that dx can be differentiated again. That is f' twice, once for numbers
// in the kernels and once as ops here: the kernel's one pass pays against the ops' three or four
// (docs/performance.md). gelu, which has a fast kernel and a reference twin, is in fused/gelu.cpp.
//
//   x: any shape, float32 or float64.   y, dy, dx: the shape of x.
#include "elementwise.h"

#include <numbers>

#include "../autograd/dispatch.h"
#include "../autograd/grad_mode.h"
#include "../autograd/node.h"
#include "../kernels/table.h"
#include "../runtime/profile.h"
#include "binary.h"
#include "route.h"

namespace ag {

namespace {

enum class Saves { Input, Output };

// dx = dy * f'(saved), elementwise, by the backend's kernel for f.
Tensor unary_backward(const char* op, backends::Unary f, double p, const Tensor& dy, const Tensor& saved) {
  Tensor dx = empty_like(saved);
  dispatch_floating(saved.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().unary_backward(f, p, saved.numel(), saved.data_ptr<T>(), dy.data_ptr<T>(),
                                                dx.mutable_data_ptr<T>());
  });
  return dx;
}

// The constant c in the shape and dtype of v, for an f' that is a constant.
Tensor constant_like(const Tensor& v, double c) { return full(v.shape(), c, v.dtype()); }

// y = f(x) by the backend's kernel for `f` (p: pow's exponent); dx and ẏ by its backward kernel.
// `df` is f' written with ops, called with the saved tensor as it has a history (the input as it
// was passed, or the output as the node's own): the backward formula under create_graph, where
// the kernel's loop would leave no graph to differentiate.
template <class DF>
Tensor unary_op(const char* op, backends::Unary f, const Tensor& x, Saves saves, DF df, double p = 0) {
  check_floating(op, x);
  profile::Scope scope(profile::Family::Elementwise);
  Tensor y = empty_like(x);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().unary(f, p, x.numel(), x.data_ptr<T>(), y.mutable_data_ptr<T>());
  });
  // The saved tensor shares the caller's buffer: no copy. The input is kept as passed (its
  // history is already held by the node's edge); the output detached, since the node itself
  // is its history (detail::node_output restores it).
  Tensor saved = saves == Saves::Input ? x : y.detach();
  return record({op, profile::Family::Elementwise}, y, {x},
                fast_or_composed(
                    [op, f, p, saved](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{unary_backward(op, f, p, dy, saved)};
                    },
                    [df, saves, saved](const Tensor& dy, const std::vector<bool>&) {
                      return std::vector<Tensor>{dy * df(saves == Saves::Input ? saved : detail::node_output(saved))};
                    }),
                Saved{saved}, BackwardOrder::AnyOrder,
                [op, f, p, saved](const std::vector<Tensor>& t) { return unary_backward(op, f, p, t[0], saved); });
}

// f'(x) for a piecewise-constant slope (relu's step): the backward kernel run on ones, outside
// the graph, since the slope's own derivative is 0 wherever it exists.
auto constant_slope(const char* op, backends::Unary f) {
  return [op, f](const Tensor& x) {
    NoGradGuard no_grad;
    return unary_backward(op, f, 0, ones_like(x), x);
  };
}

}  // namespace

// y = -x                 dy/dx = -1
Tensor neg(const Tensor& x) {
  return unary_op("neg", backends::Unary::Neg, x, Saves::Input, [](const Tensor& v) { return constant_like(v, -1); });
}

// y = x^p                dy/dx = p x^(p-1), and 0 for p = 0 (not 0 * x^-1, which is NaN at x = 0;
//                        so each derivative of an integer power ends in zeros)
Tensor pow(const Tensor& x, double p) {
  return unary_op(
      "pow", backends::Unary::Pow, x, Saves::Input,
      [p](const Tensor& v) { return p == 0.0 ? constant_like(v, 0) : p * pow(v, p - 1.0); }, p);
}

// y = e^x                dy/dx = e^x = y
Tensor exp(const Tensor& x) {
  return unary_op("exp", backends::Unary::Exp, x, Saves::Output, [](const Tensor& y) { return y; });
}

// y = ln x               dy/dx = 1 / x        (x < 0 gives NaN and x = 0 gives -inf, as IEEE does)
Tensor log(const Tensor& x) {
  return unary_op("log", backends::Unary::Log, x, Saves::Input, [](const Tensor& v) { return 1 / v; });
}

// y = sqrt(x)            dy/dx = 1 / (2 sqrt(x)) = 1 / (2y)
Tensor sqrt(const Tensor& x) {
  return unary_op("sqrt", backends::Unary::Sqrt, x, Saves::Output, [](const Tensor& y) { return 1 / (2 * y); });
}

// y = tanh x             dy/dx = 1 - tanh^2 x = 1 - y^2
Tensor tanh(const Tensor& x) {
  return unary_op("tanh", backends::Unary::Tanh, x, Saves::Output, [](const Tensor& y) { return 1 - y * y; });
}

// y = 1 / (1 + e^-x)     dy/dx = e^-x / (1 + e^-x)^2 = y (1 - y)
Tensor sigmoid(const Tensor& x) {
  return unary_op("sigmoid", backends::Unary::Sigmoid, x, Saves::Output, [](const Tensor& y) { return y * (1 - y); });
}

// y = erfc(x) = 1 - erf(x)   dy/dx = -2/sqrt(pi) e^(-x^2)     (the CDF of N(0, 1) is erfc(-x/sqrt 2) / 2)
Tensor erfc(const Tensor& x) {
  return unary_op("erfc", backends::Unary::Erfc, x, Saves::Input,
                  [](const Tensor& v) { return (-2 * std::numbers::inv_sqrtpi) * exp(-(v * v)); });
}

// y = max(x, 0)          dy/dx = 1 if x > 0 else 0   (at the kink x = 0 we take 0, as PyTorch does;
//                                                      NaN passes through, also as PyTorch does)
// A step is no function of ops: on the graph side its slope is the backward kernel's, run outside
// the graph (constant_slope), which is right, as its own derivative is 0 wherever it exists.
Tensor relu(const Tensor& x) {
  return unary_op("relu", backends::Unary::Relu, x, Saves::Input, constant_slope("relu", backends::Unary::Relu));
}

// y = |x|                dy/dx = sign(x): 1 if x > 0, -1 if x < 0, and 0 at the kink x = 0 (as
//                                      PyTorch takes it); a step again, so its slope is made as relu's
Tensor abs(const Tensor& x) {
  return unary_op("abs", backends::Unary::Abs, x, Saves::Input, constant_slope("abs", backends::Unary::Abs));
}

Tensor Tensor::operator-() const { return neg(*this); }
Tensor Tensor::pow(double exponent) const { return ag::pow(*this, exponent); }
Tensor Tensor::exp() const { return ag::exp(*this); }
Tensor Tensor::log() const { return ag::log(*this); }
Tensor Tensor::sqrt() const { return ag::sqrt(*this); }
Tensor Tensor::tanh() const { return ag::tanh(*this); }
Tensor Tensor::relu() const { return ag::relu(*this); }
Tensor Tensor::abs() const { return ag::abs(*this); }
Tensor Tensor::sigmoid() const { return ag::sigmoid(*this); }

}  // namespace ag
