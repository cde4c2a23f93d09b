// A differentiable op of one's own, defined as a class the way torch::autograd::Function
// defines one: a forward that computes values only, a backward beside it, and what the
// backward reads saved through a context that checks it was not changed in between.
//
//   struct Scale : ag::Function<Scale> {
//     static constexpr const char* name = "scale";  // how errors and graphs name it (or a
//                                                   // static function name(), in a local class)
//     static ag::Tensor forward(ag::FunctionContext& ctx, const ag::Tensor& x, const ag::Tensor& w) {
//       ctx.save_for_backward({x, w});                             // the tensors backward reads
//       return x * w;                                              // values only: no graph is built
//     }
//     static std::vector<ag::Tensor> backward(ag::FunctionContext& ctx, const ag::Tensor& dy) {
//       const ag::Tensor &x = ctx.saved()[0], &w = ctx.saved()[1];
//       return {dy * w, ctx.needs_input_grad(1) ? dy * x : ag::Tensor()};  // one per tensor argument
//     }
//     // Optional, for forward mode: the output's tangent from the inputs' (undefined: zero).
//     static ag::Tensor jvp(ag::FunctionContext& ctx, const std::vector<ag::Tensor>& tangents);
//   };
//   ag::Tensor y = Scale::apply(x, w);                             // any other arguments pass through
//
// What apply does for the op, so that a mistake cannot go unnoticed:
//   - forward runs with grad mode off, on the tensor arguments detached (same data, no history,
//     no tangent), so it records nothing, whatever ops it calls;
//   - every tensor argument is an input of the op, in order, and backward returns one gradient
//     per input (an undefined tensor for none); a wrong count or shape is refused by name;
//   - the tensors saved through ctx have their versions checked when backward runs: one written
//     in place after the forward makes the backward refuse, naming the op;
//   - the node is recorded with ag::record (autograd/node.h), which Function is a wrapper of.
// A backward formula is first order: to differentiate it again, write the op with record and
// BackwardOrder::AnyOrder (docs/higher_order.md).
#pragma once

#include <concepts>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../runtime/error.h"
#include "format.h"
#include "grad_mode.h"
#include "node.h"
#include "tensor.h"

namespace ag {

class FunctionContext {
 public:
  // The tensors backward reads; their versions are checked before it runs.
  void save_for_backward(std::vector<Tensor> tensors) { saved_ = std::move(tensors); }
  const std::vector<Tensor>& saved() const { return saved_; }
  // Whether tensor argument i needs a gradient (inside backward: whether this pass wants it).
  bool needs_input_grad(std::size_t i) const { return i < needs_.size() && needs_[i]; }
  // Numbers the backward needs besides tensors (a scale, a dim), by name.
  std::map<std::string, double> saved_data;

 private:
  template <class F>
  friend struct Function;
  std::vector<Tensor> saved_;
  std::vector<bool> needs_;
};

namespace detail {
template <class T>
constexpr bool is_tensor_v = std::is_same_v<std::remove_cvref_t<T>, Tensor>;
}

template <class Derived>
struct Function {
  template <class... Args>
  static Tensor apply(Args&&... args) {
    const std::string op = op_name();
    auto ctx = std::make_shared<FunctionContext>();
    std::vector<Tensor> inputs;
    (collect(op, inputs, args), ...);
    for (const Tensor& t : inputs) ctx->needs_.push_back(t.requires_grad());
    Tensor output;
    {
      NoGradGuard no_grad;
      output = Derived::forward(*ctx, detached(args)...);
    }
    if (!output.defined()) throw_invalid(op, "Function: forward returned an undefined tensor");
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.shape());
    BackwardFn backward = [ctx, op, shapes](const Tensor& dy, const std::vector<bool>& needs) {
      ctx->needs_ = needs;
      std::vector<Tensor> grads = Derived::backward(*ctx, dy);
      if (grads.size() != shapes.size())
        throw_invalid(op,
                      "Function: backward returned {} gradients for {} tensor arguments (one each, undefined "
                      "for none)",
                      grads.size(), shapes.size());
      for (std::size_t i = 0; i < grads.size(); ++i)
        if (grads[i].defined() && grads[i].shape() != shapes[i])
          throw_invalid(op, "Function: backward's gradient {} has shape {}, its input has shape {}", i,
                        shape_str(grads[i].shape()), shape_str(shapes[i]));
      return grads;
    };
    ForwardFn tangent;
    if constexpr (requires(FunctionContext & c, const std::vector<Tensor>& t) {
                    { Derived::jvp(c, t) } -> std::convertible_to<Tensor>;
                  })
      tangent = [ctx](const std::vector<Tensor>& tangents) { return Tensor(Derived::jvp(*ctx, tangents)); };
    return record(op, output, inputs, std::move(backward), ctx->saved_, BackwardOrder::FirstOrder, std::move(tangent));
  }

 private:
  static std::string op_name() {
    if constexpr (requires { Derived::name(); })
      return Derived::name();
    else
      return Derived::name;
  }
  template <class T>
  static void collect(const std::string& op, std::vector<Tensor>& inputs, const T& arg) {
    if constexpr (detail::is_tensor_v<T>) {
      if (!arg.defined()) throw_invalid(op, "Function: tensor argument {} is undefined", inputs.size());
      inputs.push_back(arg);
    }
  }
  template <class T>
  static decltype(auto) detached(T&& arg) {
    if constexpr (detail::is_tensor_v<T>)
      return arg.detach();
    else
      return std::forward<T>(arg);
  }
};

}  // namespace ag
