#include "optim.h"

#include <algorithm>

#include <cmath>
#include <numbers>
#include <unordered_map>

#include "../autograd/dispatch.h"
#include "../autograd/grad_mode.h"
#include "../ops/reference/reference.h"
#include "../ops/route.h"
#include "../runtime/error.h"
#include "../runtime/profile.h"

namespace ag::optim {

namespace {
std::vector<ParamGroup> one_group(std::vector<Tensor> params) { return {ParamGroup{std::move(params)}}; }

// "0", "17": a parameter's index as state() writes it. Not "01", "+1" or "1x", which stoul
// would take, so that one index has one spelling.
bool plain_index(const std::string& text, std::size_t& index) {
  if (text.empty() || text.size() > 9 || (text.size() > 1 && text[0] == '0')) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  index = std::stoul(text);
  return true;
}

AdamOptions as_adam(const AdamWOptions& o) { return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}; }

// Resolving a group's options: each option the group sets replaces the optimizer's; an option
// this optimizer has no use for is refused rather than silently ignored.
template <class T>
void take(T& option, const std::optional<T>& group_value) {
  if (group_value) option = *group_value;
}
template <class T>
void refuse(const std::optional<T>& group_value, const char* option, const std::string& name, std::size_t group) {
  if (group_value) throw_invalid(name, "group {} sets {}, which {} does not have", group, option, name);
}

SGDOptions resolve(SGDOptions o, const ParamGroup& g, const std::string& name, std::size_t group) {
  refuse(g.beta1, "beta1", name, group);
  refuse(g.beta2, "beta2", name, group);
  refuse(g.eps, "eps", name, group);
  take(o.lr, g.lr);
  take(o.weight_decay, g.weight_decay);
  take(o.momentum, g.momentum);
  take(o.dampening, g.dampening);
  take(o.nesterov, g.nesterov);
  return o;
}

AdamOptions resolve(AdamOptions o, const ParamGroup& g, const std::string& name, std::size_t group) {
  refuse(g.momentum, "momentum", name, group);
  refuse(g.dampening, "dampening", name, group);
  refuse(g.nesterov, "nesterov", name, group);
  take(o.lr, g.lr);
  take(o.weight_decay, g.weight_decay);
  take(o.beta1, g.beta1);
  take(o.beta2, g.beta2);
  take(o.eps, g.eps);
  return o;
}

// `where` is "" for the optimizer's own options and " (group N)" for a group's. The negated
// comparisons also refuse NaN.
void check_lr(double lr, const std::string& name, const std::string& where) {
  if (!(lr >= 0)) throw_invalid(name, "learning rate must be non-negative, got {}{}", lr, where);
}

void check(const SGDOptions& o, const std::string& name, const std::string& where) {
  check_lr(o.lr, name, where);
  if (!(o.weight_decay >= 0)) throw_invalid(name, "weight decay must be non-negative, got {}{}", o.weight_decay, where);
  if (!(o.momentum >= 0)) throw_invalid(name, "momentum must be non-negative, got {}{}", o.momentum, where);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw_invalid(name, "nesterov momentum needs momentum > 0 and dampening 0{}", where);
}

void check(const AdamOptions& o, const std::string& name, const std::string& where) {
  check_lr(o.lr, name, where);
  if (!(o.weight_decay >= 0)) throw_invalid(name, "weight decay must be non-negative, got {}{}", o.weight_decay, where);
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
    throw_invalid(name, "betas must be in [0, 1), got ({}, {}){}", o.beta1, o.beta2, where);
  if (!(o.eps >= 0)) throw_invalid(name, "eps must be non-negative, got {}{}", o.eps, where);
}

std::vector<std::vector<Tensor>> params_of(const std::vector<ParamGroup>& groups) {
  std::vector<std::vector<Tensor>> params;
  for (const ParamGroup& g : groups) params.push_back(g.params);
  return params;
}

}  // namespace

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups)
    : name_(std::move(name)), group_params_(params_of(groups)) {
  // A parameter listed twice would be updated twice per step.
  std::unordered_map<const TensorImpl*, std::size_t> index_of;
  std::size_t index = 0;
  for (const auto& params : group_params_)
    for (const Tensor& p : params) {
      if (!p.defined() || !p.requires_grad() || !p.is_leaf())
        throw_invalid(name_, "every parameter must be a leaf tensor that requires grad");
      auto [it, first] = index_of.try_emplace(p.impl().get(), index);
      if (!first)
        throw_invalid(name_, "parameter {} (shape {}) is parameter {} again; list each parameter once", index,
                      shape_str(p.shape()), it->second);
      ++index;
    }
  slots_.resize(parameter_count());
}

