// minigpt: a character-level GPT trained on real text. The five subcommands share these.
#pragma once

#include <attograd/attograd.h>

#include <boost/program_options/options_description.hpp>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../common/precision_option.h"

namespace minigpt {

struct TrainOptions {
  std::vector<std::string> corpus;  // files to read; empty means the English fortunes
  std::string out_dir = "minigpt-out";
  ag::nn::GPTConfig model{.vocab_size = 0, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  std::int64_t steps = 1200, batch = 16;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, grad_clip = 1.0;
  std::int64_t warmup = 100;
  std::int64_t eval_interval = 200, eval_batches = 20;
  std::int64_t checkpoint_interval = 100;  // steps between checkpoints (also written at every evaluation)
  double val_fraction = 0.1;
  std::uint64_t seed = 1337;
  std::string prompt;  // for the attention maps; empty: 32 characters of validation text
  std::int64_t sample_tokens = 300;
  bool resume = false;      // continue the run in out_dir, its model and options as its training state has them
  bool overwrite = false;   // replace the run in out_dir (without it or resume, one there is refused)
  bool new_corpus = false;  // with resume: continue on a corpus other than the one the run trained on
  // --resume: the corpus the run trained on, as its training state records it (corpus_record);
  // empty for a file that does not record it.
  std::string trained_corpus;
  // Micro-batches of `batch` windows per step, their gradients summed in order: one process
  // computing what `grad_accum` processes under mpirun compute at once (docs/distributed.md).
  std::int64_t grad_accum = 1;             // at most ag::examples::kMaxMicroBatches
  std::int64_t sync_check_interval = 100;  // under mpirun: steps between checks that every rank has the same weights
  // --precision, chosen once when the command line is read (examples/common/precision_option.h:
  // autocast is on from then if it chose bf16); train prints the choice with its settings.
  ag::examples::PrecisionChoice precision;
  // --resume: what the resumed run does otherwise than the one it continues (take_resumed_run),
  // printed once the run's checks have passed.
  std::vector<std::string> resume_notes;
  // --trace: every op's output and gradient, and the weights after each update, written to this
  // file (under mpirun, rank R > 0 writes trace_file(trace, R)), for `minigpt bisect`.
  std::string trace;
};

// The file rank `rank` writes for --trace FILE: FILE itself for rank 0, FILE.rankR for the others.
std::string trace_file(const std::string& trace, int rank);

// --- train's command line (examples/minigpt/options.cpp) --------------------------------------
// The words of train's options that become settings of TrainOptions once read (apply_train_words).
struct TrainWords {
  std::string precision, norm = "layer", mlp = "gelu";
};
// train's options, each bound to its field of `o` or `words`, with its default and its help.
// The caller stores a command line against them (ag::examples::store_command_line) and notifies.
boost::program_options::options_description train_options(TrainOptions& o, TrainWords& words);
// Once notified: --norm and --mlp into o.model, and --precision chosen (autocast set as it
// says). A word that is not one of an option's choices is refused, naming it.
void apply_train_words(TrainOptions& o, const TrainWords& words);

// --- What train checks before it starts (examples/minigpt/checks.cpp) ------------------------
// Every check throws ag::examples::Refused naming the option or the file.

// --resume: the model options (--block, --layers, --heads, --embd, --dropout, --norm, --mlp) become
// those of the training state in --out. One the command line gave (`given` says which, by name)
// must agree with it: a conflict is refused, naming both values. The schedule's options
// (--steps, --lr, --min-lr, --warmup) and the ones recorded_options lists are the run's when
// left out; given, they are this run's (a different one is noted).
void take_resumed_run(TrainOptions& options, const std::function<bool(const std::string&)>& given);
// The training options a training state records (io::TrainingState::options), by option name:
// --batch, --grad-accum, --weight-decay, --eval-interval, --eval-batches, --checkpoint-interval,
// --sync-every, --seed, --prompt and --sample-tokens.
// Also the corpus the run trains on (corpus_record, under "corpus"), so that a resume on another
// text is noticed.
std::map<std::string, std::string> recorded_options(const TrainOptions& options, const std::string& corpus);
// The options alone: ranges, finiteness, combinations, and the learning-rate schedule over
// every step of the run.
void check_train_options(const TrainOptions& options);
// The corpus, read and checked: its files (each regular, readable, non-empty UTF-8, and all
// of them small enough to hold in memory), both splits at least block + 1 characters, and the
// --prompt's characters in its vocabulary.
struct Corpus {
  std::vector<std::string> files;
  std::uint64_t fingerprint = 0;  // of the text: ranks of one run, and a run and its resume, read the same
  ag::data::CharTokenizer tokenizer;
  ag::data::TextDataset dataset;
};
Corpus read_training_corpus(const TrainOptions& options);
// The corpus as a training state records it: "fingerprint 1f0e..., 1234 characters".
std::string corpus_record(const Corpus& corpus);
// --resume: the corpus is the one the run trained on (unless its state does not say), or
// --new-corpus says to continue on another; else refused, naming both.
void check_resumed_corpus(const TrainOptions& options, const Corpus& corpus);
// The model and the run fit in memory, and every file the run writes can be written; no other
// run trains in --out, and a run already there is kept unless --resume or --overwrite says what
// to do with it. `config` is the model, its vocabulary known.
void check_train_resources(const TrainOptions& options, const ag::nn::GPTConfig& config);
// --trace's file for this rank: in a directory that exists, not a symbolic link or a file with
// another hard link (it is written where it is), and not the corpus or a file the run writes in --out.
void check_trace_file(const std::string& path, const TrainOptions& options);
// The files a run writes in --out, for check_output_dir.
std::vector<std::string> train_output_files(const ag::nn::GPTConfig& config);
// Those of them it writes into where they are rather than replaces: the lock (its pid) and the
// log (appended to, line by line). A symbolic link or a second hard link there is refused.
std::vector<std::string> train_files_written_in_place();
// Those of them a run (of any model) left in `dir`, by name, the checkpoints and log first;
// empty when it holds none.
std::vector<std::string> run_files_in(const std::string& dir);
// Sampling options (sample, and train's final sample): at least 0 tokens that fit in memory, a
// temperature >= 0 (0: the most likely token; inf: uniform over the top k), top_k >= 0.
void check_sampling_options(std::string_view tokens_option, std::int64_t tokens, double temperature,
                            std::int64_t top_k);
// `prompt` (given as `option`) is not empty and every character is in the vocabulary.
std::vector<std::int64_t> encode_prompt(const ag::data::CharTokenizer& tokenizer, const std::string& option,
                                        const std::string& prompt);

int train(const TrainOptions& options);

// Loads the model and tokenizer a training run saved.
struct Loaded {
  ag::io::GPTCheckpoint checkpoint;
  ag::data::CharTokenizer tokenizer;
  std::unique_ptr<ag::nn::GPT> model;
};
Loaded load(const std::string& checkpoint_path, ag::DType dtype = ag::kFloat32);

// The model's attention for `prompt` (cut to block_size characters): one label per character and,
// per layer, the weights [1, H, T, T] in float64.
// minigpt trace (examples/minigpt/trace.cpp): one head of one layer for a text, each step of the
// chapter's computation in float64 (the model converted to float64 first). `difference` is
// max |P - the weights the model's own attention op computed|.
struct HeadTrace {
  ag::Tensor x, w_q, w_k, w_v, q, k, v, s, scaled, masked, p, o;
  double difference = 0;
};
HeadTrace trace_head(ag::nn::GPT& model, const std::vector<std::int64_t>& ids, std::int64_t layer, std::int64_t head);
// Prints every step with its shape, at most `show` columns of a wide matrix (and rows of W),
// labels in Chinese with `zh`.
void print_trace(const HeadTrace& trace, const std::vector<std::string>& characters, const std::string& title,
                 std::int64_t show, bool zh);

struct PromptAttention {
  std::vector<std::string> tokens;
  std::vector<ag::Tensor> weights;
};
PromptAttention attention_for_prompt(ag::nn::GPT& model, const ag::data::CharTokenizer& tokenizer,
                                     const std::string& prompt);

// One self-contained HTML page (no network, no external files) where pointing at a character
// shows where it attends in every layer and head (examples/minigpt/explorer.cpp).
std::string attention_html(const PromptAttention& attention, const std::string& title);

// Writes one attention heat map per layer and head for `prompt` and returns their paths.
std::vector<std::string> write_attention_maps(ag::nn::GPT& model, const ag::data::CharTokenizer& tokenizer,
                                              const std::string& prompt, const std::string& out_dir);

}  // namespace minigpt
