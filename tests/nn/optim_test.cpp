// Checks nn/optim.cpp: the first steps of each optimizer, with its defaults and with parameter
// groups that override them, against values worked out by hand from PyTorch's documented
// update rules (tools/optimizer_reference.py prints the same numbers from torch.optim),
// clipping, and the schedule.
#include <cmath>
#include <numbers>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;

// Gives p the gradient c (one value per element) through a real backward pass.
void set_grad(Tensor& p, const std::vector<double>& c) {
  p.zero_grad();
  (p * tensor(c, p.shape(), p.dtype())).sum().backward();
}

TEST(SGD, PlainMomentumWeightDecayNesterov) {
  // p0 = 1, gradient 0.5 at every step, lr = 0.1.
  Tensor p = ones({1}, kFloat64).requires_grad_();
  optim::SGD plain({p}, {.lr = 0.1});
  set_grad(p, {0.5});
  plain.step();
  EXPECT_DOUBLE_EQ(p.item(), 0.95);  // 1 - 0.1 * 0.5

  // momentum 0.9: b1 = 0.5, p1 = 0.95;  b2 = 0.9 * 0.5 + 0.5 = 0.95, p2 = 0.95 - 0.095 = 0.855
  Tensor q = ones({1}, kFloat64).requires_grad_();
  optim::SGD momentum({q}, {.lr = 0.1, .momentum = 0.9});
  for (double expected : {0.95, 0.855}) {
    set_grad(q, {0.5});
    momentum.step();
    EXPECT_NEAR(q.item(), expected, 1e-15);
  }

  // weight decay 0.1: d1 = 0.5 + 0.1 * 1 = 0.6, p1 = 0.94;  d2 = 0.5 + 0.094 = 0.594,
  // b2 = 0.9 * 0.6 + 0.594 = 1.134, p2 = 0.94 - 0.1134 = 0.8266
  Tensor r = ones({1}, kFloat64).requires_grad_();
  optim::SGD decayed({r}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  for (double expected : {0.94, 0.8266}) {
    set_grad(r, {0.5});
    decayed.step();
    EXPECT_NEAR(r.item(), expected, 1e-15);
  }

  // Nesterov: b1 = 0.5, step direction 0.5 + 0.9 * 0.5 = 0.95, p1 = 1 - 0.095 = 0.905
  Tensor s = ones({1}, kFloat64).requires_grad_();
  optim::SGD nesterov({s}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  set_grad(s, {0.5});
  nesterov.step();
  EXPECT_NEAR(s.item(), 0.905, 1e-15);

  // Options left out, as for Adam and AdamW: lr 1e-3 (the default optim.h documents), no
  // momentum. p1 = 1 - 0.001 * 0.5 = 0.9995
  Tensor t = ones({1}, kFloat64).requires_grad_();
  optim::SGD defaults({t});
  set_grad(t, {0.5});
  defaults.step();
  EXPECT_NEAR(t.item(), 0.9995, 1e-15);
}

TEST(Adam, FirstTwoSteps) {
  // p0 = 1, gradients 0.5 then -1, lr 0.1, betas (0.9, 0.999), eps 1e-8.
  // Step 1: m = 0.05, v = 0.00025; bias-corrected m/sqrt(v) = 0.5 / 0.5, so
  //         p1 = 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.900000002.
  // Step 2: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975;
  //         m / 0.19 = -0.2894737, sqrt(v / 0.001999) = 0.7906881;
  //         p2 = p1 + 0.1 * 0.2894737 / (0.7906881 + 1e-8) = 0.93661035424.
  Tensor p = ones({1}, kFloat64).requires_grad_();
  optim::Adam adam({p}, {.lr = 0.1});
  set_grad(p, {0.5});
  adam.step();
  EXPECT_NEAR(p.item(), 0.900000002, 1e-12);
  set_grad(p, {-1.0});
  adam.step();
  EXPECT_NEAR(p.item(), 0.9366103542405654, 1e-12);
}

TEST(Adam, L2WeightDecayEntersTheMoments) {
  // Adam's weight decay adds wd * p to the gradient: with p0 = 1, wd = 1 and gradient -1 the
  // effective gradient is 0, so the first step leaves p where it is.
  Tensor p = ones({1}, kFloat64).requires_grad_();
  optim::Adam adam({p}, {.lr = 0.1, .weight_decay = 1.0});
  set_grad(p, {-1.0});
  adam.step();
  EXPECT_DOUBLE_EQ(p.item(), 1.0);
}

TEST(AdamW, DecoupledDecay) {
  // Same gradients as above with weight decay 0.1: p is first shrunk by (1 - lr * wd) = 0.99.
  // Step 1: p1 = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.890000002.
  // Step 2: p2 = 0.99 * p1 + 0.0366103542 = 0.91771035422.
  Tensor p = ones({1}, kFloat64).requires_grad_();
  optim::AdamW adamw({p}, {.lr = 0.1, .weight_decay = 0.1});
  set_grad(p, {0.5});
  adamw.step();
  EXPECT_NEAR(p.item(), 0.890000002, 1e-12);
  set_grad(p, {-1.0});
  adamw.step();
  EXPECT_NEAR(p.item(), 0.9177103542205653, 1e-12);
  EXPECT_DOUBLE_EQ(optim::AdamW({p}).options().weight_decay, 1e-2);  // PyTorch's default
}

TEST(AdamW, DecaysAtTorchsDefaultWhenOnlyLrIsGiven) {
  // A zero gradient leaves m = v = 0, so the Adam part of the step is 0 / (0 + eps) = 0 and
  // the step is the decay alone: p = 2 becomes 2 (1 - lr wd) = 2 (1 - 0.5 0.01) = 1.99.
  EXPECT_EQ(optim::SGDOptions{}.weight_decay, 0.0);
  EXPECT_EQ(optim::AdamOptions{}.weight_decay, 0.0);
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 1e-2);
  Tensor p = full({1}, 2.0, kFloat64).requires_grad_();
  optim::AdamW adamw({p}, {.lr = 0.5});
  set_grad(p, {0.0});
  adamw.step();
  EXPECT_DOUBLE_EQ(p.item(), 2 * (1 - 0.5 * 0.01));

  // A group that sets no weight decay takes the same default; one that sets 0 is not decayed.
  Tensor q = full({1}, 2.0, kFloat64).requires_grad_(), r = full({1}, 2.0, kFloat64).requires_grad_();
  optim::AdamW grouped({optim::ParamGroup{{q}}, optim::ParamGroup{{r}, 0.0}}, {.lr = 0.5});
  set_grad(q, {0.0});
  set_grad(r, {0.0});
  grouped.step();
  EXPECT_DOUBLE_EQ(q.item(), 2 * (1 - 0.5 * 0.01));
  EXPECT_DOUBLE_EQ(r.item(), 2.0);

  // Adam's default is no decay at all: the same step leaves p where it is.
  Tensor s = full({1}, 2.0, kFloat64).requires_grad_();
  optim::Adam adam({s}, {.lr = 0.5});
  set_grad(s, {0.0});
  adam.step();
  EXPECT_DOUBLE_EQ(s.item(), 2.0);
}

// Groups that override some of the optimizer's options, one parameter each, p0 = 1 and the
// gradients 0.5 then -1 for every parameter. tools/optimizer_reference.py runs the same groups
// through torch.optim and checks these constants.
void expect_groups(optim::Optimizer& opt, std::vector<Tensor>& params, const std::vector<std::vector<double>>& expected,
                   double tolerance) {
  for (std::size_t step = 0; step < 2; ++step) {
    for (Tensor& p : params) set_grad(p, {step == 0 ? 0.5 : -1.0});
    opt.step();
    for (std::size_t g = 0; g < params.size(); ++g)
      EXPECT_NEAR(params[g].item(), expected[g][step], tolerance) << "group " << g << ", step " << step + 1;
  }
}

std::vector<Tensor> ones_params(std::size_t n) {
  std::vector<Tensor> params;
  for (std::size_t i = 0; i < n; ++i) params.push_back(ones({1}, kFloat64).requires_grad_());
  return params;
}

TEST(ParamGroups, SGDGroupsOverrideTheDefaults) {
  // Defaults lr 0.1, momentum 0.9.
  // group 0 (defaults): b1 = 0.5, p1 = 0.95;  b2 = 0.45 - 1 = -0.55, p2 = 0.95 + 0.055 = 1.005
  // group 1 (lr 0.05, momentum 0.5, wd 0.1): d1 = 0.6, p1 = 0.97;  d2 = -1 + 0.097 = -0.903,
  //         b2 = 0.3 - 0.903 = -0.603, p2 = 0.97 + 0.03015 = 1.00015
  // group 2 (dampening 0.5): b1 = 0.5 (undamped), p1 = 0.95;  b2 = 0.45 - 0.5 = -0.05, p2 = 0.955
  // group 3 (nesterov): p1 = 1 - 0.1 (0.5 + 0.45) = 0.905;  b2 = -0.55,
  //         p2 = 0.905 + 0.1 (1 + 0.495) = 1.0545
  std::vector<Tensor> p = ones_params(4);
  optim::SGD sgd(
      {optim::ParamGroup{{p[0]}}, optim::ParamGroup{.params = {p[1]}, .weight_decay = 0.1, .lr = 0.05, .momentum = 0.5},
       optim::ParamGroup{.params = {p[2]}, .dampening = 0.5}, optim::ParamGroup{.params = {p[3]}, .nesterov = true}},
      {.lr = 0.1, .momentum = 0.9});
  expect_groups(sgd, p, {{0.95, 1.005}, {0.97, 1.00015}, {0.95, 0.955}, {0.905, 1.0545}}, 1e-15);
  EXPECT_EQ(sgd.group_options(1).momentum, 0.5);
  EXPECT_EQ(sgd.group_options(2).momentum, 0.9);  // not set by the group: the optimizer's
}

TEST(ParamGroups, AdamGroupsOverrideTheDefaults) {
  // Defaults lr 0.1: group 0 repeats Adam.FirstTwoSteps.
  // group 1 (lr 0.05, betas (0.5, 0.9), eps 1e-3, wd 0.1): d1 = 0.5 + 0.1 = 0.6, m = 0.3,
  //         v = 0.036; m^ = 0.6, sqrt(v^) = 0.6; p1 = 1 - 0.05 0.6 / 0.601 = 0.9500831946755
  std::vector<Tensor> p = ones_params(2);
  optim::Adam adam(
      {optim::ParamGroup{{p[0]}},
       optim::ParamGroup{.params = {p[1]}, .weight_decay = 0.1, .lr = 0.05, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3}},
      {.lr = 0.1});
  expect_groups(adam, p, {{0.900000002, 0.9366103542405654}, {0.9500831946755408, 0.9760501106100353}}, 1e-12);
}

TEST(ParamGroups, AdamWGroupsOverrideTheDefaults) {
  // Defaults lr 0.1 and so weight decay 0.01.
  // group 0: p1 = 0.999 - 0.1 0.5 / (0.5 + 1e-8) = 0.899000002
  // group 1 (lr 0.05, wd 0): p1 = 1 - 0.05 0.5 / (0.5 + 1e-8) = 0.950000001
  // group 2 (beta2 0.99, eps 1e-6, wd 0.1): p1 = 0.99 - 0.1 0.5 / (0.5 + 1e-6) = 0.8900001999996
  std::vector<Tensor> p = ones_params(3);
  optim::AdamW adamw({optim::ParamGroup{{p[0]}}, optim::ParamGroup{.params = {p[1]}, .weight_decay = 0.0, .lr = 0.05},
                      optim::ParamGroup{.params = {p[2]}, .weight_decay = 0.1, .beta2 = 0.99, .eps = 1e-6}},
                     {.lr = 0.1});
  expect_groups(
      adamw, p,
      {{0.899000002, 0.9347113542385653}, {0.950000001, 0.9683051771202827}, {0.8900001999996, 0.917660923156587}},
      1e-12);
}

TEST(ParamGroups, SetLrSetsEveryGroupAndSetLrOfAGroupOnlyThatOne) {
  // Plain SGD, gradient 1: each step takes lr(group) off its parameter.
  std::vector<Tensor> p = ones_params(2);
  optim::SGD sgd({optim::ParamGroup{{p[0]}}, optim::ParamGroup{.params = {p[1]}, .lr = 0.2}}, {.lr = 0.1});
  auto step = [&] {
    for (Tensor& t : p) set_grad(t, {1.0});
    sgd.step();
  };
  EXPECT_EQ(sgd.lr(), 0.1);
  EXPECT_EQ(sgd.lr(1), 0.2);
  step();  // 0.9, 0.8
  sgd.set_lr(0.05);
  EXPECT_EQ(sgd.lr(), 0.05);
  EXPECT_EQ(sgd.lr(1), 0.05);  // the group's own 0.2 is replaced too
  step();                      // 0.85, 0.75
  sgd.set_lr(1, 0.5);
  EXPECT_EQ(sgd.lr(0), 0.05);
  step();  // 0.8, 0.25
  EXPECT_NEAR(p[0].item(), 0.8, 1e-15);
  EXPECT_NEAR(p[1].item(), 0.25, 1e-15);
}

// Parameters of 5000, 7, 13000, 1 and 9000 elements, float32 and float64 mixed, in two groups
// with different decay, updated on two threads (the larger ones split across both) for three
// steps: each element against the update written out in double here.
TEST(AdamW, ManyParametersOfBothDtypesInTwoGroupsFollowTheFormula) {
  int threads_before = get_num_threads();
  set_num_threads(2);
  std::vector<std::int64_t> sizes{5000, 7, 13000, 1, 9000};
  std::vector<Tensor> params;
  std::vector<std::vector<double>> w, m, v;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    std::vector<double> init(static_cast<std::size_t>(sizes[k]));
    for (std::size_t j = 0; j < init.size(); ++j) init[j] = std::sin(0.37 * static_cast<double>(j + 11 * k));
    Tensor p = from_vector(init, {sizes[k]}).to(k % 2 == 0 ? kFloat32 : kFloat64).requires_grad_();
    params.push_back(p);
    w.push_back(p.to(kFloat64).to_vector<double>());
    m.emplace_back(init.size(), 0.0);
    v.emplace_back(init.size(), 0.0);
  }
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd[2] = {0.1, 0.0};
  optim::AdamW adamw({{{params[0], params[1], params[2]}, wd[0]}, {{params[3], params[4]}, wd[1]}}, {.lr = lr});
  for (int t = 1; t <= 3; ++t) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      std::vector<double> g(static_cast<std::size_t>(sizes[k]));
      for (std::size_t j = 0; j < g.size(); ++j) g[j] = std::cos(0.11 * static_cast<double>(j) + t + k);
      set_grad(params[k], g);
      double decay = 1 - lr * wd[k < 3 ? 0 : 1];
      for (std::size_t j = 0; j < g.size(); ++j) {
        m[k][j] = b1 * m[k][j] + (1 - b1) * g[j];
        v[k][j] = b2 * v[k][j] + (1 - b2) * g[j] * g[j];
        double m_hat = m[k][j] / (1 - std::pow(b1, t)), v_hat = v[k][j] / (1 - std::pow(b2, t));
        w[k][j] = w[k][j] * decay - lr * m_hat / (std::sqrt(v_hat) + eps);
      }
    }
    adamw.step();
  }
  for (std::size_t k = 0; k < sizes.size(); ++k)
    EXPECT_TRUE(all_close(params[k].detach(), w[k], k % 2 == 0 ? 2e-6 : 1e-12)) << "parameter " << k;
  set_num_threads(threads_before);
}

