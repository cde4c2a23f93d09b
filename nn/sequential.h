// nn::Sequential: modules applied one after another, y = m_{n-1}( ... m_1(m_0(x)) ... ).
//
//   auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::ReLU>(),
//                                               std::make_shared<nn::Linear>(16, 3));
//   Tensor logits = mlp->forward(x);   // or (*mlp)(x)
//
// Its items are registered as submodules named "0", "1", ..., so parameters read "0.weight",
// "2.bias", and a Sequential inside a larger model nests like any other module. Any module with
// a forward(const Tensor&) returning a Tensor fits: the layers, the activations below, a block,
// another Sequential. MultiHeadAttention, which takes a query and a key_value, does not.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers.h"
#include "module.h"

namespace ag::nn {

// A module that maps one tensor to one tensor.
template <class M>
concept TensorToTensor = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  template <TensorToTensor... Ms>
  explicit Sequential(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }

  template <TensorToTensor M>
  void push_back(std::shared_ptr<M> module) {
    if (!module) throw_null();
    std::string name = std::to_string(items_.size());
    register_module(name, module);
    items_.push_back({module, [m = module.get()](const Tensor& x) { return Tensor(m->forward(x)); }});
  }

  // Each module's forward on the previous one's output. A bad input inside one (the
  // std::invalid_argument every op throws for shapes and values) is re-thrown with the module's
  // place and type in front ("Sequential: module 1 (ag::nn::Linear): ..."); other exceptions,
  // such as anomaly mode's AnomalyError, pass through as they are, their type kept.
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  Module& operator[](std::size_t i) const { return *item(i).module; }
  // The i-th module as its own type, e.g. seq.ptr<Linear>(0)->weight; throws if it is another.
  template <class M>
  std::shared_ptr<M> ptr(std::size_t i) const {
    auto m = std::dynamic_pointer_cast<M>(item(i).module);
    if (!m) throw_wrong_type(i, typeid(M));
    return m;
  }

 private:
  struct Item {
    std::shared_ptr<Module> module;
    std::function<Tensor(const Tensor&)> forward;
  };
  const Item& item(std::size_t i) const;
  [[noreturn]] static void throw_null();
  [[noreturn]] void throw_wrong_type(std::size_t i, const std::type_info& wanted) const;

  std::vector<Item> items_;
};

// Activations as modules, so they can sit in a Sequential: each calls its op (ops/elementwise.h).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return x.relu(); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::None) : approximate(approximate) {}
  Tensor forward(const Tensor& x) const { return x.gelu(approximate); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  GeluApproximation approximate;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const { return x.tanh(); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const { return x.sigmoid(); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

}  // namespace ag::nn
