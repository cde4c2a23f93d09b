// How sharp does the Mini-GPT's loss get while it trains, and what does the step size have to
// do with it?
//
// The sharpness is the largest eigenvalue λ of the loss's Hessian H. Gradient descent with step
// η on a quadratic whose curvature is λ multiplies the error along that direction by (1 − ηλ)
// each step: it shrinks only while λ < 2/η. Cohen et al. (2021, "Gradient descent on neural
// networks typically occurs at the edge of stability") saw full-batch gradient descent drive λ
// up during training ("progressive sharpening") until it reaches 2/η, then hover there while
// the loss keeps falling, unevenly. Adam moves along P⁻¹g, so what it sees is the preconditioned
// Hessian P⁻¹H, P = (1 − β1^t)(√v̂ + ε); with momentum β1 its threshold is
// (2 + 2β1) / ((1 − β1) η) = 38/η for β1 = 0.9 (Cohen et al., 2022, "Adaptive gradient methods
// at the edge of stability").
//
// This experiment trains the experiments' small Mini-GPT full-batch on a fixed set of windows,
// with plain gradient descent and with AdamW, each with and without the 1/sqrt(d_k) of the
// attention scores, and every --every steps measures λ (of H, or of P⁻¹H for AdamW)
// by power iteration on Hessian-vector products (ag::hvp, forward over reverse).
#include <cmath>
#include <filesystem>
#include <optional>

#include "../common/plot.h"
#include "../common/progress.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

using Params = std::vector<Tensor>;

double dot(const Params& a, const Params& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] * b[i]).sum().item();
  return s;
}
Params scaled(const Params& a, double c) {
  Params out;
  for (const Tensor& t : a) out.push_back(t * c);
  return out;
}
Params times(const Params& a, const Params& b) {  // elementwise
  Params out;
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(a[i] * b[i]);
  return out;
}
Params minus(const Params& a, const Params& b) {
  Params out;
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(a[i] - b[i]);
  return out;
}

// The largest eigenvalue of a symmetric operator A, seen only through u -> A u, by power
// iteration from `u` (kept across calls: the top eigenvector moves little between two
// measurements, so a warm start needs few iterations). Power iteration finds the eigenvalue of
// largest magnitude; when that one is negative, it runs again on A − μ I (μ that eigenvalue),
// whose largest-magnitude eigenvalue is then the largest of A, shifted.
struct TopEigen {
  double value = 0;
  double residual = 0;  // |A u − value u| / |value| at the unit vector u found: 0 for an exact pair
};
TopEigen top_eigenvalue(const std::function<Params(const Params&)>& apply, Params& u, int iterations) {
  auto power = [&](double shift) {
    Params au;
    double value = 0;
    for (int i = 0; i < iterations; ++i) {
      u = scaled(u, 1 / std::sqrt(dot(u, u)));
      au = apply(u);
      if (shift != 0) au = minus(au, scaled(u, shift));
      value = dot(u, au);  // the Rayleigh quotient
      u = au;
    }
    u = scaled(u, 1 / std::sqrt(dot(u, u)));
    return value + shift;
  };
  double value = power(0);
  if (value < 0) value = power(value);
  Params au = apply(u);
  Params r = minus(au, scaled(u, value));
  return {value, std::sqrt(dot(r, r)) / std::abs(value)};
}

struct Run {
  std::string label;
  std::vector<double> steps, sharpness;  // at each measurement
  std::vector<double> loss;              // every step
  double threshold = 0;                           // 2/η, or 38/η for AdamW
  double last_residual = 0;
  bool diverged = false;  // the loss stopped being finite
  std::int64_t diverged_at = 0;
};

