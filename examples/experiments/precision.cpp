// What precision does attention need?
//
// bf16 keeps float32's 8 exponent bits and 7 of its 23 mantissa bits: every value is off by up to
// half a step, 2^-8 = 0.4 % of itself. Autocast (ops/autocast.h) rounds only the inputs of matrix
// products and adds their products in float32. Part 1 measures, with bf16 emulated by rounding
// (so it runs on any CPU), what happens to each other step if it too were bf16: a long sum, the
// attention weights (with and without 1/sqrt(d_k)), layer norm's statistics, the loss. Part 2
// trains a small GPT on the same batches with one of softmax, layer norm's statistics or the loss
// computed as a bf16 kernel would, against all float32. Part 3 (where bf16 runs) trains the
// Mini-GPT on the same batches in float32 and under autocast, and draws both loss curves.
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>

#include "../common/plot.h"
#include "../common/progress.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

float r16(double v) { return ag::bf16_round(static_cast<float>(v)); }

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

// The dot product of x, y ~ N(0, 1)^n with x and y rounded to bf16 and the sum in float32, as
// autocast's products compute it: |error| / sum |x_i y_i| (the error a sum of n rounded terms can
// reach, so the measure does not depend on how much the terms cancel).
double dot_error(std::int64_t n, ag::Generator& gen) {
  std::vector<double> x = ag::randn({n}, gen, ag::kFloat64).to_vector<double>(),
                      y = ag::randn({n}, gen, ag::kFloat64).to_vector<double>();
  double exact = 0, size = 0;
  float low = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    exact += x[static_cast<std::size_t>(i)] * y[static_cast<std::size_t>(i)];
    size += std::abs(x[static_cast<std::size_t>(i)] * y[static_cast<std::size_t>(i)]);
    low += r16(x[static_cast<std::size_t>(i)]) * r16(y[static_cast<std::size_t>(i)]);
  }
  return std::abs(low - exact) / size;
}

// The fraction of AdamW updates of size lr (Adam's step is about lr per weight) lost when the
// weights, ~ N(0, 0.02^2) as GPT-2 initialises them, are stored in bf16: w + lr rounds back to w.
double lost_updates(double lr, ag::Generator& gen) {
  std::vector<double> w = (ag::randn({100000}, gen, ag::kFloat64) * 0.02).to_vector<double>();
  std::int64_t lost = 0;
  for (double v : w) lost += r16(static_cast<double>(r16(v)) + lr) == r16(v);
  return static_cast<double>(lost) / static_cast<double>(w.size());
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
        if (low)
          v = r16(v), sum = r16(sum + v);
        else
          sum += v;
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

// Mean |loss - exact| over `rows` rows of `vocab` logits ~ N(0, 9), target 0: with the logits
// rounded to bf16 (the rest float64), and with every step of the loss in bf16 (logits, each
// exponential, the running row sum, the log, the row's loss, and the running mean over rows).
std::pair<double, double> loss_errors(std::int64_t rows, std::int64_t vocab, ag::Generator& gen) {
  std::vector<double> z = (ag::randn({rows, vocab}, gen, ag::kFloat64) * 3.0).to_vector<double>();
  double exact = 0, from_rounded = 0;
  float all16 = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = z.data() + r * vocab;
    double m = *std::max_element(row, row + vocab), m16 = r16(m), sum = 0, sum_r = 0;
    float sum16 = 0;
    for (std::int64_t j = 0; j < vocab; ++j) {
      sum += std::exp(row[j] - m);
      sum_r += std::exp(static_cast<double>(r16(row[j])) - m16);
      sum16 = r16(sum16 + r16(std::exp(r16(row[j]) - m16)));
    }
    exact += m + std::log(sum) - row[0];
    from_rounded += m16 + std::log(sum_r) - r16(row[0]);
    all16 = r16(all16 + r16(r16(m16 + r16(std::log(sum16))) - r16(row[0])));
  }
  double n = static_cast<double>(rows);
  return {std::abs(from_rounded - exact) / n, std::abs(static_cast<double>(all16) / n - exact / n)};
}

