// gelu: the fused op (the backend's kernel, and reference::gelu as its twin). The loops behind it,
// which linear_gelu also runs on each band of rows, are the backend's: kernels/cpu/gelu.cpp,
// kernels/naive/linear.cpp.
//
//   x: any shape, float32 or float64.   y, dy, dx: the shape of x.
#include "../../autograd/dispatch.h"
#include "../../autograd/forward.h"
#include "../../autograd/grad_mode.h"
#include "../binary.h"
#include "../elementwise.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"

namespace ag {

// Exact:  y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
//         dy/dx = Phi(x) + x phi(x),  phi(x) = e^(-x^2/2) / sqrt(2 pi)   (product rule; Phi' = phi)
// Tanh:   y = x/2 (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//         dy/dx = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Both are computed in the tensor's own type, double for float64 and float math for float32. The
// second derivative, which the rules of the second order read, is kernels/cpu/gelu.cpp's too.

namespace detail {

Tensor gelu_curvature(const backends::Backend& backend, const Tensor& x, GeluApproximation approximate) {
  Tensor c = empty_like(x);
  dispatch_floating(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().gelu_curvature(x.numel(), x.data_ptr<T>(), c.mutable_data_ptr<T>(), gelu_form(approximate));
  });
  return c;
}

bool has_gelu_curvature(const backends::Backend& backend, DType dtype) {
  return dtype == kFloat32 ? backend.f32.gelu_curvature != nullptr : backend.f64.gelu_curvature != nullptr;
}

}  // namespace detail

// GELU's value and slope share their expensive part (erf, or tanh), so the forward pass
// computes both and saves the slope: backward is then one multiply, dx = dy * f'(x).
Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  const char* op = approximate == GeluApproximation::None ? "gelu" : "gelu_tanh";
  check_floating(op, x);
  // With create_graph: the chain rule through reference::gelu's ops, which gives
  // GELU''(x) = phi(x) (2 - x^2) (or the tanh form's) when differentiated again.
  RoutedOp route_op{.kernel = KernelOp::Gelu, .name = op, .inputs = {x}};
  route_op.reference = [approximate](const std::vector<Tensor>& in) -> Routed {
    return {reference::gelu(in[0], approximate)};
  };
  route_op.fast = [&](const Products&, const backends::Backend& backend) {
    bool need_slope = detail::will_differentiate({x});
    Tensor y = empty_like(x), slope = need_slope ? empty_like(x) : Tensor();
    dispatch_floating(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      backend.table<T>().gelu(x.numel(), x.data_ptr<T>(), y.mutable_data_ptr<T>(), mutable_data_or_null<T>(slope),
                              detail::gelu_form(approximate));
    });
    auto backward = [slope](const Tensor& dy, const std::vector<bool>&) {
      NoGradGuard no_grad;
      return std::vector<Tensor>{dy * slope};
    };
    auto tangent = [slope](const std::vector<Tensor>& t) { return t[0] * slope; };  // the same slope
    // Forward over reverse: dx = dy GELU'(x), so its tangent is d(dy) GELU'(x) + dy GELU''(x) dx.
    const backends::Backend* kernels = &backend;
    auto gradient_tangent = [kernels, slope, x, approximate](const Tensor& dy, const Tensor& dy_t,
                                                             const std::vector<Tensor>& in_t,
                                                             const std::vector<bool>&) {
      const Tensor& x_t = in_t[0];
      Tensor t;
      if (dy_t.defined()) t = dy_t * slope;
      if (x_t.defined()) {
        Tensor second = dy * detail::gelu_curvature(*kernels, x, approximate) * x_t;
        t = t.defined() ? t + second : second;
      }
      return std::vector<Tensor>{t};
    };
    FastRun run{y, backward, Saved{slope}, Tensor(), tangent};
    if (detail::has_gelu_curvature(backend, x.dtype())) run.gradient_tangent = gradient_tangent;
    return run;
  };
  return route(route_op).output;
}

Tensor Tensor::gelu(GeluApproximation approximate) const { return ag::gelu(*this, approximate); }

}  // namespace ag
