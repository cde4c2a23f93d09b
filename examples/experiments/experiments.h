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
  std::vector<std::string> corpus;                               // text files to read; empty: the English fortunes
  std::int64_t corpus_chars = 300000;                            // characters of the corpus used
  std::string out = "experiments-out";                           // PNGs go here
  bool check = false;                                            // assert the direction of the effect (for tests)
  std::vector<std::int64_t> distances{2, 4, 8, 10, 16, 32, 48};  // long-range: how far back the answer is
  bool every_position = false;        // long-range: the loss at every position, the unpredictable ones too
  double gd_lr = 0.05;                // sharpness: gradient descent's step size
  double adam_lr = 3e-3;              // sharpness: AdamW's
  std::int64_t sharpness_every = 20;  // sharpness: steps between two measurements
  std::vector<std::int64_t> lengths{16, 32, 64, 128, 256, 512, 1024, 2048, 4096};  // sequential: the T timed
  bool zh = false;  // --lang zh: the printed labels in Chinese (the experiments the Chinese tour runs)
};

// `en` or, under --lang zh, `zh`: one printed label in the reader's language.
inline const char* say(const Options& o, const char* en, const char* zh) { return o.zh ? zh : en; }

// A character-level corpus: the first --corpus-chars characters of --corpus (any UTF-8 text,
// Chinese included), by default of the English fortunes (ASCII only), split 90/10 into training
// and validation text. Refused when the validation part is shorter than a window of `block`.
struct Text {
  ag::data::CharTokenizer tokenizer;
  ag::data::TextDataset dataset;
};
Text load_text(const Options& o, std::int64_t block = 32);
// `wanted` when the corpus has all its characters, else the first 4 characters of the
// validation text: a prompt that every corpus can encode.
std::string prompt_for(const Text& text, const std::string& wanted);

// The small Mini-GPT the experiments train unless they say otherwise (about 0.1 M parameters).
ag::nn::GPTConfig small_gpt(std::int64_t vocab_size);

// How a run's AdamW goes: warm-up over `warmup` steps, then a cosine from lr down to min_lr.
struct Schedule {
  double lr = 3e-3, min_lr = 3e-4, beta2 = 0.999;
  std::int64_t warmup = 0;
};

// The experiments' training loop: `steps` AdamW steps on windows of `block` tokens, the same
// batches for every model (drawn from --seed), gradients clipped to norm 1, with a progress bar.
// `loss_of(x, y)` is a batch's loss; `before_step(step)`, when given, runs before each step and
// `after_step(step, loss)` after it.
void fit(ag::nn::Module& model, const Text& text, const Options& o, std::int64_t steps, std::int64_t block,
         const Schedule& schedule, const std::string& label,
         const std::function<ag::Tensor(const ag::Tensor& x, const ag::Tensor& y)>& loss_of,
         const std::function<void(std::int64_t step, double loss)>& after_step,
         const std::function<void(std::int64_t step)>& before_step = {});

// fit for --steps with the default schedule (warm-up a tenth of the run); returns the mean
// training loss of the last tenth of the steps.
double train_with(ag::nn::Module& model, const Text& text, const Options& o, std::int64_t block,
                  const std::string& label,
                  const std::function<ag::Tensor(const ag::Tensor& x, const ag::Tensor& y)>& loss_of);
// train_with for a GPT and its own loss (under whatever the model's knobs say).
double train(ag::nn::GPT& model, const Text& text, const Options& o, const std::string& label);
// `batches` fixed validation batches of `block` tokens: the same ones for every model.
std::vector<ag::data::TextDataset::Batch> validation_batches(const Text& text, const Options& o, std::int64_t block,
                                                             std::int64_t batches = 20);
// Mean validation loss over those batches: the model's own loss, or `loss_of(x, y)` when given.
double validation_loss(ag::nn::GPT& model, const Text& text, const Options& o, std::int64_t batches = 20,
                       const std::function<ag::Tensor(const ag::Tensor& x, const ag::Tensor& y)>& loss_of = {});
// `n` sampled characters after `prompt`, temperature 0.8.
std::string sample(ag::nn::GPT& model, const Text& text, const std::string& prompt, std::int64_t n, std::uint64_t seed);

// The neural language model of Bengio et al. (2003): the embeddings of the last `window`
// tokens, concatenated, go through one tanh layer to the next token's logits. It sees a fixed
// window and nothing before it.
class WindowMLP : public ag::nn::Module {
 public:
  WindowMLP(std::int64_t vocab, std::int64_t window, std::int64_t embed, std::int64_t hidden, ag::Generator& gen);
  // ids [B, T] -> logits [B, T - window + 1, vocab]: one prediction per full window, the one
  // ending at position window - 1 + l predicting the token after it.
  ag::Tensor forward(const ag::Tensor& ids) const;

  std::int64_t window;
  std::shared_ptr<ag::nn::Embedding> emb;
  std::shared_ptr<ag::nn::Linear> hidden, out;
};
// The targets a WindowMLP predicts: y[:, window - 1:].
ag::Tensor window_targets(const ag::Tensor& y, std::int64_t window);

// A table printed with aligned columns.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// --check: prints the claim with PASS/FAIL and remembers failures for the exit code.
void expect(bool holds, const std::string& claim);
int exit_code();

int scaling(const Options& o);        // why divide by sqrt(d_k)
int causal(const Options& o);         // training without the causal mask
int mask_fill(const Options& o);      // masking with 0 instead of -inf
int positions(const Options& o);      // positional information
int shapes(const Options& o);         // where Q, K and V come from
int self_test(const Options& o);      // the notes' self-test questions, answered by running code
int heads(const Options& o);          // multi-head against single-head at the same width
int baselines(const Options& o);      // bigram and fixed-window MLP against the Mini-GPT
int importance(const Options& o);     // attention weights against gradient and leave-one-out importance
int bottleneck(const Options& o);     // a decoder reading one fixed vector against cross-attention
int long_range(const Options& o);     // accuracy by how far back the answer is; attention need not learn it
int precision(const Options& o);      // what bf16 costs each step; a Mini-GPT trained with bf16 products
int bidirectional(const Options& o);  // BERT-style encoder against a causal GPT on a middle character
int sharpness(const Options& o);      // the largest Hessian eigenvalue during training, against 2/lr and 38/lr
int rnn_bottleneck(const Options& o);  // the GRU encoder-decoder's last state against additive attention and the Transformer
int sequential(const Options& o);      // a GRU against self-attention: time by T, path length, gradient reach
int coreference(const Options& o);     // which noun "it" names: accuracy, each head's attention, each head zeroed

}  // namespace experiments
