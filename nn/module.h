// ag::nn::Module: the base of every layer and model.
//
// A module owns named parameters (tensors that require grad), named buffers (tensors that
// move with the module but are not trained, such as a sinusoidal table) and named
// submodules. Names nest with dots, so a parameter reads like a path through the model:
// "blocks.0.attn.q_proj.weight".
//
// Members are ordinary handles to the registered tensors; registering just also records them
// under a name. Parameters come back in a fixed order, a module's own (in registration order)
// before its submodules' (depth first), which is what optimizers and checkpoints rely on.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "../autograd/tensor.h"

namespace ag::nn {

using NamedTensor = std::pair<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its submodules, depth first, each tensor once.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module ("") and every submodule under its dotted path ("blocks.0.attn"), depth first,
  // parents before their children, as libtorch's named_modules() lists them.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  // Calls fn on this module, then on every submodule in named_modules() order (libtorch's
  // apply): an initialisation of one's own, say, with dynamic_cast to pick the layers.
  void apply(const std::function<void(Module&)>& fn);
  // The number of trainable scalars.
  std::int64_t parameter_count() const;

  void zero_grad();
  // Training mode (the default) or evaluation mode, for this module and every submodule.
  // Dropout is the identity in evaluation mode.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Converts every parameter and floating buffer in place (float32 <-> float64); a tensor
  // whose dtype changes loses its gradient.
  void to(DType dtype);

 protected:
  // Registers `value` as a trainable parameter (a float leaf; requires_grad is switched on).
  Tensor register_parameter(const std::string& name, Tensor value);
  // Registers a tensor that belongs to the module but is not trained.
  Tensor register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_name(name);
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void check_name(const std::string& name) const;
  void collect(const std::string& prefix, bool buffers, std::vector<NamedTensor>& out) const;

  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

std::string type_name(const std::type_info& type);  // "ag::nn::Linear", for messages

// A numbered list of modules of one type; its items are named "0", "1", ...
template <class M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> module) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(module)));
  }
  std::size_t size() const { return items_.size(); }
  M& operator[](std::size_t i) const {
    if (i >= items_.size())
      throw std::out_of_range("ModuleList<" + type_name(typeid(M)) + ">: index " + std::to_string(i) +
                              " is out of range for its " + std::to_string(items_.size()) + " modules");
    return *items_[i];
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace ag::nn
