// What precision does attention need?
//
// bf16 keeps float32's 8 exponent bits and 7 of its 23 mantissa bits: every value is off by up to
// half a step, 2^-8 = 0.4 % of itself. Autocast (ops/autocast.h) rounds only the inputs of matrix
// products and adds their products in float32. Part 1 measures, with bf16 emulated by rounding
// (so it runs on any CPU), what happens to each other step if it too were bf16: a long sum, the
// attention weights (with and without 1/sqrt(d_k)), layer norm's statistics, the loss. Part 2
// trains the same small Mini-GPT on the same batches in float32, under autocast, and under
// autocast with its logits (hence its loss) forced to bf16, and draws the loss curves.
#include <cmath>
#include <filesystem>

#include "../common/plot.h"
#include "../common/progress.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

float r16(double v) { return ag::bf16::round(static_cast<float>(v)); }

// The sum of `n` values u in [0, 1) accumulated three ways: in float64, in float32, and in bf16
// (the running sum rounded after every addition). Returns the relative errors of the last two.
std::pair<double, double> sum_errors(std::int64_t n, ag::Generator& gen) {
  Tensor u = ag::rand({n}, gen, ag::kFloat64);
  double exact = 0;
  float f32 = 0, b16 = 0;
  for (double v : u.to_vector<double>()) {
    exact += v;
    f32 += static_cast<float>(v);
    b16 = r16(b16 + r16(v));
  }
  return {std::abs(f32 - exact) / exact, std::abs(b16 - exact) / exact};
}

// Max |P - P_exact| over rows of attention weights for T queries and keys of width d, from q and
// k ~ N(0, 1): `round_inputs` rounds q and k to bf16 (autocast's product), `round_softmax` also
// rounds the scores, each exponential, the running row sum and the weights (a bf16 softmax).
double weight_error(std::int64_t t, std::int64_t d, bool scaled, bool round_inputs, bool round_softmax,
                    std::uint64_t seed) {
  ag::Generator gen(seed);
  std::vector<double> q = ag::randn({t, d}, gen, ag::kFloat64).to_vector<double>(),
                      k = ag::randn({t, d}, gen, ag::kFloat64).to_vector<double>();
  double scale = scaled ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0, worst = 0;
  for (std::int64_t i = 0; i < t; ++i) {
    std::vector<double> exact(static_cast<std::size_t>(t)), got(static_cast<std::size_t>(t));
    for (std::int64_t j = 0; j < t; ++j) {
      double s = 0, s_low = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        double a = q[static_cast<std::size_t>(i * d + c)], b = k[static_cast<std::size_t>(j * d + c)];
        s += a * b;
        s_low += round_inputs ? static_cast<double>(r16(a)) * r16(b) : a * b;
      }
      exact[static_cast<std::size_t>(j)] = s * scale;
      got[static_cast<std::size_t>(j)] = static_cast<float>(s_low * scale);
      if (round_softmax) got[static_cast<std::size_t>(j)] = r16(got[static_cast<std::size_t>(j)]);
    }
    auto softmax = [&](std::vector<double>& row, bool low) {
      double m = *std::max_element(row.begin(), row.end()), sum = 0;
      for (double& v : row) {
        v = std::exp(v - m);
        if (low) v = r16(v), sum = r16(sum + v);
        else sum += v;
      }
      for (double& v : row) v = low ? r16(v / sum) : v / sum;
    };
    softmax(exact, false);
    softmax(got, round_softmax);
    for (std::int64_t j = 0; j < t; ++j)
      worst = std::max(worst, std::abs(got[static_cast<std::size_t>(j)] - exact[static_cast<std::size_t>(j)]));
  }
  return worst;
}

// Layer norm of rows of width `n` whose values have mean `mean` and standard deviation 1: the
// largest error in the normalised output when its mean and variance are computed in float32
// (two passes), or in bf16 (running sums of x and x^2 rounded after every addition, var = E[x^2]
// - E[x]^2, the one-pass form a low-precision kernel would use).
std::pair<double, double> layer_norm_errors(std::int64_t n, double mean, ag::Generator& gen) {
  std::vector<double> x = (ag::randn({n}, gen, ag::kFloat64) + mean).to_vector<double>();
  double mu = 0, var = 0;
  for (double v : x) mu += v;
  mu /= static_cast<double>(n);
  for (double v : x) var += (v - mu) * (v - mu);
  var /= static_cast<double>(n);
  float mu32 = 0, var32 = 0, s16 = 0, sq16 = 0;
  for (double v : x) mu32 += static_cast<float>(v);
  mu32 /= static_cast<float>(n);
  for (double v : x) var32 += (static_cast<float>(v) - mu32) * (static_cast<float>(v) - mu32);
  var32 /= static_cast<float>(n);
  for (double v : x) s16 = r16(s16 + r16(v)), sq16 = r16(sq16 + r16(v * v));
  double mu16 = s16 / static_cast<double>(n), var16 = std::max(0.0, sq16 / static_cast<double>(n) - mu16 * mu16);
  double e32 = 0, e16 = 0;
  for (double v : x) {
    double want = (v - mu) / std::sqrt(var + 1e-5);
    e32 = std::max(e32, std::abs((v - mu32) / std::sqrt(var32 + 1e-5) - want));
    e16 = std::max(e16, std::abs((v - mu16) / std::sqrt(var16 + 1e-5) - want));
  }
  return {e32, e16};
}

