// What minigpt checks before it starts work (examples/common/preflight.h): a run that passes
// these cannot fail later for a reason known at the start.
#include <cmath>
#include <filesystem>

#include "../common/memory_budget.h"
#include "../common/preflight.h"
#include "minigpt.h"

namespace minigpt {

using ag::examples::refuse;

namespace {

// The attention maps draw one cell per pair of prompt characters, at least a pixel each, in
// a picture of at most 16384 pixels a side (examples/common/image.cpp).
constexpr std::int64_t kMaxMapCharacters = 4096;

void check_at_least(const char* option, std::int64_t value, std::int64_t least) {
  if (value >= least) return;
  if (least == 1) refuse("{} must be positive, got {}", option, value);
  refuse("{} must be at least {}, got {}", option, least, value);
}

}  // namespace

void check_train_options(const TrainOptions& o) {
  check_at_least("--steps", o.steps, 1);
  check_at_least("--batch", o.batch, 1);
  check_at_least("--block", o.model.block_size, 1);
  check_at_least("--layers", o.model.n_layer, 1);
  check_at_least("--heads", o.model.n_head, 1);
  check_at_least("--embd", o.model.n_embd, 1);
  check_at_least("--eval-interval", o.eval_interval, 1);
  check_at_least("--eval-batches", o.eval_batches, 1);
  check_at_least("--checkpoint-interval", o.checkpoint_interval, 1);
  check_at_least("--warmup", o.warmup, 0);
  check_at_least("--sample-tokens", o.sample_tokens, 0);
  if (o.model.n_embd % o.model.n_head != 0)
    refuse("--embd {} must be a multiple of --heads {}: each head takes an equal share of the width", o.model.n_embd,
           o.model.n_head);
  if (!(o.model.dropout >= 0 && o.model.dropout < 1)) refuse("--dropout must be in [0, 1), got {}", o.model.dropout);
  if (!(std::isfinite(o.lr) && o.lr > 0)) refuse("--lr must be a positive finite number, got {}", o.lr);
  if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0))
    refuse("--weight-decay must be a finite number >= 0, got {}", o.weight_decay);
  // AdamW shrinks each matrix by lr * weight_decay per step: at 1 or more it zeroes or flips it.
  if (o.lr * o.weight_decay >= 1)
    refuse(
        "--lr {} times --weight-decay {} is {}: each step would shrink every matrix by that fraction of itself; "
        "keep the product below 1",
        o.lr, o.weight_decay, o.lr * o.weight_decay);
  // The schedule over every step: the warm-up rises linearly from lr / warmup to lr, then the
  // cosine falls from lr to min_lr. So every rate lies between min(lr / warmup, min_lr) and lr,
  // and these bounds are what needs checking, not each of the steps.
  if (!(std::isfinite(o.min_lr) && o.min_lr >= 0 && o.min_lr <= o.lr))
    refuse(
        "--min-lr must be a finite number from 0 to --lr ({}), got {}: the cosine schedule falls from --lr to "
        "--min-lr",
        o.lr, o.min_lr);
  if (o.warmup > o.steps)
    refuse("--warmup {} is longer than the run (--steps {}): the learning rate would never reach --lr", o.warmup,
           o.steps);
  ag::optim::WarmupCosine schedule{.warmup = o.warmup, .total = o.steps, .max_lr = o.lr, .min_lr = o.min_lr};
  for (std::int64_t step : {std::int64_t{0}, o.warmup - 1, o.warmup, o.steps - 1}) {
    if (step < 0) continue;
    double lr = schedule.lr_at(step);
    if (!(std::isfinite(lr) && lr >= 0 && lr <= o.lr))  // cannot happen after the checks above
      refuse("the learning-rate schedule gives {} at step {}", lr, step);
  }
}

