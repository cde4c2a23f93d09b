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
//
// Each optimizer has its own options type with torch.optim's defaults, and each parameter
// group may override any of them, as a torch.optim param group does: every symbol above is
// read from the parameter's group.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "module.h"

namespace ag::optim {

// A set of parameters and the options it sets for itself (e.g. matrices decayed, biases and
// norms not). An option left unset takes the optimizer's value, as in a torch.optim param
// group; setting one the optimizer does not have (beta1 for SGD) is an error.
struct ParamGroup {
  std::vector<Tensor> params;
  // (Each "= {}" only spares {params} or {params, 0.1} a warning about the fields it leaves out.)
  std::optional<double> weight_decay = {};  // second, so that {params, 0.1} reads as before
  std::optional<double> lr = {};
  std::optional<double> momentum = {}, dampening = {};     // SGD
  std::optional<bool> nesterov = {};                       // SGD
  std::optional<double> beta1 = {}, beta2 = {}, eps = {};  // Adam, AdamW
};

// torch.optim.SGD's defaults, except lr: torch requires it; here it defaults to 1e-3.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// torch.optim.Adam's defaults (torch's betas = (beta1, beta2)). The weight decay is L2: added
// to the gradient.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// torch.optim.AdamW's defaults: Adam's, but a weight decay of 1e-2, decoupled from the
// gradient. A type of its own, so that AdamW(params, {.lr = x}) decays at 1e-2.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class Optimizer {
 public:
  // `name` ("SGD", "AdamW") starts every error message the optimizer throws.
  Optimizer(std::string name, std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  void zero_grad();  // forgets every parameter's gradient
  const std::string& name() const { return name_; }
  std::size_t group_count() const { return group_params_.size(); }
  std::int64_t steps_taken() const { return steps_; }

  // lr(): the optimizer's own learning rate (its options', or the last set_lr's); lr(group):
  // the one that group uses. set_lr(lr) sets the optimizer's and every group's, a group's own
  // lr included, as `for g in optimizer.param_groups: g["lr"] = lr` does in PyTorch: the rule
  // the schedules here follow. set_lr(group, lr) sets one group's. lr >= 0.
  virtual double lr() const = 0;
  virtual double lr(std::size_t group) const = 0;
  virtual void set_lr(double lr) = 0;
  virtual void set_lr(std::size_t group, double lr) = 0;

  // The optimizer's state as named tensors ("step", "0.exp_avg", ...), for checkpoints, and
  // back. load_state checks every name and shape before changing anything, and that each
  // parameter has all of its slots or none (none: it has had no gradient yet). Options are
  // not part of the state: the optimizer that loads it keeps its own.
  std::vector<nn::NamedTensor> state() const;
  void load_state(const std::vector<nn::NamedTensor>& state);

 protected:
  // Per-parameter state tensors, created zero on first use; slot_names_ says what each is.
  Tensor& slot(std::size_t param_index, std::size_t which);
  bool has_slot(std::size_t param_index, std::size_t which) const;
  // Calls visit(index, param, grad, group) for every parameter that has a gradient.
  template <class F>
  void for_each_with_grad(F&& visit) {
    std::size_t index = 0;
    for (std::size_t group = 0; group < group_params_.size(); ++group)
      for (Tensor& p : group_params_[group]) {
        std::size_t i = index++;
        Tensor grad = p.grad();
        if (grad.defined()) visit(i, p, grad, group);
      }
  }
  std::string name_;
  std::vector<std::vector<Tensor>> group_params_;  // [group][parameter]
  std::vector<std::string> slot_names_;
  std::int64_t steps_ = 0;

 private:
  std::vector<std::vector<Tensor>> slots_;  // [parameter][which]
  std::size_t parameter_count() const;
  void check_all_or_none(std::size_t index, const std::vector<Tensor>& slots) const;
};

// An optimizer whose options are of type Options: its own (`options()`, torch's
// optimizer.defaults) and each group's, resolved once at construction (`group_options(g)`).
// Both are read-only but for set_lr: a change to the optimizer's own options after the groups
// were resolved would reach no group.
template <class Options>
class OptimizerWith : public Optimizer {
 public:
  const Options& options() const { return options_; }
  const Options& group_options(std::size_t group) const;
  double lr() const override { return options_.lr; }
  double lr(std::size_t group) const override { return group_options(group).lr; }
  void set_lr(double lr) override;
  void set_lr(std::size_t group, double lr) override;

 protected:
  OptimizerWith(std::string name, std::vector<ParamGroup> groups, Options defaults);
  Options options_;
  std::vector<Options> group_options_;
};
extern template class OptimizerWith<SGDOptions>;  // both defined in optim.cpp
extern template class OptimizerWith<AdamOptions>;

class SGD : public OptimizerWith<SGDOptions> {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  void step() override;
};

class Adam : public OptimizerWith<AdamOptions> {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  void step() override;

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  bool decoupled_;
};

// Adam with decoupled weight decay. Its options() and group options are AdamOptions (the same
// fields); only the type it is given, AdamWOptions, has AdamW's defaults.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
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
