// The autograd side of a fused op (fused_node.h): saving, holding, the create_graph node and
// forward mode, for every op the router runs.
#include "fused_node.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "../autograd/forward.h"
#include "../autograd/grad.h"
#include "../autograd/grad_mode.h"
#include "shape.h"

namespace ag {

namespace {

// The op's inputs as the node's closures hold them (FastRun::released), and back as tensors.
std::vector<detail::Held> hold(const std::vector<Tensor>& inputs,
                               const std::vector<std::shared_ptr<const bf16::Buffer>>& released) {
  std::vector<detail::Held> held;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    held.emplace_back(inputs[i], i < released.size() ? released[i] : nullptr);
  return held;
}
std::vector<std::weak_ptr<TensorImpl>> weakly(const Saved& saved) {
  std::vector<std::weak_ptr<TensorImpl>> out;
  for (const Tensor& t : saved)
    if (t.defined()) out.push_back(t.impl());
  return out;
}
std::vector<Tensor> resolve(const std::vector<detail::Held>& held) {
  std::vector<Tensor> inputs;
  for (const detail::Held& h : held) inputs.push_back(h.get());
  return inputs;
}

// An op's gradients under create_graph (fused_node.h), from its fused rules. The fast backward
// computes dx_i = backward(x, dy)_i outside the graph; the wanted ones are laid end to end in one
// tensor, the output of a node with inputs (x..., dy), and each gradient handed out is a slice of
// it. That node's backward, for a cotangent c (one part c_i per gradient), is
//
//   d<c, dx>/dx = the gradients' tangents along c with dy held   (gradient_tangent)
//   d<c, dx>/dy = J(x) c                                          (the forward rule along c)
//
// so a Hessian-vector product by reverse over reverse runs the fused kernels and keeps no more
// than the first pass did (attention: the log-sum-exp, no [Tq, Tk] scores). Differentiated with
// create_graph in turn, it falls back to `composed`, the backward as differentiable ops.
struct GradientsInGraph {
  OpName name;  // the node's: "<op>_backward", of the op's family
  std::vector<detail::Held> held;
  // The first node's saved tensors, for the new node's version checks: held weakly, like the
  // record of every node (a released input must not be kept alive here either).
  std::vector<std::weak_ptr<TensorImpl>> saved;
  BackwardFn fast;
  ForwardFn forward;
  GradientTangentRule gradient_tangent;
  ComposedBackward composed;