template <class Options>
OptimizerWith<Options>::OptimizerWith(std::string name, std::vector<ParamGroup> groups, Options defaults)
    : Optimizer(std::move(name), groups), options_(defaults) {
  check(options_, name_, "");
  for (std::size_t g = 0; g < groups.size(); ++g) {
    group_options_.push_back(resolve(options_, groups[g], name_, g));
    check(group_options_.back(), name_, fmt::format(" (group {})", g));
  }
}

template <class Options>
const Options& OptimizerWith<Options>::group_options(std::size_t group) const {
  if (group >= group_options_.size())
    throw_invalid(name_, "there is no group {}: the optimizer has {} group{}", group, group_options_.size(),
                  group_options_.size() == 1 ? "" : "s");
  return group_options_[group];
}

template <class Options>
void OptimizerWith<Options>::set_lr(double lr) {
  check_lr(lr, name_, "");
  options_.lr = lr;
  for (Options& g : group_options_) g.lr = lr;
}

template <class Options>
void OptimizerWith<Options>::set_lr(std::size_t group, double lr) {
  group_options(group);  // checks the index
  check_lr(lr, name_, fmt::format(" (group {})", group));
  group_options_[group].lr = lr;
}

template class OptimizerWith<SGDOptions>;
template class OptimizerWith<AdamOptions>;

std::size_t Optimizer::parameter_count() const {
  std::size_t n = 0;
  for (const auto& params : group_params_) n += params.size();
  return n;
}

void Optimizer::zero_grad() {
  profile::Scope scope(profile::Family::Optimizer);
  for (auto& params : group_params_)
    for (Tensor& p : params) p.zero_grad();
}

Tensor& Optimizer::slot(std::size_t param_index, std::size_t which) {
  auto& s = slots_[param_index];
  if (s.size() <= which) s.resize(slot_names_.size());
  if (!s[which].defined()) {
    std::size_t i = 0;
    for (const auto& params : group_params_)
      for (const Tensor& p : params)
        if (i++ == param_index) s[which] = zeros(p.shape(), p.dtype());
  }
  return s[which];
}

bool Optimizer::has_slot(std::size_t param_index, std::size_t which) const {
  const auto& s = slots_[param_index];
  return which < s.size() && s[which].defined();
}

std::vector<nn::NamedTensor> Optimizer::state() const {
  std::vector<nn::NamedTensor> out{{"step", scalar(static_cast<double>(steps_), kInt64)}};
  for (std::size_t i = 0; i < slots_.size(); ++i)
    for (std::size_t w = 0; w < slots_[i].size(); ++w)
      if (slots_[i][w].defined()) out.emplace_back(fmt::format("{}.{}", i, slot_names_[w]), slots_[i][w]);
  return out;
}

// A parameter's slots (Adam's two moments) come into being together at its first step: a state
// holding some of them is damaged, and a step from it would read a zero moment as if it were real.
void Optimizer::check_all_or_none(std::size_t index, const std::vector<Tensor>& slots) const {
  auto present = std::find_if(slots.begin(), slots.end(), [](const Tensor& t) { return t.defined(); });
  auto missing = std::find_if(slots.begin(), slots.end(), [](const Tensor& t) { return !t.defined(); });
  if (present != slots.end() && missing != slots.end())
    throw_invalid(name_, "state has '{}.{}' but not '{}.{}': a parameter has all of its slots or none", index,
                  slot_names_[static_cast<std::size_t>(present - slots.begin())], index,
                  slot_names_[static_cast<std::size_t>(missing - slots.begin())]);
}

void Optimizer::load_state(const std::vector<nn::NamedTensor>& state) {
  std::vector<std::vector<Tensor>> loaded(slots_.size(), std::vector<Tensor>(slot_names_.size()));
  std::int64_t step = -1;
  std::vector<const Tensor*> params;
  for (const auto& group : group_params_)
    for (const Tensor& p : group) params.push_back(&p);
  for (const auto& [name, t] : state) {
    if (name == "step") {
      if (t.dtype() != kInt64 || t.numel() != 1) throw_invalid(name_, "state 'step' must be one int64");
      step = t.item<std::int64_t>();
      continue;
    }
    auto dot = name.find('.');
    std::size_t index = 0, which = slot_names_.size();
    if (!plain_index(name.substr(0, dot), index)) throw_invalid(name_, "unexpected state entry '{}'", name);
    for (std::size_t w = 0; w < slot_names_.size(); ++w)
      if (dot != std::string::npos && name.substr(dot + 1) == slot_names_[w]) which = w;
    if (index >= params.size() || which == slot_names_.size())
      throw_invalid(name_, "unexpected state entry '{}' for {} parameters", name, params.size());
    const Tensor& p = *params[index];
    if (t.shape() != p.shape() || t.dtype() != p.dtype())
      throw_invalid(name_, "state '{}' is {} {} but parameter {} is {} {}", name, dtype_name(t.dtype()),
                    shape_str(t.shape()), index, dtype_name(p.dtype()), shape_str(p.shape()));
    loaded[index][which] = t.clone().detach();
  }
  if (step < 0) throw_invalid(name_, "state has no 'step' entry");
  for (std::size_t i = 0; i < loaded.size(); ++i) check_all_or_none(i, loaded[i]);
  slots_ = std::move(loaded);
  steps_ = step;
}

