// experiments: runnable tests of what the attention chapter claims. Each subcommand trains or
// computes something small, prints a table, writes a picture where one helps, and with
// --check exits non-zero unless the effect goes the way the experiment reports it.
#pragma once

#include <attograd/attograd.h>

#include <functional>
#include <string>
#include <vector>

#include "../common/cli.h"  // plural, for the counts they print

namespace experiments {

struct Options {
  std::int64_t steps = 400;  // training steps per model
  std::int64_t batch = 16;
  std::uint64_t seed = 1;
  std::int64_t corpus_chars = 300000;   // characters of the English fortunes used
  std::string out = "experiments-out";  // PNGs go here
  bool check = false;                   // assert the direction of the effect (for tests)
};

// A character-level corpus: the first `chars` characters of the English fortunes.
struct Text {
  ag::data::CharTokenizer tokenizer;
  ag::data::TextDataset dataset;
};
Text load_text(std::int64_t chars);

// The small Mini-GPT the experiments train unless they say otherwise (about 0.1 M parameters).
ag::nn::GPTConfig small_gpt(std::int64_t vocab_size);

// Trains with AdamW and a warm-up + cosine schedule on windows of `block` tokens, the same
// batches for every model; returns the mean training loss of the last tenth of the steps.
double train_with(ag::nn::Module& model, const Text& text, const Options& o, std::int64_t block,
                  const std::string& label,
                  const std::function<ag::Tensor(const ag::Tensor& x, const ag::Tensor& y)>& loss_of);
// train_with for a GPT and its own loss (under whatever the model's knobs say).
double train(ag::nn::GPT& model, const Text& text, const Options& o, const std::string& label);
// `batches` fixed validation batches of `block` tokens: the same ones for every model.
std::vector<ag::data::TextDataset::Batch> validation_batches(const Text& text, const Options& o, std::int64_t block,
                                                             std::int64_t batches = 20);
// Mean validation loss over those batches.
double validation_loss(ag::nn::GPT& model, const Text& text, const Options& o, std::int64_t batches = 20);
// `n` sampled characters after `prompt`, temperature 0.8.
std::string sample(ag::nn::GPT& model, const Text& text, const std::string& prompt, std::int64_t n, std::uint64_t seed);

// A table printed with aligned columns.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// --check: prints the claim with PASS/FAIL and remembers failures for the exit code.
void expect(bool holds, const std::string& claim);
int exit_code();

int scaling(const Options& o);     // why divide by sqrt(d_k)
int causal(const Options& o);      // training without the causal mask
int mask_fill(const Options& o);   // masking with 0 instead of -inf
int positions(const Options& o);   // positional information
int shapes(const Options& o);      // where Q, K and V come from
int self_test(const Options& o);   // the notes' self-test questions, answered by running code
int heads(const Options& o);       // multi-head against single-head at the same width
int baselines(const Options& o);   // bigram and fixed-window MLP against the Mini-GPT
int importance(const Options& o);  // attention weights against gradient and leave-one-out importance

}  // namespace experiments
