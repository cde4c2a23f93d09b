#include "module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include <unordered_set>

#include "../runtime/error.h"

namespace ag::nn {

std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : type.name();
}

void Module::check_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw_invalid("Module", "name '{}' must be non-empty and contain no '.'", name);
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  if (taken(parameters_) || taken(buffers_) || taken(children_))
    throw_invalid("Module", "name '{}' is already registered", name);
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_name(name);
  if (!value.defined() || !is_floating(value.dtype()))
    throw_invalid("Module", "parameter '{}' must be a float32 or float64 tensor", name);
  value.requires_grad_(true);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_name(name);
  if (!value.defined()) throw_invalid("Module", "buffer '{}' is an undefined tensor", name);
  buffers_.emplace_back(name, value);
  return value;
}

void Module::collect(const std::string& prefix, bool buffers, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", buffers, out);
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> all, unique;
  collect("", false, all);
  std::unordered_set<const TensorImpl*> seen;  // a tensor shared by two modules counts once
  for (auto& p : all)
    if (seen.insert(p.second.impl().get()).second) unique.push_back(std::move(p));
  return unique;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect("", true, out);
  return out;
}

std::int64_t Module::parameter_count() const {
  std::int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::zero_grad() {
  for (Tensor t : parameters()) t.zero_grad();
}

namespace {
template <class M, class Out>
void walk(M& module, const std::string& path, Out& out) {
  out.emplace_back(path, &module);
  for (auto& [name, child] : module.named_children()) walk(*child, path.empty() ? name : path + "." + name, out);
}
}  // namespace

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  walk(*this, "", out);
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  walk(*this, "", out);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [_, m] : named_modules()) fn(*m);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, child] : children_) child->train(on);
}

void Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw_invalid("Module::to", "modules hold float tensors; cannot convert to {}", dtype_name(dtype));
  for (Tensor t : parameters())
    if (t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  for (auto& [_, t] : named_buffers())
    if (is_floating(t.dtype()) && t.dtype() != dtype) Tensor(t).set_data(t.detach().to(dtype));
}

}  // namespace ag::nn