// ---------------------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(one_group(std::move(params)), o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : OptimizerWith("SGD", std::move(groups), o) {
  slot_names_ = {"momentum_buffer"};
}

void SGD::step() {
  profile::Scope scope(profile::Family::Optimizer);
  NoGradGuard no_grad;
  for_each_with_grad([&](std::size_t i, Tensor& p, const Tensor& grad, std::size_t group) {
    const SGDOptions& o = group_options_[group];
    bool first = !has_slot(i, 0);
    backends::SgdSettings settings{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first};
    dispatch_floating(p.dtype(), "SGD", [&](auto tag) {
      using T = decltype(tag);
      T* buf = o.momentum != 0 ? slot(i, 0).template mutable_data_ptr<T>() : nullptr;
      current_backend().table<T>().sgd_update(p.numel(), p.mutable_data_ptr<T>(), grad.data_ptr<T>(), buf, settings);
    });
  });
  ++steps_;
}

// ---------------------------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, AdamOptions o) : Adam(one_group(std::move(params)), o) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam("Adam", std::move(groups), o, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : OptimizerWith(std::move(name), std::move(groups), o), decoupled_(decoupled) {
  slot_names_ = {"exp_avg", "exp_avg_sq"};
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o) : AdamW(one_group(std::move(params)), o) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o) : Adam("AdamW", std::move(groups), as_adam(o), true) {}

void Adam::step() {
  profile::Scope scope(profile::Family::Optimizer);
  NoGradGuard no_grad;
  ++steps_;
  for_each_with_grad([&](std::size_t i, Tensor& p, const Tensor& grad, std::size_t group) {
    const AdamOptions& o = group_options_[group];
    dispatch_floating(p.dtype(), name_, [&](auto tag) {
      using T = decltype(tag);
      T* w = p.mutable_data_ptr<T>();
      const T* g = grad.data_ptr<T>();
      T* m = slot(i, 0).template mutable_data_ptr<T>();
      T* v = slot(i, 1).template mutable_data_ptr<T>();
      backends::AdamSettings settings{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled_, steps_};
      route_kernel(
          KernelOp::AdamUpdate,
          [&] { reference::adam_update(w, g, m, v, p.numel(), settings); },  // ops/reference/optim.cpp
          [&](const backends::Backend& kernels) { kernels.table<T>().adam_update(p.numel(), w, g, m, v, settings); });
    });
  });
}

// ---------------------------------------------------------------------------------------------

namespace {
// The gradients' global norm, and one scaling pass, by the backend's kernels.
double clip_grad_norm_by(const backends::Backend& kernels, const std::vector<Tensor>& params, double max_norm) {
  profile::Scope scope(profile::Family::Optimizer);
  double total = 0.0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = decltype(tag);
      total += kernels.table<T>().sum_of_squares(g.numel(), g.const_data_ptr<T>());
    });
  }
  double norm = std::sqrt(total);
  double scale = max_norm / (norm + 1e-6);
  if (scale >= 1.0) return norm;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = decltype(tag);
      kernels.table<T>().scale(g.numel(), g.mutable_data_ptr<T>(), scale);
    });
  }
  return norm;
}
}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  if (!(max_norm > 0)) throw_invalid("clip_grad_norm", "max_norm must be positive, got {}", max_norm);
  return route_kernel(
      KernelOp::ClipGradNorm,
      [&] {
        std::vector<Tensor> grads;
        for (const Tensor& p : params)
          if (p.grad().defined()) grads.push_back(p.grad());
        return reference::clip_grad_norm(grads, max_norm);
      },
      [&](const backends::Backend& kernels) { return clip_grad_norm_by(kernels, params, max_norm); });
}

double WarmupCosine::lr_at(std::int64_t step) const {
  if (step < 0) throw_invalid("WarmupCosine", "step must be non-negative, got {}", step);  // else a negative lr
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  double progress = static_cast<double>(step - warmup) / static_cast<double>(std::max<std::int64_t>(total - warmup, 1));
  return min_lr + 0.5 * (1 + std::cos(std::numbers::pi * progress)) * (max_lr - min_lr);
}

std::vector<ParamGroup> decay_groups(const nn::Module& model, double weight_decay) {
  // Both set their decay, so that the vectors are not decayed at an optimizer's default (AdamW's 1e-2).
  ParamGroup decayed{{}, weight_decay}, plain{{}, 0.0};
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decayed : plain).params.push_back(p);
  return {decayed, plain};
}

}  // namespace ag::optim
