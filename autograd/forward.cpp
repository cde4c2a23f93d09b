// Forward mode's state (forward.h): the live level of each thread, and the tangents it gave.
// How tangents move from op to op is record()'s part (node.cpp): it runs the op's forward rule.
#include "forward.h"

#include <atomic>
#include <memory>
#include <vector>

#include "context.h"
#include "dispatch.h"
#include "grad_mode.h"
#include "node.h"

namespace ag {

namespace {

std::atomic<std::uint64_t> g_next_level{1};  // ids are never reused, so a stale tangent stays stale
// Every tensor given a tangent at the live level, to drop them all when it ends.
thread_local std::vector<std::weak_ptr<TensorImpl>> t_duals;
thread_local std::size_t t_prune_at = 64;  // when to forget the ones already freed

}  // namespace

namespace fwad {

DualLevel::DualLevel() {
  if (detail::thread_context().forward_level != 0)
    throw_state("DualLevel",
                "a forward-mode level is already live on this thread; levels do not nest (end the first one, or "
                "compute both directions in one level)");
  detail::thread_context().forward_level = g_next_level.fetch_add(1, std::memory_order_relaxed);
}

DualLevel::~DualLevel() {
  std::uint64_t& level = detail::thread_context().forward_level;
  for (const auto& weak : t_duals)
    if (auto impl = weak.lock(); impl && impl->tangent_level == level) {
      impl->tangent.reset();
      impl->tangent_level = 0;
    }
  t_duals.clear();
  t_prune_at = 64;
  level = 0;
}

bool is_active() { return detail::thread_context().forward_level != 0; }

namespace {

void check_dual(const char* op, const Tensor& primal, const Tensor& tangent) {
  if (!is_active())
    throw_state(op, "no forward-mode level is live on this thread: create an ag::fwad::DualLevel first");
  check_floating(op, primal);
  check_defined(op, tangent);
  if (tangent.shape() != primal.shape() || tangent.dtype() != primal.dtype())
    throw_invalid(op, "the tangent must have the primal's shape and dtype: primal {} {}, tangent {} {}",
                  dtype_name(primal.dtype()), shape_str(primal.shape()), dtype_name(tangent.dtype()),
                  shape_str(tangent.shape()));
}

}  // namespace

void set_tangent(const Tensor& t, const Tensor& tangent) {
  check_dual("set_tangent", t, tangent);
  detail::set_tangent(t, tangent);
}

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  check_dual("make_dual", primal, tangent);
  // y = x, sharing x's data:  dx = dy,  ẏ = the given tangent
  Tensor dual(std::make_shared<TensorImpl>(primal.impl()->storage, primal.shape(), primal.dtype()));
  dual = record(
      "make_dual", dual, {primal},
      [](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy}; }, Saved{},
      BackwardOrder::AnyOrder, [](const std::vector<Tensor>& t) { return t[0]; });
  detail::set_tangent(dual, tangent);
  return dual;
}

Tensor tangent(const Tensor& t) {
  check_defined("tangent", t);
  return detail::live_tangent(t, "tangent");
}

UnpackedDual unpack_dual(const Tensor& t) {
  check_defined("unpack_dual", t);
  return {t.detach(), detail::live_tangent(t, "unpack_dual")};
}

}  // namespace fwad

namespace detail {

bool propagating_tangents() {
  const ThreadContext& context = thread_context();
  return context.forward_level != 0 && !context.in_forward_rule;
}

std::uint64_t live_level() { return thread_context().forward_level; }

bool any_tangent(const std::vector<Tensor>& inputs) {
  if (!propagating_tangents()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && live_tangent(t).defined()) return true;
  return false;
}

Tensor live_tangent(const Tensor& t, std::string_view op) {
  const TensorImpl& impl = *t.impl();
  std::uint64_t level = thread_context().forward_level;
  if (level == 0 || impl.tangent_level != level || !impl.tangent) return {};
  if (impl.storage->version() != impl.tangent_version)
    throw_state(op,
                "a tensor of shape {} was written in place after it got its forward-mode tangent (version {}, now "
                "{}), so the tangent no longer describes it; inside a DualLevel, change tensors out of place (or give "
                "the tangent again with ag::fwad::set_tangent)",
                shape_str(impl.shape), impl.tangent_version, impl.storage->version());
  return Tensor(impl.tangent);
}

void set_tangent(const Tensor& t, const Tensor& tangent) {
  TensorImpl& impl = *t.impl();
  impl.tangent = tangent.impl();
  impl.tangent_level = thread_context().forward_level;
  impl.tangent_version = impl.storage->version();
  if (t_duals.size() >= t_prune_at) {
    std::erase_if(t_duals, [](const std::weak_ptr<TensorImpl>& w) { return w.expired(); });
    t_prune_at = 2 * t_duals.size() + 64;
  }
  t_duals.push_back(t.impl());
}

ForwardRuleScope::ForwardRuleScope(bool in_rule) : previous(thread_context().in_forward_rule) {
  thread_context().in_forward_rule = in_rule;
}
ForwardRuleScope::~ForwardRuleScope() { thread_context().in_forward_rule = previous; }

Tensor jvp_by_composition(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const std::vector<Tensor>& tangents) {
  ForwardRuleScope propagate(/*in_rule=*/false);
  NoGradGuard no_grad;
  std::vector<Tensor> duals(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    const TensorImpl& in = *inputs[i].impl();
    duals[i] = Tensor(std::make_shared<TensorImpl>(in.storage, in.shape, in.dtype));
    if (i < tangents.size() && tangents[i].defined()) set_tangent(duals[i], tangents[i]);
  }
  Tensor y = f(duals);
  Tensor tangent = live_tangent(y);
  return tangent.defined() ? tangent : zeros_like(y);
}

}  // namespace detail

}  // namespace ag