Corpus read_training_corpus(const TrainOptions& o) {
  std::vector<std::string> files = o.corpus.empty() ? default_corpus() : o.corpus;
  std::string text = read_corpus(files);
  auto tokenizer = ag::data::CharTokenizer::from_text(text);
  ag::data::TextDataset dataset(tokenizer.encode(text), o.val_fraction);
  using Split = ag::data::TextDataset::Split;
  std::int64_t block = o.model.block_size, chars = dataset.size(Split::Train) + dataset.size(Split::Validation);
  for (auto [split, name] : {std::pair{Split::Train, "training split (the first 90%)"},
                             {Split::Validation, "validation split (the last 10%)"}})
    if (dataset.size(split) < block + 1)
      refuse(
          "the corpus has {} characters, so its {} has {}, fewer than --block + 1 = {}: every window needs "
          "block + 1 characters; use a longer corpus or a smaller --block",
          chars, name, dataset.size(split), block + 1);
  if (!o.prompt.empty()) {
    std::vector<std::int64_t> ids = encode_prompt(tokenizer, "--prompt", o.prompt);
    if (std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()), block) > kMaxMapCharacters)
      refuse("--prompt has {} characters; the attention maps take at most {} (one cell per pair of characters)",
             ids.size(), kMaxMapCharacters);
  }
  encode_prompt(tokenizer, "the final sample's prompt", "\n");  // every corpus line ends in one
  return {std::move(files), std::move(tokenizer), std::move(dataset)};
}

std::vector<std::string> train_output_files(const ag::nn::GPTConfig& config) {
  std::vector<std::string> files{"minigpt.lock", "train_log.csv", "minigpt.safetensors", "minigpt.train.safetensors",
                                 "loss.png"};
  for (std::int64_t layer = 0; layer < config.n_layer; ++layer)
    for (std::int64_t head = 0; head < config.n_head; ++head)
      files.push_back(fmt::format("attention_layer{}_head{}.png", layer, head));
  return files;
}

void check_train_resources(const TrainOptions& o, const ag::nn::GPTConfig& c) {
  ag::examples::check_fits_in_memory(
      fmt::format("the model (--layers {} --heads {} --embd {} --block {}, a vocabulary of {}) at --batch {}",
                  c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size, o.batch),
      ag::examples::gpt_training_memory(c, o.batch));
  // The loss history kept for the picture: a step number and a loss per step, as doubles.
  ag::examples::check_fits_in_memory(fmt::format("the loss history of --steps {}", o.steps),
                                     ag::examples::Size(o.steps) * 32);
  check_sampling_options(o.sample_tokens, 0.8, 20);
  // Checked last, as the cheapest to fix: nothing above depends on it.
  ag::examples::check_output_dir("--out", o.out_dir, train_output_files(c));
  if (o.resume)
    ag::examples::check_input_file("--resume",
                                   (std::filesystem::path(o.out_dir) / "minigpt.train.safetensors").string());
}

void check_sampling_options(std::int64_t tokens, double temperature, std::int64_t top_k) {
  if (tokens < 0) refuse("the number of tokens to sample must be at least 0, got {}", tokens);
  // The ids (8 bytes each) and the text (up to 4 bytes a character, twice while decoding).
  ag::examples::check_fits_in_memory(fmt::format("a sample of {} tokens", tokens), ag::examples::Size(tokens) * 16);
  if (!(temperature >= 0))
    refuse("--temperature must be >= 0 (0: always the most likely character; inf: uniform over the top k), got {}",
           temperature);
  if (top_k < 0) refuse("--top-k must be at least 0 (0: every character), got {}", top_k);
}

std::vector<std::int64_t> encode_prompt(const ag::data::CharTokenizer& tokenizer, const std::string& option,
                                        const std::string& prompt) {
  if (prompt.empty()) refuse("{} is empty; it needs at least one character", option);
  try {
    return tokenizer.encode(prompt);
  } catch (const std::invalid_argument& e) {
    refuse("{}: {} (a vocabulary of {} characters)", option, e.what(), tokenizer.size());
  }
}

}  // namespace minigpt