struct Curve {
  std::vector<double> steps, train, val_steps, val;
};

// fit (common.cpp) with the losses kept: `validate()` is the validation loss, taken `points`
// times along the run and once at its end.
Curve fit_curve(ag::nn::GPT& model, const Text& text, const Options& o, std::int64_t steps, const Schedule& s,
                std::int64_t points, const std::string& label,
                const std::function<Tensor(const Tensor& x, const Tensor& y)>& loss_of,
                const std::function<double()>& validate) {
  Curve c;
  std::int64_t every = std::max<std::int64_t>(1, steps / points);
  fit(
      model, text, o, steps, model.config.block_size, s, label, loss_of,
      [&](std::int64_t step, double loss) {
        c.steps.push_back(static_cast<double>(step));
        c.train.push_back(loss);
      },
      [&](std::int64_t step) {
        if (step % every == 0) c.val_steps.push_back(static_cast<double>(step)), c.val.push_back(validate());
      });
  c.val_steps.push_back(static_cast<double>(steps));
  c.val.push_back(validate());
  return c;
}

// Part 3: the Mini-GPT, `minigpt train`'s model and schedule; `autocast` sets the products'
// precision (forward, and so backward). Validation every twentieth of the run, in the run's own
// precision.
Curve train_curve(const Text& text, const Options& o, bool autocast, const std::string& label) {
  ag::Generator init(o.seed);
  ag::nn::GPT model({.vocab_size = text.tokenizer.size(), .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128},
                    init);
  auto validation = validation_batches(text, o, 64, 10);
  auto validate = [&] {
    ag::NoGradGuard no_grad;
    ag::AutocastGuard precision(autocast);
    model.eval();
    double sum = 0;
    for (const auto& b : validation) sum += model.loss(b.x, b.y).item();
    model.train();
    return sum / static_cast<double>(validation.size());
  };
  return fit_curve(
      model, text, o, o.steps,
      {.lr = 2e-3, .min_lr = 2e-4, .beta2 = 0.99, .warmup = std::min<std::int64_t>(100, o.steps / 10)}, 20, label,
      [&](const Tensor& x, const Tensor& y) {
        ag::AutocastGuard precision(autocast);
        return model.loss(x, y);
      },
      validate);
}

// --- Part 2: one step at a time forced to bf16 inside the model ------------------------------
//
// The forward pass of an nn::GPT written out from ops, so that a step can be replaced by what a
// bf16 kernel would compute: the value a bf16 kernel gives, with the float32 formula's gradient
// (value = exact + (bf16 - exact).detach()). Everything else, the products included, is float32,
// so this part runs on any CPU.
struct Forced {
  bool softmax = false, layer_norm = false, loss = false;
};

// `exact`'s gradient with `low`'s value.
Tensor with_value(const Tensor& exact, const Tensor& low) { return exact + (low - exact.detach()); }

// Per row of x [rows, n]: mean and variance from one pass of bf16 running sums of x and x^2.
std::pair<Tensor, Tensor> bf16_statistics(const Tensor& x) {
  std::int64_t n = x.size(-1), rows = x.numel() / n;
  std::vector<float> v = x.detach().to_vector<float>();
  std::vector<double> mean(static_cast<std::size_t>(rows)), var(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    float s = 0, sq = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      float e = v[static_cast<std::size_t>(r * n + j)];
      s = r16(s + r16(e));
      sq = r16(sq + r16(static_cast<double>(e) * e));
    }
    double mu = r16(s / static_cast<double>(n));
    mean[static_cast<std::size_t>(r)] = mu;
    var[static_cast<std::size_t>(r)] = std::max(0.0, static_cast<double>(r16(sq / static_cast<double>(n))) - mu * mu);
  }
  ag::Shape shape = x.shape();
  shape.back() = 1;
  return {ag::tensor(mean, shape), ag::tensor(var, shape)};
}

