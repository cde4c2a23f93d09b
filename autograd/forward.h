// Forward-mode differentiation: tangents carried through the forward pass.
//
// Reverse mode (backward()) computes vᵀJ, one output's gradient with respect to every input,
// in a pass from the loss back to the leaves. Forward mode computes J v, every output's
// derivative along one direction v of the inputs, during the forward pass itself: each tensor
// x carries beside its value a tangent ẋ = dx/dε of the same shape, for inputs moved to
// x + εv, and each op turns its inputs' tangents into its output's by its forward rule,
//
//   y = f(a, b)    ẏ = ∂f/∂a · ȧ + ∂f/∂b · ḃ        (mul: ẏ = ȧ b + a ḃ)
//
// These are dual numbers, x + ẋε with ε² = 0, one tangent per value. As in PyTorch's
// torch.autograd.forward_ad:
//
//   ag::fwad::DualLevel level;                      // tangents live while this lives
//   ag::Tensor x = ag::fwad::make_dual(x0, v);      // x0's values, tangent v
//   ag::Tensor y = f(x);                            // every op propagates the tangent
//   ag::Tensor jv = ag::fwad::tangent(y);           // J v
//
// A tensor that no tangent reached has none (tangent() returns an undefined tensor): its
// derivative along v is zero. An op that has no forward rule refuses, naming itself, when a
// tangent reaches it. docs/forward_mode.md has the rule of every op.
//
// The level belongs to the calling thread, as grad mode does; one at a time (nesting throws).
// Leaving it drops every tangent made in it. Forward rules compute their tangents outside the
// graph (a tangent never requires grad). A backward pass inside a level that reaches an op
// whose inputs carried tangents must build a graph (create_graph): its formulas then run as
// ops, so the gradients carry tangents too, and the tangent of a gradient is a Hessian-vector
// product (forward-over-reverse, ag::hvp).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "tensor.h"

namespace ag::fwad {

class DualLevel {
 public:
  DualLevel();
  ~DualLevel();
  DualLevel(const DualLevel&) = delete;
  DualLevel& operator=(const DualLevel&) = delete;
};

// True while a DualLevel lives on this thread.
bool is_active();

// A tensor with primal's values (shared, not copied) and `tangent` as its tangent. It is an op
// of the graph: a gradient reaching it flows on to `primal`. The tangent must have primal's
// shape and dtype; a floating primal only.
Tensor make_dual(const Tensor& primal, const Tensor& tangent);

// Gives `t` itself the tangent, for a tensor that a function reaches by itself (a module's
// parameter): make_dual's in-place form. Same checks as make_dual.
void set_tangent(const Tensor& t, const Tensor& tangent);

// t's tangent at the live level, or an undefined tensor if it has none.
Tensor tangent(const Tensor& t);

struct UnpackedDual {
  Tensor primal;   // t's values, detached from the tangent (and from the graph)
  Tensor tangent;  // as tangent(t)
};
UnpackedDual unpack_dual(const Tensor& t);

}  // namespace ag::fwad

namespace ag::detail {

// For record() and the router: whether an op called now must propagate tangents (a level is
// live and no forward rule is running), and the live tangent of an input. A tensor written in
// place since it got its tangent (its storage's version moved) has a stale one: live_tangent
// throws, naming `op`, rather than hand it on.
bool propagating_tangents();
Tensor live_tangent(const Tensor& t, std::string_view op = "tangent");
// Whether the op being called will have to give its output a tangent: some input has one now.
// A fast kernel asks, to keep what its forward rule reads (GELU's slope).
bool any_tangent(const std::vector<Tensor>& inputs);
// Gives `t` the tangent `tangent` at the live level.
void set_tangent(const Tensor& t, const Tensor& tangent);
// The id of the live level, 0 if none.
std::uint64_t live_level();

// While one lives, ops do not propagate tangents: a forward rule reads its inputs' primal values.
// With `in_rule` false it turns propagation back on, for a rule that is itself a composition of
// ops run on dual inputs (detail::jvp_by_composition).
struct ForwardRuleScope {
  explicit ForwardRuleScope(bool in_rule = true);
  ~ForwardRuleScope();
  ForwardRuleScope(const ForwardRuleScope&) = delete;
  ForwardRuleScope& operator=(const ForwardRuleScope&) = delete;
  bool previous;
};

// The tangent of f(inputs) when input i moves along tangents[i] (undefined: it stays), by running
// f on dual copies of the inputs: the forward rule of an op whose reference is a composition of
// ops (ops/fused_node.cpp), as backward_by_composition is its backward. Zeros when f's output does not
// depend on the moving inputs.
Tensor jvp_by_composition(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const std::vector<Tensor>& tangents);

}  // namespace ag::detail