// One run: `steps` full-batch steps of gradient descent (adamw false) or AdamW on `data`, λ
// measured before step 0 (gradient descent only: AdamW's P needs a gradient first), every
// `every` steps and after the last. AdamW's λ uses the P of the step just taken, at the weights
// it led to. A loss that stops being finite ends the run.
Run train_and_measure(const Text& text, const ag::data::TextDataset::Batch& data, const Options& o, bool adamw,
                      bool scaled_scores, double lr, std::int64_t every, int iterations) {
  ag::Generator gen(o.seed);
  ag::nn::GPT model(small_gpt(text.tokenizer.size()), gen);
  if (!scaled_scores)
    for (std::size_t i = 0; i < model.blocks->size(); ++i) (*model.blocks)[i].attn->scale = 1.0;
  Params params = model.parameters();
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  std::optional<ag::optim::SGD> sgd;
  std::optional<ag::optim::AdamW> adam;
  if (adamw)
    adam.emplace(params, ag::optim::AdamWOptions{.lr = lr, .beta1 = kBeta1, .beta2 = kBeta2, .eps = kEps});
  else
    sgd.emplace(params, ag::optim::SGDOptions{.lr = lr});
  ag::optim::Optimizer& opt = adamw ? static_cast<ag::optim::Optimizer&>(*adam) : *sgd;

  Run run;
  run.label = fmt::format("{}, {}", adamw ? "AdamW" : "gradient descent", scaled_scores ? "scaled" : "unscaled");
  run.threshold = adamw ? (2 + 2 * kBeta1) / ((1 - kBeta1) * lr) : 2 / lr;

  Params u;  // the power iteration's vector, carried from one measurement to the next
  ag::Generator start_gen(o.seed + 300);
  for (const Tensor& p : params) u.push_back(ag::randn(p.shape(), start_gen, p.dtype()));
  auto hessian_times = [&](const Params& v) { return ag::hvp([&] { return model.loss(data.x, data.y); }, params, v); };
  auto measure = [&](std::int64_t step) {
    ag::NoGradGuard no_grad;
    TopEigen e;
    // The first measurement starts from a random vector, the others from the last one's.
    int n = run.steps.empty() ? 5 * iterations : iterations;
    if (!adamw) {
      e = top_eigenvalue(hessian_times, u, n);
    } else {
      // s = P^(-1/2): the eigenvalues of P⁻¹H are those of the symmetric s H s.
      std::vector<ag::nn::NamedTensor> state = adam->state();
      double t = static_cast<double>(opt.steps_taken());
      Params s(params.size());
      for (const auto& [name, value] : state) {
        auto dot_at = name.find('.');
        if (dot_at == std::string::npos || name.substr(dot_at + 1) != "exp_avg_sq") continue;
        std::size_t i = std::stoul(name.substr(0, dot_at));
        Tensor v_hat = value / (1 - std::pow(kBeta2, t));
        s[i] = 1.0 / ((v_hat.sqrt() + kEps) * (1 - std::pow(kBeta1, t))).sqrt();
      }
      for (std::size_t i = 0; i < s.size(); ++i)
        if (!s[i].defined())
          throw std::logic_error("sharpness: AdamW has no second moment for parameter " + std::to_string(i));
      e = top_eigenvalue([&](const Params& x) { return times(s, hessian_times(times(s, x))); }, u, n);
    }
    run.steps.push_back(static_cast<double>(step));
    run.sharpness.push_back(e.value);
    run.last_residual = e.residual;
  };

  ag::examples::ProgressBar bar(o.steps);
  for (std::int64_t step = 0; step < o.steps; ++step) {
    Tensor loss = model.loss(data.x, data.y);
    double l = loss.item();
    if (!std::isfinite(l)) {
      run.diverged = true, run.diverged_at = step;
      break;
    }
    if (!adamw && step % every == 0) measure(step);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (adamw && ((step + 1) % every == 0 || step + 1 == o.steps)) measure(step + 1);
    run.loss.push_back(l);
    bar.update(
        step + 1, (step + 1) * data.x.numel(),
        fmt::format("{}  loss {:.4f}  λ {:.1f}", run.label, l, run.sharpness.empty() ? 0.0 : run.sharpness.back()));
  }
  if (!adamw && !run.diverged && o.steps % every != 0) {  // and where the last step landed
    double l = model.loss(data.x, data.y).item();
    if (std::isfinite(l)) measure(o.steps);
  }
  bar.finish();
  return run;
}

}  // namespace