Tensor layer_norm(const ag::nn::Normalization& norm, const Tensor& x, const Forced& f) {
  // This experiment's GPT is GPT-2's, with LayerNorm (the default GPTConfig::norm).
  const auto& ln = dynamic_cast<const ag::nn::LayerNorm&>(norm);
  if (!f.layer_norm) return ln.forward(x);
  Tensor mu = x.mean(-1, true), var = ((x - mu) * (x - mu)).mean(-1, true);
  auto [mu16, var16] = bf16_statistics(x);
  Tensor y = (x - with_value(mu, mu16)) / ag::sqrt(with_value(var, var16) + ln.eps);
  return ln.bias.defined() ? y * ln.weight + ln.bias : y * ln.weight;
}

// Rows of scores s (masked entries -inf) through a bf16 softmax: scores, exponentials, the
// running row sum and the weights each rounded.
Tensor bf16_softmax_values(const Tensor& s) {
  std::int64_t n = s.size(-1), rows = s.numel() / n;
  std::vector<float> v = s.detach().to_vector<float>();
  std::vector<double> p(v.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = v.data() + r * n;
    float m = r16(*std::max_element(row, row + n)), sum = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      double e = std::isinf(row[j]) ? 0.0 : r16(std::exp(static_cast<double>(r16(row[j])) - m));
      p[static_cast<std::size_t>(r * n + j)] = e;
      sum = r16(sum + static_cast<float>(e));
    }
    for (std::int64_t j = 0; j < n; ++j)
      p[static_cast<std::size_t>(r * n + j)] = r16(p[static_cast<std::size_t>(r * n + j)] / sum);
  }
  return ag::tensor(p, s.shape());
}

// Causal self-attention of one block on h [B, T, C], written out: q, k, v from the packed
// projection, weights P = softmax(q k^T / sqrt(d) + causal mask), P v, the output projection.
// `weights` receives P [B, H, T, T] as used.
Tensor attention(const ag::nn::MultiHeadAttention& a, const Tensor& h, const Forced& f, Tensor* weights) {
  std::int64_t b = h.size(0), t = h.size(1), heads = a.n_heads, d = a.head_dim;
  Tensor qkv = a.qkv_proj->forward(h).reshape({b, t, 3, heads, d}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, d]
  std::vector<Tensor> parts = ag::split(qkv, 1, 0);
  Tensor q = parts[0].squeeze(0), k = parts[1].squeeze(0), v = parts[2].squeeze(0);
  std::vector<double> future(static_cast<std::size_t>(t * t));
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = i + 1; j < t; ++j) future[static_cast<std::size_t>(i * t + j)] = 1;
  Tensor s = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  s = s.masked_fill(ag::tensor(future, {t, t}, ag::kBool), -std::numeric_limits<double>::infinity());
  Tensor p = ag::softmax(s, -1);
  if (f.softmax) p = with_value(p, bf16_softmax_values(s));
  if (weights) *weights = p.detach();
  Tensor o = p.matmul(v).permute({0, 2, 1, 3}).reshape({b, t, heads * d});
  return a.out_proj->forward(o);
}

// The loss of logits [B, T, V] against y [B, T]; forced: each row's loss as a bf16 kernel gives
// it (rounded logits, exponentials, running sums, log), averaged in float32.
Tensor loss_of(const Tensor& logits, const Tensor& y, const Forced& f) {
  std::int64_t vocab = logits.size(-1);
  Tensor flat = logits.reshape({-1, vocab}), targets = y.reshape({-1});
  Tensor exact = ag::cross_entropy(flat, targets);
  if (!f.loss) return exact;
  std::vector<float> z = flat.detach().to_vector<float>();
  std::vector<std::int64_t> ids = targets.to_vector<std::int64_t>();
  double total = 0;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const float* row = z.data() + r * static_cast<std::size_t>(vocab);
    float m = r16(*std::max_element(row, row + vocab)), sum = 0;
    for (std::int64_t j = 0; j < vocab; ++j) sum = r16(sum + r16(std::exp(static_cast<double>(r16(row[j])) - m)));
    total += r16(r16(m + r16(std::log(static_cast<double>(sum)))) - r16(row[ids[r]]));
  }
  return with_value(exact, ag::tensor({total / static_cast<double>(ids.size())}, {}));
}