TEST(Optimizer, SkipsParametersWithoutGradientAndZeroGrad) {
  Tensor a = ones({2}, kFloat64).requires_grad_(), b = ones({2}, kFloat64).requires_grad_();
  optim::Adam adam({a, b}, {.lr = 0.1});
  set_grad(a, {1, 1});
  adam.step();
  EXPECT_TRUE(all_close(b, {1, 1}, 0));
  EXPECT_LT(a.at<double>({0}), 1.0);
  adam.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Optimizer, StateRoundTripContinuesIdentically) {
  // Two optimizers: one runs 3 steps; the other runs 1, takes the first's state after 1 step
  // (through state()/load_state()), and must then match it exactly.
  Tensor p = tensor({1, -2}, {2}, kFloat64).requires_grad_();
  Tensor q = tensor({1, -2}, {2}, kFloat64).requires_grad_();
  optim::AdamW first({p}, {.lr = 0.05}), second({q}, {.lr = 0.05});
  set_grad(p, {0.3, -0.7});
  first.step();
  auto saved = first.state();
  EXPECT_EQ(saved.size(), 3u);  // step, 0.exp_avg, 0.exp_avg_sq
  q.set_data(p.detach().clone());
  q.requires_grad_(true);
  second.load_state(saved);
  for (auto g : {std::vector<double>{0.1, 0.2}, std::vector<double>{-0.5, 0.4}}) {
    set_grad(p, g);
    set_grad(q, g);
    first.step();
    second.step();
  }
  EXPECT_TRUE(all_close(q, p, 0));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        second.load_state({{"step", scalar(1, kInt64)}, {"0.exp_avg", ones({3}, kFloat64)}});
      },
      "AdamW: state '0.exp_avg' is float64 [3] but parameter 0 is float64 [2]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        second.load_state({{"step", scalar(1, kInt64)}, {"0.bogus", ones({2}, kFloat64)}});
      },
      "AdamW: unexpected state entry '0.bogus'"));
}

