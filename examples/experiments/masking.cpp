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
// computed exactly below, and a model trained that way can learn to read through the leak. The
// model masked with 0 runs GPT::forward written out, its attention the composed reference with
// masked_score = 0 (ag::attention_reference): the library's modules only ever mask with -inf.
#include <array>
#include <cmath>
#include <functional>
#include <limits>

#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

// GPT::forward written out (its blocks are pre-LN), with one line changed: each block's heads
// attend through the composed reference, which sets a masked score to `masked_score`. -inf is
// the standard op; 0 is the mistake.
Tensor forward_masking_with(ag::nn::GPT& g, const Tensor& ids, double masked_score) {
  auto swap = [](const Tensor& t) { return t.transpose(1, 2); };  // [B, T, H, d] <-> [B, H, T, d]
  Tensor positions = ag::arange(0.0, static_cast<double>(ids.size(1)));
  Tensor x = g.drop->forward(g.wte->forward(ids) + g.wpe->forward(positions));
  for (std::size_t i = 0; i < g.blocks->size(); ++i) {
    ag::nn::SelfAttentionBlock& block = (*g.blocks)[i];
    ag::nn::MultiHeadAttention& attn = *block.attn;
    Tensor h = block.ln_1->forward(x);
    auto [q, k, v] = attn.project_heads(h, h, {});  // [B, T, H, D/H] each
    Tensor o = ag::attention_reference(swap(q), swap(k), swap(v), {}, g.causal, attn.scale, masked_score).output;
    x = x + attn.drop->forward(attn.out_proj->forward(attn.merge_heads(swap(o))));
    x = x + block.mlp->forward(block.ln_2->forward(x));
  }
  return ag::linear(g.ln_f->forward(x), g.wte->weight);
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = '/';
  return s;
}

// A model's loss on a batch (x, y) under an altered condition: no causal mask, a leaky mask.
using AlteredLoss = std::function<Tensor(ag::nn::GPT&, const Tensor& x, const Tensor& y)>;

// A standard Mini-GPT and an identical one (same initial weights, same batches) trained on
// `altered_loss`; the altered one is evaluated on it and on the standard loss (GPT::loss), the
// honest condition it will generate under.
struct Pair {
  double train_standard, val_standard, train_altered, val_altered_own, val_altered_honest;
};

Pair train_pair(const Text& text, const Options& o, const AlteredLoss& altered_loss,
                const std::array<std::string, 2>& labels, const std::array<std::string, 4>& columns) {
  ag::Generator init_a(o.seed), init_b(o.seed);
  ag::nn::GPT standard(small_gpt(text.tokenizer.size()), init_a), altered(small_gpt(text.tokenizer.size()), init_b);
  auto loss_of_altered = [&](const Tensor& x, const Tensor& y) { return altered_loss(altered, x, y); };
  Pair r{};
  r.train_standard = train(standard, text, o, labels[0]);
  r.train_altered = train_with(altered, text, o, altered.config.block_size, labels[1], loss_of_altered);
  r.val_altered_own = validation_loss(altered, text, o, 20, loss_of_altered);
  r.val_altered_honest = validation_loss(altered, text, o);
  r.val_standard = validation_loss(standard, text, o);
  auto f = [](double v) { return fmt::format("{:.4f}", v); };
  print_table({columns[0], columns[1], columns[2], columns[3]},
              {{labels[0], f(r.train_standard), f(r.val_standard), f(r.val_standard)},
               {labels[1], f(r.train_altered), f(r.val_altered_own), f(r.val_altered_honest)}});
  const char* sample_line = say(o, "sample, {}: {}\n", "采样，{}：{}\n");
  fmt::print("\n");
  fmt::print(fmt::runtime(sample_line), labels[0],
             one_line(sample(standard, text, prompt_for(text, "The "), 120, o.seed)));
  fmt::print(fmt::runtime(sample_line), labels[1],
             one_line(sample(altered, text, prompt_for(text, "The "), 120, o.seed)));
  fmt::print("\n");
  return r;
}

}  // namespace