  std::vector<Tensor> operator()(const Tensor& dy, const std::vector<bool>& need) const {
    return run(resolve(held), dy, need);
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const Tensor& dy, const std::vector<bool>& need) const {
    std::vector<Tensor> grads;
    {
      NoGradGuard no_grad;
      detail::ForwardRuleScope rule;  // the node below gives the gradients' tangents
      grads = fast(dy, need);
    }
    grads.resize(inputs.size());
    std::vector<std::size_t> parts;  // the gradients laid end to end, in input order
    std::vector<Tensor> flat;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (need[i] && grads[i].defined()) {
        parts.push_back(i);
        flat.push_back(grads[i].reshape({grads[i].numel()}));
      }
    if (parts.empty()) return grads;
    Tensor packed;
    {
      NoGradGuard no_grad;
      packed = flat.size() == 1 ? flat[0] : cat(flat, 0);
    }
    std::vector<Tensor> node_inputs = inputs;
    node_inputs.push_back(dy);
    Saved node_saved;
    for (const std::weak_ptr<TensorImpl>& w : saved)
      if (std::shared_ptr<TensorImpl> impl = w.lock()) node_saved.emplace_back(std::move(impl));
    node_saved.push_back(dy);
    // A packed cotangent (or tangent), one part per gradient, back into one tensor per input.
    auto unpack = [inputs = inputs, parts](const Tensor& c) {
      std::vector<Tensor> per_input(inputs.size());
      std::int64_t at = 0;
      for (std::size_t i : parts) {
        std::int64_t n = inputs[i].numel();
        per_input[i] = c.slice(0, at, at + n).reshape(inputs[i].shape());
        at += n;
      }
      return per_input;
    };
    auto pack = [inputs = inputs, parts](const std::vector<Tensor>& per_input) {
      std::vector<Tensor> flat;
      for (std::size_t i : parts)
        flat.push_back(per_input[i].defined() ? per_input[i].reshape({inputs[i].numel()})
                                              : zeros({inputs[i].numel()}, inputs[i].dtype()));
      return flat.size() == 1 ? flat[0] : cat(flat, 0);
    };
    BackwardFn second = [self = *this, inputs, unpack, dy](const Tensor& c, const std::vector<bool>& need2) {
      std::vector<Tensor> directions = unpack(c);
      std::size_t n = inputs.size();
      std::vector<Tensor> out(n + 1);
      std::vector<bool> need_x(need2.begin(), need2.begin() + static_cast<std::ptrdiff_t>(n));
      if (std::find(need_x.begin(), need_x.end(), true) != need_x.end()) {
        std::vector<Tensor> t = self.gradient_tangent(dy, Tensor(), directions, need_x);
        t.resize(n);
        for (std::size_t i = 0; i < n; ++i)
          if (need_x[i]) out[i] = t[i].defined() ? t[i] : zeros_like(inputs[i]);
      }
      if (need2[n]) {
        Tensor jc = self.forward(directions);
        out[n] = jc.defined() ? jc : zeros_like(dy);
      }
      return out;
    };
    BackwardFn second_composed = [self = *this, need, pack, node_inputs](const Tensor& c,
                                                                         const std::vector<bool>& need2) {
      auto backward_of = [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> x(in.begin(), in.end() - 1);
        return pack(self.composed(x, in.back(), need));
      };
      return detail::backward_by_composition(backward_of, node_inputs, c, need2);
    };
    ForwardFn packed_tangent = [self = *this, dy, pack, need](const std::vector<Tensor>& t) {
      std::vector<Tensor> input_t(t.begin(), t.end() - 1);
      return pack(self.gradient_tangent(dy, t.back(), input_t, need));
    };
    Tensor node = record(name, packed, node_inputs, fast_or_composed(std::move(second), std::move(second_composed)),
                         std::move(node_saved), BackwardOrder::AnyOrder, std::move(packed_tangent));
    std::vector<Tensor> out = unpack(node);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (!out[i].defined()) out[i] = grads[i];
    return out;
  }
};

}  // namespace

Tensor record_fused(const OpName& name, const std::vector<Tensor>& inputs, FastRun run,
                    const std::function<Tensor(const std::vector<Tensor>&)>& reference, ComposedBackward composed,
                    TangentRule tangent) {
  // create_graph: chosen by the backward pass when it runs this node.
  if (!composed)
    composed = [reference](const std::vector<Tensor>& in, const Tensor& dy, const std::vector<bool>& need) {
      return detail::backward_by_composition(reference, in, dy, need);
    };
  // Every closure below holds the inputs as the fast run allows (FastRun::released).
  std::vector<detail::Held> held = hold(inputs, run.released);
  BackwardFn by_ops = [held, composed](const Tensor& dy, const std::vector<bool>& need) {
    return composed(resolve(held), dy, need);
  };
  // The composed backward reads every input, so each one's version is checked, whichever
  // backward runs.
  Saved saved = std::move(run.saved);
  saved.insert(saved.end(), inputs.begin(), inputs.end());
  // Forward mode: the fast run's rule, the op's own, or the tangent through the reference's ops,
  // run on dual copies of the inputs.
  ForwardFn forward = std::move(run.tangent);
  if (!forward)
    forward = [reference, rule = std::move(tangent), held](const std::vector<Tensor>& t) {
      std::vector<Tensor> in = resolve(held);
      return rule ? rule(in, t) : detail::jvp_by_composition(reference, in, t);
    };
  // With the gradients' tangents, create_graph records the fused gradients as one node.
  if (run.gradient_tangent)
    by_ops = GradientsInGraph{OpName(fmt::format("{}_backward", name.name), name.family),
                              held,
                              weakly(saved),
                              run.backward,
                              forward,
                              run.gradient_tangent,
                              composed};
  Tensor output = record(name, run.output, inputs, fast_or_composed(run.backward, std::move(by_ops)), std::move(saved),
                         BackwardOrder::AnyOrder, std::move(forward));
  if (run.gradient_tangent && output.grad_fn())
    output.grad_fn()->set_dual_backward([name = name.name, held, backward = run.backward, rule = run.gradient_tangent](
                                            const Tensor& dy, const Tensor& dy_t, const std::vector<bool>& need) {
      std::vector<Tensor> inputs = resolve(held), moving(inputs.size());
      for (std::size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].defined()) moving[i] = detail::live_tangent(inputs[i], name);
      return DualGrads{backward(dy, need), rule(dy, dy_t, moving, need)};
    });
  return output;
}

namespace detail {

Held::Held(const Tensor& t, std::shared_ptr<const bf16::Buffer> rounded) {
  if (t.defined()) shape_ = t.shape();
  if (!rounded || !t.defined()) {
    strong_ = t;
    return;
  }
  weak_ = t.impl();
  rounded_ = std::move(rounded);
  grad_fn_ = t.grad_fn();  // a leaf is held by the node's own edge, so it never needs rebuilding
}

Tensor Held::get() const {
  if (!rounded_) return strong_;
  if (std::shared_ptr<TensorImpl> impl = weak_.lock()) return Tensor(std::move(impl));
  Tensor t = empty(shape_, kFloat32);
  bf16::widen(rounded_->data.get(), t.numel(), t.mutable_data_ptr<float>());
  if (grad_fn_) {
    t.impl()->grad_fn = grad_fn_;
    t.impl()->requires_grad = true;
  }
  return t;
}

bool may_release_inputs(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled() || fwad::is_active()) return false;
  return std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

bool will_differentiate(const std::vector<Tensor>& inputs) {
  bool recorded = is_grad_enabled() && std::any_of(inputs.begin(), inputs.end(),
                                                   [](const Tensor& t) { return t.defined() && t.requires_grad(); });
  return recorded || any_tangent(inputs);
}

}  // namespace detail

BackwardFn fast_or_composed(BackwardFn fast, BackwardFn composed) {
  return [fast = std::move(fast), composed = std::move(composed)](const Tensor& dy, const std::vector<bool>& need) {
    return detail::creating_graph() ? composed(dy, need) : fast(dy, need);
  };
}

}  // namespace ag