// Logits forced to bf16 on their way to the loss, the gradient passed through unchanged.
Tensor rounded_logits(const Tensor& logits) {
  Tensor r = logits.detach().clone();
  ag::bf16::round_in_place(r.data_ptr<float>(), r.numel());
  return logits + (r - logits.detach());
}

struct Curve {
  std::vector<double> steps, train, val_steps, val;
};

// The small Mini-GPT trained on the same batches; `autocast` sets the products' precision for
// the forward pass and `round_loss` forces the logits to bf16. Validation every tenth of the run.
Curve train_curve(const Text& text, const Options& o, bool autocast, bool round_loss, const std::string& label) {
  ag::Generator init(o.seed);
  ag::nn::GPT model({.vocab_size = text.tokenizer.size(), .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128},
                    init);
  ag::Generator gen(o.seed + 100);
  ag::optim::AdamW opt(ag::optim::decay_groups(model, 0.1), {.lr = 2e-3, .beta2 = 0.99});
  ag::optim::WarmupCosine schedule{.warmup = std::min<std::int64_t>(100, o.steps / 10), .total = o.steps,
                                   .max_lr = 2e-3, .min_lr = 2e-4};
  auto validation = validation_batches(text, o, 64, 10);
  auto val_loss = [&] {
    ag::NoGradGuard no_grad;
    ag::AutocastGuard precision(autocast);
    model.eval();
    double sum = 0;
    for (const auto& b : validation) sum += model.loss(b.x, b.y).item();
    model.train();
    return sum / static_cast<double>(validation.size());
  };
  Curve c;
  ag::examples::ProgressBar bar(o.steps);
  std::int64_t every = std::max<std::int64_t>(1, o.steps / 10);
  for (std::int64_t step = 0; step < o.steps; ++step) {
    if (step % every == 0) c.val_steps.push_back(static_cast<double>(step)), c.val.push_back(val_loss());
    auto b = text.dataset.sample(ag::data::TextDataset::Split::Train, o.batch, 64, gen);
    opt.set_lr(schedule.lr_at(step));
    Tensor loss;
    {
      ag::AutocastGuard precision(autocast);
      loss = round_loss ? ag::cross_entropy(rounded_logits(model.forward(b.x)).reshape({-1, text.tokenizer.size()}),
                                            b.y.reshape({-1}))
                        : model.loss(b.x, b.y);
    }
    opt.zero_grad();
    loss.backward();
    ag::optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    c.steps.push_back(static_cast<double>(step));
    c.train.push_back(loss.item());
    bar.update(step + 1, (step + 1) * o.batch * 64, fmt::format("{}  loss {:.4f}", label, c.train.back()));
  }
  bar.finish();
  c.val_steps.push_back(static_cast<double>(o.steps));
  c.val.push_back(val_loss());
  return c;
}

// A running mean over `window` steps, for a readable curve.
std::vector<double> smoothed(const std::vector<double>& v, std::size_t window) {
  std::vector<double> out;
  double sum = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out.push_back(sum / static_cast<double>(std::min(i + 1, window)));
  }
  return out;
}

}  // namespace

