// ag::optim: optimizers and the learning-rate schedule, with PyTorch's semantics and defaults.
//
// Each step reads p.grad() and updates p in place (no graph is recorded). Parameters whose
// gradient is undefined are skipped, as PyTorch skips a None grad.
//
//   SGD     g = grad + wd p;  b = mu b + (1 - dampening) g  (b = g on the first step);
//           g = nesterov ? g + mu b : b;  p -= lr g
//   (b starts as g the first time a parameter has a gradient.)
//   Adam    g = grad + wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//           p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   AdamW   p -= lr wd p  (decoupled: the decay never enters m or v), then Adam with wd = 0
//   (t counts optimizer steps, shared by all parameters.)
#pragma once

#include <string>
#include <vector>

#include "module.h"

namespace ag::optim {

// A set of parameters sharing a weight decay (e.g. matrices decayed, biases and norms not).
struct ParamGroup {
  std::vector<Tensor> params;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  // `name` ("SGD", "AdamW") starts every error message the optimizer throws.
  Optimizer(std::string name, std::vector<ParamGroup> groups, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  void zero_grad();  // forgets every parameter's gradient
  double lr() const { return lr_; }
  const std::string& name() const { return name_; }
  void set_lr(double lr);  // lr >= 0, as in the constructor
  std::int64_t steps_taken() const { return steps_; }

  // The optimizer's state as named tensors ("step", "0.exp_avg", ...), for checkpoints, and
  // back. load_state checks every name and shape before changing anything, and that each
  // parameter has all of its slots or none (none: it has had no gradient yet).
  std::vector<nn::NamedTensor> state() const;
  void load_state(const std::vector<nn::NamedTensor>& state);

 protected:
  // Per-parameter state tensors, created zero on first use; slot_names_ says what each is.
  Tensor& slot(std::size_t param_index, std::size_t which);
  bool has_slot(std::size_t param_index, std::size_t which) const;
  // Calls visit(index, param, grad, weight_decay) for every parameter that has a gradient.
  template <class F>
  void for_each_with_grad(F&& visit) {
    std::size_t index = 0;
    for (auto& group : groups_)
      for (Tensor& p : group.params) {
        std::size_t i = index++;
        Tensor grad = p.grad();
        if (grad.defined()) visit(i, p, grad, group.weight_decay);
      }
  }
  std::string name_;
  std::vector<ParamGroup> groups_;
  std::vector<std::string> slot_names_;
  double lr_;
  std::int64_t steps_ = 0;

 private:
  std::vector<std::vector<Tensor>> slots_;  // [parameter][which]
  std::size_t parameter_count() const;
  void check_all_or_none(std::size_t index, const std::vector<Tensor>& slots) const;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  void step() override;
  SGDOptions options;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient.  AdamW default: 1e-2, decoupled.
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  void step() override;
  AdamOptions options;

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = {.weight_decay = 1e-2});
  AdamW(std::vector<ParamGroup> groups, AdamOptions options = {.weight_decay = 1e-2});
};

// Scales all gradients together so their global L2 norm is at most max_norm; returns the norm
// before clipping. As PyTorch: scale = max_norm / (norm + 1e-6), applied only when below 1.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// Linear warm-up to max_lr over `warmup` steps, then cosine decay to min_lr at `total` steps,
// then min_lr.
struct WarmupCosine {
  std::int64_t warmup = 100, total = 1000;
  double max_lr = 1e-3, min_lr = 1e-4;
  double lr_at(std::int64_t step) const;
};

// Weight decay on matrices and embeddings (dim >= 2), none on biases and norm gains: the
// usual split for Transformers.
std::vector<ParamGroup> decay_groups(const nn::Module& model, double weight_decay);

}  // namespace ag::optim
