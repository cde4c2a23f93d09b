// Two experiments on the causal mask.
//
// causal: a language model predicts token t+1 from tokens 0..t. Trained without the mask,
// position t can also read token t+1 itself, the answer. Its training loss then falls far
// below an honest model's, and the measure that matters, loss when it may only look back (as
// in generation), shows what it really learned.
//
// mask-fill: "masking" by setting future scores to 0 instead of -inf. exp(0) = 1 is a weight
// like any other, so after normalisation each future key keeps a share of
//   (number of future keys) / (sum over allowed keys of e^s + number of future keys),
// computed exactly below, and a model trained that way can learn to read through the leak.
#include <cmath>
#include <limits>

#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

void set_zero_fill(ag::nn::GPT& model, bool on) {
  for (std::size_t i = 0; i < model.blocks->size(); ++i) (*model.blocks)[i].attn->zero_fill_mask = on;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = '/';
  return s;
}

}  // namespace

int causal(const Options& o) {
  Text text = load_text(o.corpus_chars);
  ag::Generator init_a(o.seed), init_b(o.seed);  // the same initial weights
  ag::nn::GPT honest(small_gpt(text.tokenizer.size()), init_a), peeking(small_gpt(text.tokenizer.size()), init_b);
  peeking.causal = false;
  fmt::print("Two identical Mini-GPTs, {} steps each on the same batches; one without the causal mask.\n\n", o.steps);
  double train_honest = train(honest, text, o, "causal ");
  double train_peeking = train(peeking, text, o, "no mask");
  double val_peeking_own = validation_loss(peeking, text, o);
  peeking.causal = true;  // now it may only look back, as when it generates
  double val_peeking_causal = validation_loss(peeking, text, o);
  double val_honest = validation_loss(honest, text, o);
  print_table({"model", "train loss (own mask)", "val loss (own mask)", "val loss (causal)"},
              {{"trained with causal mask", fmt::format("{:.4f}", train_honest), fmt::format("{:.4f}", val_honest),
                fmt::format("{:.4f}", val_honest)},
               {"trained without mask", fmt::format("{:.4f}", train_peeking), fmt::format("{:.4f}", val_peeking_own),
                fmt::format("{:.4f}", val_peeking_causal)}});
  fmt::print("\nuniform guessing over {} characters would score ln {} = {:.3f}\n", text.tokenizer.size(),
             text.tokenizer.size(), std::log(static_cast<double>(text.tokenizer.size())));
  std::string prompt = "The ";
  fmt::print("\nsample, causal model:   {}\n", one_line(sample(honest, text, prompt, 120, o.seed)));
  fmt::print("sample, unmasked model: {}\n\n", one_line(sample(peeking, text, prompt, 120, o.seed)));
  if (o.check) {
    expect(train_peeking < train_honest - 0.2, "without the mask the training loss falls lower (it reads the answer)");
    expect(val_peeking_causal > val_honest + 0.2, "under the causal condition the unmasked model is worse");
  }
  return exit_code();
}

int mask_fill(const Options& o) {
  // Part 1: exact weights for one head's scores, T = 6.
  const std::int64_t t = 6;
  ag::Generator gen(o.seed);
  Tensor scores = ag::randn({t, t}, gen, ag::kFloat64);
  Tensor future = ag::logical_not(ag::causal_mask(t, t));
  Tensor right = ag::softmax(ag::masked_fill(scores, future, -std::numeric_limits<double>::infinity()), 1);
  Tensor wrong = ag::softmax(ag::masked_fill(scores, future, 0.0), 1);
  fmt::print("Part 1: one head, T = {}, scores ~ N(0, 1); weight that reaches future keys per query\n\n", t);
  std::vector<std::vector<std::string>> rows;
  double worst_formula_error = 0, worst_right_leak = 0;
  const double* s = scores.data_ptr<double>();
  for (std::int64_t i = 0; i < t; ++i) {
    double leak_right = 0, leak_wrong = 0, allowed = 0;
    for (std::int64_t j = 0; j < t; ++j) {
      if (j > i) {
        leak_right += right.data_ptr<double>()[i * t + j];
        leak_wrong += wrong.data_ptr<double>()[i * t + j];
      } else {
        allowed += std::exp(s[i * t + j]);
      }
    }
    auto n_future = static_cast<double>(t - 1 - i);
    double formula = n_future / (allowed + n_future);
    worst_formula_error = std::max(worst_formula_error, std::abs(formula - leak_wrong));
    worst_right_leak = std::max(worst_right_leak, leak_right);
    rows.push_back({std::to_string(i), std::to_string(t - 1 - i), fmt::format("{:.6f}", leak_right),
                    fmt::format("{:.6f}", leak_wrong), fmt::format("{:.6f}", formula)});
  }
  print_table({"query", "future keys", "leak with -inf", "leak with 0", "n / (sum e^s + n)"}, rows);
  fmt::print("\n(the last column is the closed form; largest difference from the computed leak {:.1e})\n\n",
             worst_formula_error);

  // Part 2: what a model trained with the leaky mask learns.
  Text text = load_text(o.corpus_chars);
  ag::Generator init_a(o.seed), init_b(o.seed);
  ag::nn::GPT right_model(small_gpt(text.tokenizer.size()), init_a), leaky(small_gpt(text.tokenizer.size()), init_b);
  set_zero_fill(leaky, true);
  fmt::print("Part 2: two identical Mini-GPTs, {} steps each; one masks with 0 instead of -inf\n\n", o.steps);
  double train_right = train(right_model, text, o, "-inf");
  double train_leaky = train(leaky, text, o, "0   ");
  double val_leaky_own = validation_loss(leaky, text, o);
  set_zero_fill(leaky, false);  // evaluated with a real mask
  double val_leaky_real = validation_loss(leaky, text, o);
  double val_right = validation_loss(right_model, text, o);
  print_table({"model", "train loss (own mask)", "val loss (own mask)", "val loss (-inf mask)"},
              {{"masked with -inf", fmt::format("{:.4f}", train_right), fmt::format("{:.4f}", val_right),
                fmt::format("{:.4f}", val_right)},
               {"masked with 0", fmt::format("{:.4f}", train_leaky), fmt::format("{:.4f}", val_leaky_own),
                fmt::format("{:.4f}", val_leaky_real)}});
  fmt::print("\nsample, -inf model: {}\n", one_line(sample(right_model, text, "The ", 120, o.seed)));
  fmt::print("sample, 0 model:    {}\n\n", one_line(sample(leaky, text, "The ", 120, o.seed)));
  if (o.check) {
    expect(worst_right_leak == 0.0, "with -inf no weight at all reaches a future key");
    expect(worst_formula_error < 1e-12, "with 0 the leak equals n / (sum e^s + n) exactly");
    expect(val_leaky_own < val_leaky_real - 0.1, "the 0-masked model does better when it can read the leak");
  }
  return exit_code();
}

}  // namespace experiments