TEST(ClipGradNorm, ScalesOnlyWhenAboveTheLimit) {
  Tensor a = zeros({2}, kFloat64).requires_grad_(), b = zeros({1}, kFloat64).requires_grad_();
  set_grad(a, {3, 0});
  set_grad(b, {4});
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a, b}, 10.0), 5.0);  // below the limit: unchanged
  EXPECT_TRUE(all_close(a.grad(), {3, 0}, 0));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a, b}, 1.0), 5.0);
  double scale = 1.0 / (5.0 + 1e-6);
  EXPECT_TRUE(all_close(a.grad(), {3 * scale, 0}, 1e-15));
  EXPECT_TRUE(all_close(b.grad(), {4 * scale}, 1e-15));
}

TEST(WarmupCosine, Shape) {
  optim::WarmupCosine s{.warmup = 10, .total = 110, .max_lr = 1.0, .min_lr = 0.1};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);  // (0 + 1) / 10 of the way up
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);     // the top of the cosine
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-15);  // halfway down: min + (max - min) / 2
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(500), 0.1);
}

TEST(DecayGroups, MatricesDecayVectorsDoNot) {
  nn::Linear layer(3, 2);
  auto groups = optim::decay_groups(layer, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params.size(), 1u);  // weight
  EXPECT_EQ(groups[0].weight_decay, 0.1);
  EXPECT_EQ(groups[1].params.size(), 1u);  // bias
  EXPECT_EQ(groups[1].weight_decay, 0.0);
}