Tensor forward(ag::nn::GPT& g, const Tensor& ids, const Forced& f, std::vector<Tensor>* weights = nullptr) {
  std::int64_t t = ids.size(1);
  Tensor x = g.wte->forward(ids) + g.wpe->forward(ag::arange(0.0, static_cast<double>(t)));
  for (std::size_t i = 0; i < g.blocks->size(); ++i) {
    ag::nn::SelfAttentionBlock& block = (*g.blocks)[i];
    Tensor w;
    x = x + attention(*block.attn, layer_norm(*block.ln_1, x, f), f, weights ? &w : nullptr);
    if (weights) weights->push_back(w);
    x = x + block.mlp->forward(layer_norm(*block.ln_2, x, f));
  }
  return ag::linear(layer_norm(*g.ln_f, x, f), g.wte->weight);
}

struct ForcedRun {
  ForcedRun(std::string name_, Forced forced_) : name(std::move(name_)), forced(forced_) {}
  std::string name;
  Forced forced;
  Curve curve;
  double weight_error = 0;  // max |P - P_float32| on a validation batch, against the same model's float32 weights
};

void train_forced(ForcedRun& run, const Text& text, const Options& o, std::int64_t steps) {
  ag::Generator init(o.seed);
  ag::nn::GPT model(small_gpt(text.tokenizer.size()), init);
  auto validation = validation_batches(text, o, model.config.block_size, 10);
  auto validate = [&] {
    ag::NoGradGuard no_grad;
    double sum = 0;
    for (const auto& b : validation) sum += loss_of(forward(model, b.x, run.forced), b.y, run.forced).item();
    return sum / static_cast<double>(validation.size());
  };
  run.curve = fit_curve(
      model, text, o, steps, {.lr = 3e-3, .min_lr = 3e-4, .beta2 = 0.999, .warmup = steps / 10}, 10, run.name,
      [&](const Tensor& x, const Tensor& y) { return loss_of(forward(model, x, run.forced), y, run.forced); },
      validate);
  // The attention weights of the trained model on one validation batch, as the run computes
  // them, against the same model's weights with nothing forced.
  ag::NoGradGuard no_grad;
  std::vector<Tensor> forced_w, plain_w;
  forward(model, validation[0].x, run.forced, &forced_w);
  forward(model, validation[0].x, Forced{}, &plain_w);
  for (std::size_t l = 0; l < forced_w.size(); ++l) {
    Tensor diff = forced_w[l] - plain_w[l];
    run.weight_error = std::max(run.weight_error, std::sqrt((diff * diff).max().item()));
  }
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
  std::vector<double> dots;
  for (std::int64_t n : {64, 1024}) {
    sums.push_back(sum_errors(n, gen));
    dots.push_back(dot_error(n, gen));
    rows.push_back({std::to_string(n), fmt::format("{:.1e}", sums.back().first),
                    fmt::format("{:.1e}", sums.back().second), fmt::format("{:.1e}", dots.back())});
  }
  print_table({"n", "float32 sum: rel. error", "bf16 running sum: rel. error", "dot, bf16 inputs, float32 sum"}, rows);
  fmt::print(
      "\nA bf16 running sum stalls: once it is 256 times a term, adding the term moves it by less than\n"
      "half a step. Autocast's products round their inputs only and add in float32: their error (last\n"
      "column, against the sum of |x_i y_i|) stays far below bf16's rounding bound 2^-8 = 3.9e-3 and shrinks\n"
      "as n grows, the independent roundings partly cancelling.\n\n");

  fmt::print("(b) Attention weights, T = 64 queries and keys, d_k = 64, q, k ~ N(0, 1): max |P - P_exact|\n\n");
  const std::int64_t t = 64, d = 64;
  double in_scaled = weight_error(t, d, true, true, false, o.seed),
         in_raw = weight_error(t, d, false, true, false, o.seed),
         sm_scaled = weight_error(t, d, true, true, true, o.seed),
         sm_raw = weight_error(t, d, false, true, true, o.seed),
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

  fmt::print("(d) The loss: cross-entropy of 4096 rows of 65 logits ~ N(0, 3^2), mean over the rows\n\n");
  auto [ce_logits, ce_all] = loss_errors(4096, 65, gen);
  print_table({"what is bf16", "|loss - exact|"},
              {{"the logits only", fmt::format("{:.1e}", ce_logits)},
               {"logits, exponentials, row sums, each loss, the mean over rows", fmt::format("{:.1e}", ce_all)}});
  fmt::print(
      "\nA loss near 2 nats held in bf16 moves in steps of 2^-6 = {:.4f}: the size of the differences one\n"
      "watches between late checkpoints.\n\n",
      std::ldexp(1.0, -6));

  fmt::print(
      "(e) Master weights: a step of lr per weight (Adam's steps are about lr, smaller where gradients are\n"
      "    noisy) on weights ~ N(0, 0.02^2) stored in bf16\n\n");
  std::vector<double> lost;
  std::vector<std::vector<std::string>> lost_rows;
  for (double lr : {2e-3, 2e-4, 2e-5, 2e-6}) {
    lost.push_back(lost_updates(lr, gen));
    lost_rows.push_back({fmt::format("{:g}", lr), fmt::format("{:.0f} %", 100 * lost.back())});
  }
  print_table({"lr", "updates lost (w + lr rounds back to w)"}, lost_rows);
  fmt::print("\nHence float32 master weights and optimizer moments: bf16 copies are made for the products only.\n\n");

  if (o.check) {
    expect(dots[1] < 4e-3 && dots[0] < 4e-3, "bf16 inputs with a float32 sum stay within bf16's rounding at n = 1024");
    expect(lost[0] == 0.0 && lost[2] > 0.3, "bf16 master weights keep steps of 2e-3 but lose a large share of 2e-5");
    expect(sums[1].second > 10 * sums[1].first, "a bf16 running sum of 1024 terms is far worse than float32's");
    expect(in_scaled < sm_scaled, "a bf16 softmax adds error to the weights beyond rounding q and k");
    expect(in_raw > in_scaled && sm_raw > sm_scaled, "without 1/sqrt(d_k), rounding costs the weights more");
    expect(ln16 > 10 * ln32, "layer norm's statistics in bf16 are far worse than in float32");
    expect(ce_all > ce_logits, "a loss computed in bf16 is further off than one from bf16 logits alone");
  }

  // Part 2 runs on any CPU: its bf16 steps are emulated and its products are float32.
  std::int64_t forced_steps = std::max<std::int64_t>(1, o.steps / 4);
  fmt::print(
      "\nPart 2: one step of the model in bf16 at a time (emulated; products float32), the small GPT\n"
      "(2 layers, 4 heads, width 64, block 32) written out from ops, {} each, same batches\n\n",
      ag::examples::plural(forced_steps, "step"));
  std::vector<ForcedRun> runs{{"all float32          ", Forced{}},
                              {"softmax in bf16      ", Forced{.softmax = true, .layer_norm = false, .loss = false}},
                              {"layer norm stats bf16", Forced{.softmax = false, .layer_norm = true, .loss = false}},
                              {"loss in bf16         ", Forced{.softmax = false, .layer_norm = false, .loss = true}}};
  Text small_text = load_text(o, 32);
  for (ForcedRun& run : runs) train_forced(run, small_text, o, forced_steps);
  std::vector<std::vector<std::string>> forced_rows;
  for (const ForcedRun& run : runs)
    forced_rows.push_back({run.name, fmt::format("{:.4f}", run.curve.val.back()),
                           fmt::format("{:+.4f}", run.curve.val.back() - runs[0].curve.val.back()),
                           fmt::format("{:.1e}", run.weight_error)});
  print_table({"run", "final validation loss", "against float32", "max |P - P_float32|"}, forced_rows);
  fmt::print(
      "\n(max |P - P_float32|: the attention weights of the trained model on a validation batch as the run\n"
      " computes them, against the same model's float32 weights.)\n");
  std::string forced_png = (std::filesystem::path(o.out) / "precision_forced.png").string();
  // The curves lie on top of each other; what shows is each one's distance from float32's.
  std::size_t forced_window = static_cast<std::size_t>(std::max<std::int64_t>(1, forced_steps / 10));
  std::vector<double> base = smoothed(runs[0].curve.train, forced_window);
  std::vector<ag::plot::Series> forced_series;
  for (std::size_t r = 1; r < runs.size(); ++r) {
    std::vector<double> diff = smoothed(runs[r].curve.train, forced_window);
    for (std::size_t i = 0; i < diff.size(); ++i) diff[i] -= base[i];
    forced_series.push_back({runs[r].name, runs[r].curve.steps, diff});
  }
  forced_series.push_back({"all float32", runs[0].curve.steps, std::vector<double>(base.size(), 0.0)});
  std::filesystem::create_directories(o.out);
  ag::plot::line_plot_png(forced_png, forced_series,
                          fmt::format("One step in bf16: training loss minus float32's ({}-step means)", forced_window),
                          "step", "difference in cross-entropy (nats per character)");
  fmt::print("wrote {}\n", forced_png);
  if (o.check) {
    expect(runs[1].weight_error > 1e-3 && runs[0].weight_error == 0.0,
           "a bf16 softmax moves the trained model's attention weights by more than 1e-3");
    expect(runs[0].curve.val.back() < runs[0].curve.val.front() - 0.5, "the written-out float32 model learns");
  }

  fmt::print("\nPart 3: the Mini-GPT (4 layers, 4 heads, width 128, block 64), {} each, same batches\n\n",
             ag::examples::plural(o.steps, "step"));
  if (!ag::bf16_support().available) {
    fmt::print("skipped: {}\n", ag::bf16_support().reason);
    return exit_code();
  }
  Text text = load_text(o, 64);
  Curve fp32 = train_curve(text, o, false, "fp32         ");
  Curve bf16 = train_curve(text, o, true, "bf16 autocast");
  print_table({"run", "final validation loss", "against fp32"},
              {{"fp32", fmt::format("{:.4f}", fp32.val.back()), "-"},
               {"bf16 autocast", fmt::format("{:.4f}", bf16.val.back()),
                fmt::format("{:+.4f}", bf16.val.back() - fp32.val.back())}});
  std::filesystem::create_directories(o.out);
  std::string png = (std::filesystem::path(o.out) / "precision_loss.png").string();
  std::size_t window = static_cast<std::size_t>(std::max<std::int64_t>(1, o.steps / 50));
  ag::plot::line_plot_png(png,
                          {{"fp32, training (smoothed)", fp32.steps, smoothed(fp32.train, window)},
                           {"bf16 autocast, training (smoothed)", bf16.steps, smoothed(bf16.train, window)},
                           {"fp32, validation", fp32.val_steps, fp32.val},
                           {"bf16 autocast, validation", bf16.val_steps, bf16.val}},
                          "Mini-GPT: float32 against bf16 matrix products", "step",
                          "cross-entropy (nats per character)");
  fmt::print("wrote {}\n", png);
  // The two curves cover each other: their difference, step by step and at each validation.
  std::vector<double> a = smoothed(bf16.train, window * 5), b = smoothed(fp32.train, window * 5), val_diff;
  for (std::size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  for (std::size_t i = 0; i < bf16.val.size(); ++i) val_diff.push_back(bf16.val[i] - fp32.val[i]);
  std::string diff_png = (std::filesystem::path(o.out) / "precision_loss_difference.png").string();
  ag::plot::line_plot_png(diff_png,
                          {{fmt::format("training ({}-step means)", window * 5), bf16.steps, a},
                           {"validation", bf16.val_steps, val_diff},
                           {"0", bf16.steps, std::vector<double>(a.size(), 0.0)}},
                          "Mini-GPT: bf16 autocast's loss minus float32's", "step",
                          "difference in cross-entropy (nats per character)");
  fmt::print("wrote {}\n", diff_png);
  if (o.check) {
    expect(std::abs(bf16.val.back() - fp32.val.back()) < 0.02,
           "bf16 autocast ends within 0.02 of float32's validation loss");
    expect(bf16.val.back() < bf16.val.front() - 0.5, "the bf16 run learns");
  }
  return exit_code();
}

}  // namespace experiments
