// Bidirectional (BERT-style) against causal (GPT-style) attention, on the same characters.
//
// Three copies of one small Transformer (embeddings, 2 pre-LN blocks of d_model 64 and 4 heads
// with rotary positions, a final LayerNorm and a linear head), the same initial weights, the same
// steps on the same windows of 32 characters:
// - encoder: no causal mask, trained as BERT is: 8 of the 32 characters of each window are
//   replaced by a [MASK] token and it predicts them, reading the window on both sides;
// - causal, masked characters: the same objective on the same masks, with the causal mask, so
//   each [MASK] is filled from the characters before it alone;
// - GPT-style: the causal mask and the language model's objective, every next character.
//
// All three are scored on one held-out task: the character in the middle of a window (position
// 16 of 0..31). The encoder sees it as [MASK] with 16 characters before it and 15 after; the
// causal models read the 16 before it and nothing else. The first two differ in the mask alone,
// so the gap between them is what the right-hand context is worth; the third shows how much
// more a language model learns per window when every character is a target.
//
// The encoder may look both ways because its targets are not in its input: a masked character
// has been replaced. A language model's target at position t is the input at t + 1, so without
// the mask it would read its own answer (experiments causal).
//
// Rotary positions, not the Mini-GPT's learned table: a [MASK] carries nothing of its own, so the
// model must find its neighbours by position alone. RoPE makes "the key one to my left" the same
// direction at every position, one thing to learn; a learned table starts as small noise and
// would have to learn each position's neighbours separately (docs/attention.md, "Positions").
#include <cmath>

#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

constexpr std::int64_t kBlock = 32, kMasked = 8, kMiddle = 16, kIgnore = -1;

// Input and targets of a masked-character batch: `positions` [B][...] of x replaced by the
// mask token; targets are the original characters there and kIgnore elsewhere.
std::pair<Tensor, Tensor> masked_batch(const Tensor& x, const std::vector<std::vector<std::int64_t>>& positions,
                                       std::int64_t mask_token) {
  std::vector<std::int64_t> in = x.to_vector<std::int64_t>(), target(in.size(), kIgnore);
  std::int64_t t = x.size(1);
  for (std::size_t b = 0; b < positions.size(); ++b)
    for (std::int64_t p : positions[b]) {
      auto at = static_cast<std::size_t>(static_cast<std::int64_t>(b) * t + p);
      target[at] = in[at];
      in[at] = mask_token;
    }
  return {ag::from_vector(in, x.shape()), ag::from_vector(target, x.shape())};
}