int causal(const Options& o) {
  Text text = load_text(o);
  if (o.zh)
    fmt::print(
        "两个完全相同的 Mini-GPT，各在同样的批量上训练 {} 步；其中一个不加因果掩码。\n"
        "（在 {} 个字符上均匀瞎猜，损失为 ln {} = {:.3f}）\n\n",
        o.steps, text.tokenizer.size(), text.tokenizer.size(), std::log(static_cast<double>(text.tokenizer.size())));
  else
    fmt::print(
        "Two identical Mini-GPTs, {} each on the same batches; one without the causal mask.\n"
        "(uniform guessing over {} characters would score ln {} = {:.3f})\n\n",
        ag::examples::plural(o.steps, "step"), text.tokenizer.size(), text.tokenizer.size(),
        std::log(static_cast<double>(text.tokenizer.size())));
  // The peeking model is evaluated again with the mask on: it may only look back, as when it
  // generates (generation is causal whatever the flag says).
  auto unmasked_loss = [](ag::nn::GPT& m, const Tensor& x, const Tensor& y) {
    m.causal = false;
    Tensor loss = m.loss(x, y);
    m.causal = true;
    return loss;
  };
  Pair r = train_pair(
      text, o, unmasked_loss,
      {say(o, "trained with causal mask", "有因果掩码训练"), say(o, "trained without mask", "无掩码训练")},
      {say(o, "model", "模型"), say(o, "train loss (own mask)", "训练损失（自己的掩码）"),
       say(o, "val loss (own mask)", "验证损失（自己的掩码）"), say(o, "val loss (causal)", "验证损失（因果）")});
  if (o.check) {
    expect(r.train_altered < r.train_standard - 0.2,
           "without the mask the training loss falls lower (it reads the answer)");
    expect(r.val_altered_honest > r.val_standard + 0.2, "under the causal condition the unmasked model is worse");
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
  fmt::print(
      fmt::runtime(say(o, "Part 1: one head, T = {}, scores ~ N(0, 1); weight that reaches future keys per query\n\n",
                       "第 1 部分：一个头，T = {}，分数 ~ N(0, 1)；每个查询落在未来的键上的权重\n\n")),
      t);
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
  print_table({say(o, "query", "查询"), say(o, "future keys", "未来的键"), say(o, "leak with -inf", "用 -inf 时泄漏"),
               say(o, "leak with 0", "用 0 时泄漏"), "n / (sum e^s + n)"},
              rows);
  fmt::print(fmt::runtime(
                 say(o, "\n(the last column is the closed form; largest difference from the computed leak {:.1e})\n\n",
                     "\n（最后一列是闭式解；与计算出的泄漏相比，最大差 {:.1e}）\n\n")),
             worst_formula_error);

  // Part 2: what a model trained with the leaky mask learns.
  Text text = load_text(o);
  if (o.zh)
    fmt::print("第 2 部分：两个完全相同的 Mini-GPT，各训练 {} 步；其中一个用 0 而不是 -inf 遮住\n\n", o.steps);
  else
    fmt::print("Part 2: two identical Mini-GPTs, {} each; one masks with 0 instead of -inf\n\n",
               ag::examples::plural(o.steps, "step"));
  auto zero_masked_loss = [](ag::nn::GPT& m, const Tensor& x, const Tensor& y) {
    return ag::cross_entropy(forward_masking_with(m, x, 0.0), y);
  };
  Pair r = train_pair(text, o, zero_masked_loss,
                      {say(o, "masked with -inf", "用 -inf 遮住"), say(o, "masked with 0", "用 0 遮住")},
                      {say(o, "model", "模型"), say(o, "train loss (own mask)", "训练损失（自己的掩码）"),
                       say(o, "val loss (own mask)", "验证损失（自己的掩码）"),
                       say(o, "val loss (-inf mask)", "验证损失（-inf 掩码）")});
  if (o.check) {
    expect(worst_right_leak == 0.0, "with -inf no weight at all reaches a future key");
    expect(worst_formula_error < 1e-12, "with 0 the leak equals n / (sum e^s + n) exactly");
    expect(r.val_altered_own < r.val_altered_honest - 0.1, "the 0-masked model does better when it can read the leak");
  }
  return exit_code();
}

}  // namespace experiments