int sharpness(const Options& o) {
  Text text = load_text(o);
  ag::Generator gen(o.seed + 100);
  // The whole training set: --batch windows of 32 characters, every step sees all of them.
  ag::data::TextDataset::Batch data = text.dataset.sample(ag::data::TextDataset::Split::Train, o.batch, 32, gen);
  const double gd_lr = o.gd_lr, adam_lr = o.adam_lr;
  std::int64_t every = std::max<std::int64_t>(1, o.sharpness_every);
  constexpr int kIterations = 20;

  fmt::print(
      "The largest Hessian eigenvalue of a Mini-GPT's loss while it trains ({} windows of 32 characters, full "
      "batch)\n\n",
      o.batch);
  std::vector<Run> runs;
  for (bool adamw : {false, true})
    for (bool scaled_scores : {true, false})
      runs.push_back(
          train_and_measure(text, data, o, adamw, scaled_scores, adamw ? adam_lr : gd_lr, every, kIterations));

  // Over the second half of a run, where the first rise is over.
  auto second_half = [](const Run& r) {
    std::vector<double> v;
    for (std::size_t i = 0; i < r.steps.size(); ++i)
      if (r.steps[i] >= r.steps.back() / 2) v.push_back(r.sharpness[i]);
    std::sort(v.begin(), v.end());
    return v;
  };
  auto median = [](const std::vector<double>& v) { return v[v.size() / 2]; };
  auto rises = [](const Run& r) {
    std::int64_t n = 0;
    for (std::size_t i = 1; i < r.loss.size(); ++i) n += r.loss[i] > r.loss[i - 1];
    return n;
  };
  std::vector<std::vector<std::string>> rows;
  bool all_finished = true;
  for (const Run& r : runs) {
    all_finished = all_finished && !r.diverged;
    if (r.diverged) {
      rows.push_back({r.label, fmt::format("{:.1f}", r.threshold), "-", "-", "-", "-",
                      fmt::format("not finite at step {}", r.diverged_at), "-", "-"});
      continue;
    }
    double peak = *std::max_element(r.sharpness.begin(), r.sharpness.end());
    std::vector<double> late = second_half(r);
    rows.push_back({r.label, fmt::format("{:.1f}", r.threshold), fmt::format("{:.2f}", r.sharpness.front()),
                    fmt::format("{:.2f}", peak), fmt::format("{:.2f}", median(late)),
                    fmt::format("{:.2f} .. {:.2f}", late.front() / r.threshold, late.back() / r.threshold),
                    fmt::format("{:.3f} -> {:.3f}", r.loss.front(), r.loss.back()), fmt::format("{}", rises(r)),
                    fmt::format("{:.0e}", r.last_residual)});
  }
  print_table({"run", "threshold", "λ first", "λ largest", "λ median, 2nd half", "2nd half / threshold", "loss",
               "steps loss rose", "residual"},
              rows);
  fmt::print(
      "\nλ: the largest eigenvalue of H (gradient descent) or of P⁻¹H (AdamW), {} power iterations on ag::hvp per\n"
      "measurement from the last one's vector (5 times as many for the first, from a random one); residual\n"
      "|A u - λ u| / λ at the last one. threshold: 2/lr, or (2 + 2 β1) / ((1 - β1) lr) for "
      "AdamW.\n\n",
      kIterations);

  if (!all_finished) {
    fmt::print(
        "A run diverged: at its step size the loss blew up before it could settle at the edge. Nothing is\n"
        "drawn; try a smaller --lr (gradient descent) or --adam-lr (AdamW).\n");
    if (o.check) expect(false, "every run trains without diverging");
    return exit_code();
  }
  std::filesystem::create_directories(o.out);
  for (bool adamw : {false, true}) {
    std::vector<ag::plot::Series> series;
    double last_step = 0;
    for (const Run& r : runs)
      if ((r.label.rfind("AdamW", 0) == 0) == adamw) {
        series.push_back({r.label, r.steps, r.sharpness});
        last_step = std::max(last_step, r.steps.back());
      }
    const Run& any = runs[adamw ? 2 : 0];
    series.push_back({adamw ? "38 / lr" : "2 / lr", {0, last_step}, {any.threshold, any.threshold}});
    std::string png = (std::filesystem::path(o.out) / (adamw ? "sharpness-adamw.png" : "sharpness-gd.png")).string();
    ag::plot::line_plot_png(png, series,
                            adamw
                                ? fmt::format("AdamW, lr {}: largest eigenvalue of the preconditioned Hessian", adam_lr)
                                : fmt::format("gradient descent, lr {}: largest Hessian eigenvalue", gd_lr),
                            "step", adamw ? "λ_max(P⁻¹H)" : "λ_max(H)");
    fmt::print("wrote {}\n", png);
  }
  {
    std::vector<ag::plot::Series> series;
    for (const Run& r : runs) {
      std::vector<double> x(r.loss.size());
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
      series.push_back({r.label, x, r.loss});
    }
    std::string png = (std::filesystem::path(o.out) / "sharpness-loss.png").string();
    ag::plot::line_plot_png(png, series, "the four runs' training loss (full batch)", "step", "cross-entropy");
    fmt::print("wrote {}\n\n", png);
  }

  const Run &gd = runs[0], &gd_unscaled = runs[1], &adam = runs[2], &adam_unscaled = runs[3];
  auto first_past = [](const Run& r) {
    for (std::size_t i = 0; i < r.steps.size(); ++i)
      if (r.sharpness[i] > r.threshold) return fmt::format("by step {}", r.steps[i]);
    return std::string("never");
  };
  std::vector<double> gd_late = second_half(gd);
  auto near = [](double a, double b) { return a > 0.7 * b && a < 1.3 * b; };
  double peak_gd = *std::max_element(gd.sharpness.begin(), gd.sharpness.end());
  double adam_m = median(second_half(adam)) / adam.threshold;
  fmt::print("Reading, for this run:\n");
  fmt::print(
      "- gradient descent: λ starts at {:.1f} (2/lr = {:.0f}) and passes 2/lr {}. Over the second half it lies\n"
      "  between {:.2f} and {:.2f} times 2/lr; the loss fell from {:.3f} to {:.3f}, rising at {} of {} steps.\n",
      gd.sharpness.front(), gd.threshold, first_past(gd), gd_late.front() / gd.threshold, gd_late.back() / gd.threshold,
      gd.loss.front(), gd.loss.back(), rises(gd), gd.loss.size());
  if (peak_gd > gd.threshold && gd.loss.back() < gd.loss.front())
    fmt::print(
        "  On a quadratic, a step of lr along a direction of curvature above 2/lr overshoots more than it\n"
        "  corrects, and the loss grows; here it fell regardless, unevenly: gradient descent at the edge of\n"
        "  stability (Cohen et al., 2021).\n");
  else
    fmt::print("  λ stayed below 2/lr: this run never reached the edge of stability.\n");
  if (gd.sharpness.back() < gd.threshold && peak_gd > gd.threshold)
    fmt::print(
        "  It ends below 2/lr ({:.2f} of it) at a loss of {:.3f}: the {} windows are nearly memorised, and a\n"
        "  cross-entropy whose predictions grow confident has less curvature.\n",
        gd.sharpness.back() / gd.threshold, gd.loss.back(), o.batch);
  if (near(adam_m, 1.0))
    fmt::print(
        "- AdamW: λ(P⁻¹H) climbs to 38/lr and hovers about it; over the second half its median is {:.2f} of\n"
        "  38/lr (the adaptive edge of stability, Cohen et al., 2022), long after the loss has gone flat. It is\n"
        "  this λ, not that of H itself, that Adam's step size has to respect.\n",
        adam_m);
  else
    fmt::print("- AdamW: λ(P⁻¹H) does not settle at 38/lr in this run (second-half median {:.2f} of it).\n", adam_m);
  double gd_a = median(gd_late), gd_b = median(second_half(gd_unscaled));
  double adam_a = median(second_half(adam)), adam_b = median(second_half(adam_unscaled));
  std::int64_t d_k = small_gpt(1).n_embd / small_gpt(1).n_head;
  fmt::print(
      "- 1/sqrt(d_k) (d_k = {}, a factor of {:.0f} on the scores): λ at the initial weights is {:.2f} with it and\n"
      "  {:.2f} without. Over the second half the medians are {:.1f} and {:.1f} (gradient descent), {:.0f} and\n"
      "  {:.0f} (AdamW).\n",
      d_k, std::sqrt(static_cast<double>(d_k)), gd.sharpness.front(), gd_unscaled.sharpness.front(), gd_a, gd_b, adam_a,
      adam_b);
  if (near(gd_a, gd_b) && near(adam_a, adam_b))
    fmt::print(
        "  GPT-2's small initial weights make the scores tiny either way, and once training reaches the edge\n"
        "  the step size, not the scale of the scores, sets the sharpness. What the scale changes is the\n"
        "  spread and saturation of the weights (experiments scaling).\n");
  fmt::print("\n");
  if (o.check) {
    bool converged = true;
    for (const Run& r : runs) converged = converged && r.last_residual < 0.1;
    expect(converged, "each run's last power iteration found an eigenpair (residual < 0.1)");
    expect(std::abs(gd.sharpness.front() / gd_unscaled.sharpness.front() - 1) < 0.01,
           "at the initial weights, λ is the same with and without 1/sqrt(d_k) (within 1 %)");
    expect(gd.sharpness.front() < gd.threshold,
           "gradient descent starts below its threshold 2/lr (else it would be unstable from the first step)");
    for (const Run* r : {&gd, &gd_unscaled})
      expect(*std::max_element(r->sharpness.begin(), r->sharpness.end()) > r->threshold,
             r->label + ": λ rises past 2/lr during training (progressive sharpening)");
    for (const Run* r : {&adam, &adam_unscaled}) {
      double m = median(second_half(*r)) / r->threshold;
      expect(m > 0.7 && m < 1.3, fmt::format("{}: over the second half, the median of λ(P⁻¹H) is within 30 % of 38/lr "
                                             "({:.2f} of it)",
                                             r->label, m));
    }
    expect(rises(gd) > 0 && gd.loss.back() < 0.5 * gd.loss.front(),
           "gradient descent's loss rises at some steps, yet falls by more than half over the run");
  }
  return exit_code();
}

}  // namespace experiments