TEST(Optimizer, Errors) {
  Tensor p = ones({1}, kFloat64).requires_grad_();
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { optim::SGD({p}, {.lr = -1}); },
                                                 "SGD: learning rate must be non-negative"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { optim::Adam({p}, {.beta1 = 1.0}); }, "Adam: betas must be in [0, 1)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { optim::SGD({ones({1})}, {}); },
                                                 "SGD: every parameter must be a leaf tensor that requires grad"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { optim::AdamW({p}, {.eps = -1e-8}); },
                                                 "AdamW: eps must be non-negative, got -1e-08"));
  // A group's own bad value names the group.
  Tensor q = ones({1}, kFloat64).requires_grad_();
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        optim::Adam({optim::ParamGroup{{p}}, optim::ParamGroup{.params = {q}, .lr = -1.0}});
      },
      "Adam: learning rate must be non-negative, got -1 (group 1)"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { optim::AdamW({optim::ParamGroup{.params = {p}, .beta2 = 1.0}}); },
                                         "AdamW: betas must be in [0, 1), got (0.9, 1) (group 0)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { optim::Adam({optim::ParamGroup{.params = {p}, .eps = -1.0}}); },
                                                 "Adam: eps must be non-negative, got -1 (group 0)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        optim::SGD({optim::ParamGroup{{p}}, optim::ParamGroup{{q}, -0.5}}, {});
      },
      "SGD: weight decay must be non-negative, got -0.5 (group 1)"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { optim::SGD({optim::ParamGroup{.params = {p}, .nesterov = true}}, {}); },
                                         "SGD: nesterov momentum needs momentum > 0 and dampening 0 (group 0)"));
  // An option the optimizer does not have is refused, not ignored.
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { optim::SGD({optim::ParamGroup{.params = {p}, .beta1 = 0.5}}, {}); },
                                         "SGD: group 0 sets beta1, which SGD does not have"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        optim::AdamW({optim::ParamGroup{{p}}, optim::ParamGroup{.params = {q}, .momentum = 0.9}});
      },
      "AdamW: group 1 sets momentum, which AdamW does not have"));
  optim::SGD sgd({p}, {});
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { sgd.set_lr(0, -0.1); },
                                                 "SGD: learning rate must be non-negative, got -0.1 (group 0)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { sgd.set_lr(1, 0.1); },
                                                 "SGD: there is no group 1: the optimizer has 1 group"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { optim::clip_grad_norm({p}, 0); },
                                                 "clip_grad_norm: max_norm must be positive"));
}

}  // namespace
}  // namespace ag