// `count` distinct positions in [0, t), drawn from `gen`.
std::vector<std::int64_t> distinct_positions(std::int64_t count, std::int64_t t, ag::Generator& gen) {
  std::vector<std::int64_t> out;
  while (std::ssize(out) < count) {
    std::int64_t p = gen.integer(0, t);
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

class CharTransformer : public ag::nn::Module {
 public:
  // The embedding has a row more than the vocabulary: the [MASK] token. The head predicts the
  // vocabulary's characters.
  CharTransformer(std::int64_t vocab, ag::Generator& gen) {
    embed = register_module("embed", std::make_shared<ag::nn::Embedding>(vocab + 1, kWidth, gen));
    blocks = register_module("blocks", std::make_shared<ag::nn::ModuleList<ag::nn::SelfAttentionBlock>>());
    for (int i = 0; i < 2; ++i)
      blocks->push_back(std::make_shared<ag::nn::SelfAttentionBlock>(
          ag::nn::BlockOptions{.d_model = kWidth, .n_heads = 4, .d_ff = 4 * kWidth, .rotary = true, .max_len = kBlock},
          gen));
    norm = register_module("norm", std::make_shared<ag::nn::LayerNorm>(kWidth));
    head = register_module("head", std::make_shared<ag::nn::Linear>(kWidth, vocab, true, gen));
  }

  // ids [B, T] -> logits [B, T, vocab]; causal hides every later position from each query.
  Tensor forward(const Tensor& ids, bool causal) {
    Tensor x = embed->forward(ids);
    for (auto& block : *blocks) x = block->forward(x, {}, causal);
    return head->forward(norm->forward(x));
  }

  static constexpr std::int64_t kWidth = 64;
  std::shared_ptr<ag::nn::Embedding> embed;
  std::shared_ptr<ag::nn::ModuleList<ag::nn::SelfAttentionBlock>> blocks;
  std::shared_ptr<ag::nn::LayerNorm> norm;
  std::shared_ptr<ag::nn::Linear> head;
};

struct Score {
  double loss = 0, accuracy = 0;
};

// Cross-entropy and top-1 accuracy of logits [B, 1, V] against targets [B, 1].
Score score(const Tensor& logits, const Tensor& targets) {
  Tensor right = ag::argmax(logits, -1) == targets;  // bool [B, 1]
  return {ag::cross_entropy(logits, targets).item(), right.mean().item()};
}

}  // namespace

int bidirectional(const Options& o) {
  Text text = load_text(o, kBlock);
  const std::int64_t vocab = text.tokenizer.size(), mask_token = vocab;
  fmt::print(
      "The middle character of a {}-character window, read from both sides or from the left only: three copies\n"
      "of one model, {} each on the same windows.\n\n",
      kBlock, ag::examples::plural(o.steps, "step"));

  struct Run {
    std::string label, reads;
    bool causal, masked_objective;
    std::shared_ptr<CharTransformer> model;
    Score score;
  };
  std::vector<Run> runs{
      {"encoder (BERT-style)", fmt::format("{} before + {} after", kMiddle, kBlock - kMiddle - 1), false, true, {}, {}},
      {"causal, masked characters", fmt::format("{} before", kMiddle), true, true, {}, {}},
      {"causal, next character (GPT-style)", fmt::format("{} before", kMiddle), true, false, {}, {}}};
  for (Run& run : runs) {
    ag::Generator init(o.seed), masks(o.seed + 400);  // the same weights, and the same masks
    run.model = std::make_shared<CharTransformer>(vocab, init);
    CharTransformer& model = *run.model;
    train_with(model, text, o, kBlock, run.label, [&](const Tensor& x, const Tensor& y) {
      if (!run.masked_objective) return ag::cross_entropy(model.forward(x, run.causal), y);
      std::vector<std::vector<std::int64_t>> positions;
      for (std::int64_t b = 0; b < x.size(0); ++b) positions.push_back(distinct_positions(kMasked, kBlock, masks));
      auto [in, target] = masked_batch(x, positions, mask_token);
      return ag::cross_entropy(model.forward(in, run.causal), target, kIgnore);
    });
  }

  // The held-out middle characters of 20 batches of validation windows.
  {
    ag::NoGradGuard no_grad;
    auto batches = validation_batches(text, o, kBlock);
    for (Run& run : runs) {
      run.model->eval();
      for (const auto& b : batches) {
        Tensor middle = b.x.slice(1, kMiddle, kMiddle + 1);  // [B, 1]: the character to recover
        Tensor logits;
        if (run.masked_objective) {  // the middle character replaced by [MASK], predicted where it stands
          std::vector<std::vector<std::int64_t>> at_middle(static_cast<std::size_t>(b.x.size(0)), {kMiddle});
          logits = run.model->forward(masked_batch(b.x, at_middle, mask_token).first, run.causal)
                       .slice(1, kMiddle, kMiddle + 1);
        } else {  // a language model predicts it at the position before, having read up to there
          logits = run.model->forward(b.x, true).slice(1, kMiddle - 1, kMiddle);
        }
        Score s = score(logits, middle);
        double w = 1.0 / static_cast<double>(batches.size());
        run.score.loss += w * s.loss;
        run.score.accuracy += w * s.accuracy;
      }
    }
  }

  fmt::print("Held-out: the character at position {} of {} validation windows (each model: {} parameters)\n", kMiddle,
             20 * o.batch, runs[0].model->parameter_count());
  std::vector<std::vector<std::string>> rows;
  for (const Run& run : runs)
    rows.push_back({run.label, run.causal ? "causal" : "none", run.reads, fmt::format("{:.4f}", run.score.loss),
                    fmt::format("{:.2f}", std::exp(run.score.loss)),
                    fmt::format("{:.1f} %", 100 * run.score.accuracy)});
  print_table({"model", "mask", "reads", "loss (nats)", "perplexity", "top-1 right"}, rows);
  double gap = runs[1].score.loss - runs[0].score.loss;
  fmt::print("\nthe right-hand context is worth {:.3f} nats on this character (same objective, same training)\n\n",
             gap);

  if (o.check)
    expect(gap > 0.2,
           "reading both sides, the encoder's loss on the middle character is 0.2 nats below the causal model's "
           "trained on the same masks");
  return exit_code();
}

}  // namespace experiments