int precision(const Options& o) {
  ag::Generator gen(o.seed);
  fmt::print("Part 1: bf16 (8 exponent bits, 7 mantissa bits) emulated by rounding, against float64\n\n");
  fmt::print("(a) A sum of n values from U(0, 1), such as a softmax's row sum:\n\n");
  std::vector<std::vector<std::string>> rows;
  std::vector<std::pair<double, double>> sums;
  for (std::int64_t n : {64, 1024}) {
    sums.push_back(sum_errors(n, gen));
    rows.push_back({std::to_string(n), fmt::format("{:.1e}", sums.back().first), fmt::format("{:.1e}", sums.back().second)});
  }
  print_table({"n", "float32 sum: rel. error", "bf16 running sum: rel. error"}, rows);
  fmt::print(
      "\nA bf16 running sum stalls: once it is 256 times a term, adding the term moves it by less than\n"
      "half a step. Autocast's products round their inputs only and add in float32.\n\n");

  fmt::print("(b) Attention weights, T = 64 queries and keys, d_k = 64, q, k ~ N(0, 1): max |P - P_exact|\n\n");
  const std::int64_t t = 64, d = 64;
  double in_scaled = weight_error(t, d, true, true, false, o.seed), in_raw = weight_error(t, d, false, true, false, o.seed),
         sm_scaled = weight_error(t, d, true, true, true, o.seed), sm_raw = weight_error(t, d, false, true, true, o.seed),
         f32_scaled = weight_error(t, d, true, false, false, o.seed);
  print_table({"what is bf16", "q.k / sqrt(d_k)", "q.k (unscaled)"},
              {{"nothing (float32)", fmt::format("{:.1e}", f32_scaled), "-"},
               {"q and k (autocast)", fmt::format("{:.1e}", in_scaled), fmt::format("{:.1e}", in_raw)},
               {"q, k and the softmax", fmt::format("{:.1e}", sm_scaled), fmt::format("{:.1e}", sm_raw)}});
  fmt::print(
      "\nRounding a score s moves it by up to |s| 2^-8, and softmax turns an absolute change in a score into a\n"
      "relative change in its weight. Unscaled, scores are sqrt(d_k) = 8 times larger, so are their rounding\n"
      "errors, and the weights are sharper: the same bf16 costs far more.\n\n");

  fmt::print("(c) Layer norm of a row of 128 values with mean 8, std 1: max error of the normalised output\n\n");
  auto [ln32, ln16] = layer_norm_errors(128, 8.0, gen);
  print_table({"statistics in", "max error"},
              {{"float32, two passes", fmt::format("{:.1e}", ln32)}, {"bf16, one pass", fmt::format("{:.1e}", ln16)}});
  fmt::print("\nE[x^2] - E[x]^2 subtracts two numbers near 65 to get one near 1: bf16 keeps 2-3 digits of each.\n\n");

  fmt::print("(d) The loss: a cross-entropy near 1.5 nats held in bf16 moves in steps of 2^-7 = {:.4f} nats,\n"
             "    a large part of the 0.02 that tells two late checkpoints apart.\n\n",
             std::ldexp(1.0, -7));

  if (o.check) {
    expect(sums[1].second > 10 * sums[1].first, "a bf16 running sum of 1024 terms is far worse than float32's");
    expect(in_scaled < sm_scaled, "a bf16 softmax adds error to the weights beyond rounding q and k");
    expect(in_raw > in_scaled && sm_raw > sm_scaled, "without 1/sqrt(d_k), rounding costs the weights more");
    expect(ln16 > 10 * ln32, "layer norm's statistics in bf16 are far worse than in float32");
  }

  fmt::print("Part 2: the Mini-GPT (4 layers, 4 heads, width 128, block 64), {} each, same batches\n\n",
             ag::examples::plural(o.steps, "step"));
  if (!ag::bf16::support().available) {
    fmt::print("skipped: {}\n", ag::bf16::support().reason);
    return exit_code();
  }
  Text text = load_text(o, 64);
  Curve fp32 = train_curve(text, o, false, false, "fp32         ");
  Curve bf16 = train_curve(text, o, true, false, "bf16 autocast");
  Curve loss16 = train_curve(text, o, true, true, "+ bf16 logits");
  print_table({"run", "final validation loss", "against fp32"},
              {{"fp32", fmt::format("{:.4f}", fp32.val.back()), "-"},
               {"bf16 autocast", fmt::format("{:.4f}", bf16.val.back()),
                fmt::format("{:+.4f}", bf16.val.back() - fp32.val.back())},
               {"bf16 autocast + bf16 logits", fmt::format("{:.4f}", loss16.val.back()),
                fmt::format("{:+.4f}", loss16.val.back() - fp32.val.back())}});
  std::filesystem::create_directories(o.out);
  std::string png = (std::filesystem::path(o.out) / "precision_loss.png").string();
  std::size_t window = static_cast<std::size_t>(std::max<std::int64_t>(1, o.steps / 50));
  ag::plot::line_plot_png(png,
                          {{"fp32, training (smoothed)", fp32.steps, smoothed(fp32.train, window)},
                           {"bf16 autocast, training (smoothed)", bf16.steps, smoothed(bf16.train, window)},
                           {"fp32, validation", fp32.val_steps, fp32.val},
                           {"bf16 autocast, validation", bf16.val_steps, bf16.val},
                           {"bf16 + bf16 logits, validation", loss16.val_steps, loss16.val}},
                          "Mini-GPT: float32 against bf16 matrix products", "step", "cross-entropy (nats per character)");
  fmt::print("wrote {}\n", png);
  if (o.check) {
    expect(std::abs(bf16.val.back() - fp32.val.back()) < 0.02,
           "bf16 autocast ends within 0.02 of float32's validation loss");
    expect(bf16.val.back() < bf16.val.front() - 0.5, "the bf16 run learns");
  }
  return exit_code();
}

}  // namespace experiments
