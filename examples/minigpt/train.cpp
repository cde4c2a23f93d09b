// minigpt train: the training loop, with evaluation, checkpoints and pictures. train() at the
// end of the file is the whole run, as a short sequence of the steps defined above it:
//
//   check_run           every option, the corpus, the memory the model needs and the output
//                       directory are checked (checks.cpp); nothing is written until all pass
//   prepare             the model, AdamW and the schedule, the state --resume continues from,
//                       every rank started alike; then the output directory is locked
//   for each step:
//     train_step        lr from the warm-up + cosine schedule
//                       x, y = a random batch of windows;  loss = cross_entropy(model(x), y)
//                       backward; clip the gradient norm; AdamW step
//     show_progress     the smoothed loss on the progress bar
//     evaluate          every eval_interval steps: mean loss on held-out windows
//     report            the log line; a checkpoint at every evaluation and every
//                       checkpoint_interval steps
//   after_training      on SIGINT / SIGTERM: a checkpoint (model, optimizer, step, schedule,
//                       generators and options in one file, written atomically), from which --resume
//                       continues exactly as if the run had not stopped; else the loss curve,
//                       the attention maps and a sample
//
// A signal is answered within one op (examples/common/stop.h): a step it cuts short is dropped,
// its random draws undone, so the checkpoint is the one the last complete step left.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "../common/cli.h"
#include "../common/finite.h"
#include "../common/plot.h"
#include "../common/preflight.h"
#include "../common/progress.h"
#include "../common/ranks.h"
#include "../common/run_lock.h"
#include "../common/stop.h"
#include "minigpt.h"

namespace minigpt {

namespace {

using Split = ag::data::TextDataset::Split;
using ag::examples::Interrupted;
using ag::examples::plural;
using ag::examples::StopBetweenOps;

// Mean loss over `batches` random batches of one split, without a graph and in eval mode; none
// when a stop request cut it short. Every batch is drawn either way, so `gen` ends where an
// evaluation that ran to the end leaves it, and a resumed run draws the same batches.
std::optional<double> estimate_loss(ag::nn::GPT& model, const ag::data::TextDataset& ds, Split split,
                                    const TrainOptions& o, ag::Generator& gen) {
  ag::NoGradGuard no_grad;
  model.eval();
  // Under mpirun rank r computes batches r, r + N, ...; every rank draws all of them, and the
  // per-batch losses are added in batch order, as one process adds them.
  const int ranks = ag::dist::world_size(), me = ag::dist::rank();
  std::vector<double> losses(static_cast<std::size_t>(o.eval_batches), 0.0);
  bool cut = false;
  for (std::int64_t i = 0; i < o.eval_batches; ++i) {
    auto b = ds.sample(split, o.batch, o.model.block_size, gen);
    if (cut || i % ranks != me) continue;
    try {
      std::optional<StopBetweenOps> stop_points;
      if (ranks == 1) stop_points.emplace();
      losses[static_cast<std::size_t>(i)] = model.loss(b.x, b.y).item();
    } catch (const Interrupted&) {
      cut = true;
    }
  }
  model.train();
  if (cut) return std::nullopt;
  ag::dist::sum_in_rank_order(losses);
  double total = 0;
  for (double l : losses) total += l;
  return total / static_cast<double>(o.eval_batches);
}

// The per-step log, one line per step: step, training loss (every digit, so two runs can be
// compared exactly), learning rate, and the validation loss on the steps that have one.
struct LossLog {
  std::vector<double> steps, losses, val_steps, val_losses;
  // Where a resumed run's log stopped being steps 1, 2, ... up to the step resumed from (a line
  // damaged, a step missing); empty when it is whole. The lines after it are dropped.
  std::string damage;
};

// Keeps the lines of `path` up to step `upto` (a resumed run continues from there) and returns them.
LossLog truncate_log(const std::string& path, std::int64_t upto) {
  LossLog log;
  std::string kept = "step,loss,lr,val_loss\n";
  if (upto > 0 && std::filesystem::exists(path)) {
    std::istringstream in(ag::io::read_file(path));
    std::string line;
    std::getline(in, line);  // header
    std::int64_t expected = 1;
    for (int number = 2; std::getline(in, line); ++number) {
      std::int64_t step = 0;
      double loss = 0, lr = 0, val = 0;
      char rest[64] = {};
      if (std::sscanf(line.c_str(), "%ld,%lf,%lf,%63s", &step, &loss, &lr, rest) < 3) {
        log.damage = fmt::format("line {} is no step's line", number);
        break;
      }
      if (step > upto) break;
      if (step != expected) {
        log.damage = fmt::format("line {} is step {} where step {} belongs", number, step, expected);
        break;
      }
      ++expected;
      kept += line + "\n";
      log.steps.push_back(static_cast<double>(step));
      log.losses.push_back(loss);
      if (rest[0] && std::sscanf(rest, "%lf", &val) == 1) {
        log.val_steps.push_back(static_cast<double>(step));
        log.val_losses.push_back(val);
      }
    }
    if (log.damage.empty() && expected <= upto) log.damage = fmt::format("it ends at step {}", expected - 1);
  }
  ag::io::write_file_atomically(path, kept);
  return log;
}

// The random generators a step draws from: the batch sampler's and every Dropout's.
//  - remember / undo: a step cut short by a stop request puts them back as they were before it.
//  - with several micro-batches a step (--grad-accum, or mpirun), micro-batch k draws its
//    dropout masks from generators keyed by (the step's draw, k), not from wherever the
//    previous micro-batch left them, so that whichever process runs micro-batch k draws the
//    same masks (docs/distributed.md). One micro-batch a step draws exactly as before.
class StepGenerators {
 public:
  StepGenerators(ag::nn::GPT& model, ag::Generator& data_gen) : data_(&data_gen) {
    std::vector<std::pair<std::string, ag::nn::Dropout*>> dropouts;
    ag::io::collect_dropouts(model, "", dropouts);
    for (auto& [_, d] : dropouts) dropouts_.push_back(&d->generator());
  }
  void remember() {
    saved_data_ = *data_;
    saved_dropouts_.clear();
    for (const ag::Generator* g : dropouts_) saved_dropouts_.push_back(*g);
  }
  void undo() {
    *data_ = saved_data_;
    for (std::size_t i = 0; i < dropouts_.size(); ++i) *dropouts_[i] = saved_dropouts_[i];
  }
  // At the start of a step of several micro-batches: one draw from each dropout generator, the
  // same on every rank.
  void begin_keyed_step() {
    keys_.clear();
    after_key_.clear();
    for (ag::Generator* g : dropouts_) {
      keys_.push_back(g->next_u64());
      after_key_.push_back(*g);
    }
  }
  void key_micro_batch(std::int64_t k) {
    for (std::size_t i = 0; i < dropouts_.size(); ++i)
      dropouts_[i]->manual_seed(keys_[i] ^ (0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(k + 1)));
  }
  // At the end of the step every rank's dropout generators are where the step's key left them.
  void end_keyed_step() {
    for (std::size_t i = 0; i < dropouts_.size(); ++i) *dropouts_[i] = after_key_[i];
  }

 private:
  ag::Generator* data_;
  std::vector<ag::Generator*> dropouts_;
  ag::Generator saved_data_;
  std::vector<ag::Generator> saved_dropouts_, after_key_;
  std::vector<std::uint64_t> keys_;
};

// The log is on disk line by line, so a crash loses no step that finished; a write that fails
// (a full disk, a file-size limit) stops the run rather than leaving holes in the log.
void write_log_line(std::FILE* log, const std::string& path, const std::string& line) {
  if (std::fputs(line.c_str(), log) == EOF || std::fflush(log) != 0)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
}

// The settings every process of a data-parallel run must share, one per line, for
// ag::dist::check_same: a rank started with other options or another corpus is refused.
std::string run_description(const TrainOptions& o, const Corpus& corpus, const ag::nn::GPTConfig& config) {
  return fmt::format(
      "corpus: {} characters in {} (fingerprint {:016x})\nvocabulary: {}\nmodel: block {} layers {} heads {} embd {} "
      "dropout {} norm {} mlp {}\n"
      "steps {} batch {} lr {} min-lr {} warmup {} weight-decay {} grad-clip {}\neval-interval {} eval-batches {} "
      "checkpoint-interval {} sync-every {}\nseed {}\nresume {}\nkernels {}\nprecision {}\nthreads per process {}\n",
      corpus.dataset.size(Split::Train) + corpus.dataset.size(Split::Validation),
      plural(std::ssize(corpus.files), "file"), corpus.fingerprint, config.vocab_size, config.block_size,
      config.n_layer, config.n_head, config.n_embd, config.dropout, ag::nn::norm_name(config.norm),
      ag::nn::mlp_name(config.mlp), o.steps, o.batch, o.lr, o.min_lr, o.warmup, o.weight_decay, o.grad_clip,
      o.eval_interval, o.eval_batches, o.checkpoint_interval, o.sync_check_interval, o.seed, o.resume,
      ag::kernels_name(ag::kernels()), o.precision.bf16 ? "bf16" : "fp32", ag::get_num_threads());
}

// --- The run, in the order it happens -------------------------------------------------------

// What check_run read and checked: the corpus, and the model with its vocabulary.
struct CheckedRun {
  Corpus corpus;
  ag::nn::GPTConfig config;
};

// Everything that can be known before the first step is checked first; nothing is written
// until all of it has passed. Under mpirun every rank checks its own options and corpus, and
// only rank 0 its output directory; a refusal on any rank stops all of them. Then, that every
// rank is about to run the same thing.
CheckedRun check_run(const TrainOptions& o) {
  std::optional<Corpus> corpus;
  ag::nn::GPTConfig config = o.model;
  ag::examples::checks_on_every_rank("minigpt train", [&] {
    check_train_options(o);
    corpus.emplace(read_training_corpus(o));
    check_resumed_corpus(o, *corpus);
    if (!o.trace.empty()) check_trace_file(trace_file(o.trace, ag::dist::rank()), o);
    config.vocab_size = corpus->tokenizer.size();
    if (ag::dist::is_main_process()) check_train_resources(o, config);
  });
  if (ag::dist::world_size() > 1) ag::dist::check_same("the run's configuration", run_description(o, *corpus, config));
  return {std::move(*corpus), config};
}

// --resume: the training state in --out, read into `state` by every rank (under mpirun, a rank
// that cannot stops them all). Returns the steps it has done.
std::int64_t resume_training(const TrainOptions& o, const std::string& state_path, const ag::io::TrainingState& state,
                             const ag::data::CharTokenizer& tokenizer) {
  const bool main_rank = ag::dist::is_main_process();
  std::int64_t start = 0;
  ag::examples::checks_on_every_rank("minigpt train", [&] {
    ag::io::ResumedTraining resumed{};
    try {
      resumed = ag::io::load_training_state(state_path, state, tokenizer);
    } catch (const std::invalid_argument& e) {
      ag::examples::refuse("--resume: {}", e.what());
    }
    start = resumed.step;
    if (start > o.steps)
      ag::examples::refuse("--resume: {} is at step {}, past --steps {}; pass --steps {} or more to continue it",
                           state_path, start, o.steps, start);
    if (main_rank && ag::io::schedule_json(resumed.schedule) != ag::io::schedule_json(state.schedule))
      fmt::print("note: the learning-rate schedule was {}, it is now {}\n", ag::io::schedule_json(resumed.schedule),
                 ag::io::schedule_json(state.schedule));
    if (main_rank) fmt::print("resuming from step {} of {}\n", start, state_path);
  });
  return start;
}

// One run, from its first step to its last: what a step, an evaluation, a checkpoint and the
// pictures read and write. Members are built in the order they are declared; prepare() below
// does the rest before the first step.
struct Run {
  Run(const TrainOptions& options, const ag::examples::StopOnSignal& stop_signal, CheckedRun checked,
      std::unique_ptr<ag::nn::GPT> built)
      : o(options),
        stop(stop_signal),
        corpus(std::move(checked.corpus)),
        config(checked.config),
        model_ptr(std::move(built)) {}
  // A run that ends before its first checkpoint puts back the run --overwrite set aside.
  ~Run() { put_replaced_run_back(); }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // Before the first step (prepare).
  void start_ranks_alike();
  void open_output();
  void set_replaced_run_aside();
  void put_replaced_run_back() noexcept;
  void print_settings() const;
  // Each step (train's loop).
  std::optional<double> train_step(std::int64_t step);
  std::optional<double> forward_backward(std::int64_t step);
  void stop_if_diverged(std::int64_t step, double loss) const;
  [[noreturn]] void diverged(const std::string& what) const;
  void check_weights_in_sync(std::int64_t step) const;
  void show_progress(std::int64_t step, double loss);
  bool evaluation_due(std::int64_t step) const { return (step + 1) % o.eval_interval == 0 || step + 1 == o.steps; }
  std::optional<double> evaluate(std::int64_t step);
  void report(std::int64_t step, double loss, const std::optional<double>& val);
  void checkpoint(std::int64_t done, bool evaluated = false);
  double probe_loss();
  bool stop_agreed() const;
  // After the last step.
  int after_training(std::int64_t step, bool stopping);
  bool pictures_and_sample(std::int64_t step);
  std::string attention_prompt() const;

  std::string out(const char* name) const { return (std::filesystem::path(o.out_dir) / name).string(); }

  const TrainOptions& o;
  const ag::examples::StopOnSignal& stop;
  const bool distributed = ag::dist::world_size() > 1, main_rank = ag::dist::is_main_process();
  const Corpus corpus;
  const ag::nn::GPTConfig config;
  const ag::data::CharTokenizer& tokenizer = corpus.tokenizer;
  const ag::data::TextDataset& ds = corpus.dataset;
  const std::string model_path = out("minigpt.safetensors"), state_path = out("minigpt.train.safetensors"),
                    log_path = out("train_log.csv");

  std::unique_ptr<ag::nn::GPT> model_ptr;
  ag::nn::GPT& model = *model_ptr;
  ag::Generator data_gen{o.seed + 1};
  ag::optim::AdamW opt{ag::optim::decay_groups(model, o.weight_decay), {.lr = o.lr, .beta2 = 0.99}};
  ag::optim::WarmupCosine schedule{.warmup = o.warmup, .total = o.steps, .max_lr = o.lr, .min_lr = o.min_lr};
  ag::io::TrainingState state{
      model, opt, schedule, data_gen,
      recorded_options(o, corpus_record(corpus))};  // saved and restored by io/training_state.cpp
  const std::int64_t start = o.resume ? resume_training(o, state_path, state, tokenizer) : 0;  // steps already done
  // After --resume has read the weights: every micro-batch's gradient, summed in order.
  ag::dist::DataParallel dp{model.parameters(), {.micro_batches = o.grad_accum}};
  const std::int64_t micro = dp.micro_batches();
  const std::vector<std::int64_t> mine = dp.my_micro_batches();
  StepGenerators draws{model, data_gen};

  // Rank 0's: the lock on --out, the log, the losses for the plot, the progress bar.
  std::optional<ag::examples::RunLock> lock;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log{nullptr, &std::fclose};
  LossLog history;
  std::optional<ag::examples::ProgressBar> bar;
  // --trace: this rank's op trace (autograd/debug/trace.h), written as the steps run.
  std::unique_ptr<ag::debug::OpTrace> trace;

  // --overwrite: the run being replaced, its files moved into this folder of --out until the
  // new run's first checkpoint exists (then removed); empty when there is none.
  std::filesystem::path replaced;

  double smoothed = 0;      // the training loss, smoothed for the bar
  std::int64_t saved = -1;  // the steps the last checkpoint holds; -1 before the first
  bool eval_cut = false;    // a stop request cut the last evaluation short
};

// The model, AdamW and its schedule, the state a resumed run continues from, every rank started
// alike, and --out locked. None (after saying so) when a stop request came first: nothing was
// written.
std::unique_ptr<Run> prepare(const TrainOptions& o, CheckedRun checked, const ag::examples::StopOnSignal& stop) {
  std::unique_ptr<ag::nn::GPT> model;
  try {
    std::optional<StopBetweenOps> stop_points;  // a large model takes a while to initialise
    if (ag::dist::world_size() == 1) stop_points.emplace();
    ag::Generator init_gen(o.seed);
    model = std::make_unique<ag::nn::GPT>(checked.config, init_gen);
  } catch (const Interrupted&) {
    fmt::print("interrupted ({}) before training started; nothing was written\n", stop.signal_name());
    return nullptr;
  }
  auto run = std::make_unique<Run>(o, stop, std::move(checked), std::move(model));
  if (run->distributed) run->start_ranks_alike();
  if (ag::dist::any(stop.requested())) {
    if (run->main_rank)
      fmt::print("interrupted ({}) before training started; nothing was written\n", stop.signal_name());
    return nullptr;
  }
  if (!o.trace.empty()) run->trace = std::make_unique<ag::debug::OpTrace>(trace_file(o.trace, ag::dist::rank()));
  if (run->main_rank) {
    run->open_output();
    run->print_settings();
    run->bar.emplace(o.steps - run->start);
  }
  return run;
}

// Under mpirun every rank starts from rank 0's weights, and checks that the rest of its state
// (the step, the optimizer's moments, the batch generator) is rank 0's too.
void Run::start_ranks_alike() {
  std::vector<ag::Tensor> weights = model.parameters();
  for (auto& [_, b] : model.named_buffers()) weights.push_back(b);
  ag::dist::broadcast(weights);
  ag::dist::check_same("the training state", fmt::format("step {}\nbatch generator {}\n", start, data_gen.state()));
  std::vector<ag::Tensor> moments;
  for (auto& [_, t] : opt.state()) moments.push_back(t);
  ag::dist::check_in_sync("the optimizer's moments", moments);
}

// The first write: the directory, and the lock that keeps a second run out of it. With the lock
// held no other run writes here, so the temporary files of one killed while it wrote a file
// (io::write_file_atomically) can go. Then the log, kept up to the step this run starts from,
// and opened for appending as a file of the run's own (never through a link).
void Run::open_output() {
  lock.emplace(o.out_dir, "minigpt.lock");
  if (o.overwrite) set_replaced_run_aside();
  std::vector<std::string> leftovers = ag::io::remove_stale_temporaries(o.out_dir);
  if (!leftovers.empty())
    fmt::print("removed {} a stopped run left in {}: {}\n", plural(std::ssize(leftovers), "temporary file"), o.out_dir,
               fmt::join(leftovers, ", "));
  history = truncate_log(log_path, start);
  // The log is a record, not the run's state: a damaged one does not stop the run, but the gap
  // it leaves is said, not left to be found in the plot.
  if (!history.damage.empty())
    fmt::print(stderr, "minigpt train: {}: {}; it keeps steps 1 to {} and is missing steps {} to {}\n", log_path,
               history.damage, history.steps.size(), history.steps.size() + 1, start);
  int fd = ag::examples::open_in_place(log_path, O_WRONLY | O_APPEND);
  if (fd >= 0) log.reset(::fdopen(fd, "a"));
  if (!log) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(fmt::format("cannot open '{}' for appending: {}", log_path, std::strerror(err)));
  }
}

// --overwrite replaces a run only once the new one has something to replace it with: until its
// first checkpoint, a failure, a divergence or a stop would otherwise leave a mixed directory
// (the old checkpoint beside the new log). The old run's files move into a new folder of --out,
// ".replaced-XXXXXX" (the same file system, so each move is a rename), and come back if the new
// run ends first.
void Run::set_replaced_run_aside() {
  std::vector<std::string> files = run_files_in(o.out_dir);
  if (files.empty()) return;
  std::string pattern = (std::filesystem::path(o.out_dir) / ".replaced-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error(fmt::format("--overwrite: cannot make a folder in {} for the run it replaces: {}",
                                         o.out_dir, std::strerror(errno)));
  replaced = pattern;
  for (const std::string& name : files)
    std::filesystem::rename(std::filesystem::path(o.out_dir) / name, replaced / name);
}

void Run::put_replaced_run_back() noexcept {
  if (replaced.empty()) return;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(replaced, ec)) {
    std::error_code moved;
    std::filesystem::rename(entry.path(), std::filesystem::path(o.out_dir) / entry.path().filename(), moved);
  }
  std::filesystem::remove(replaced, ec);  // only if every file went back
  if (!std::filesystem::exists(replaced, ec))
    fmt::print(stderr,
               "minigpt train: --overwrite: the new run saved nothing; the run it was replacing is back in {}\n",
               o.out_dir);
  else
    fmt::print(stderr, "minigpt train: --overwrite: the run it was replacing is in {}\n", replaced.string());
  replaced.clear();
}

void Run::print_settings() const {
  fmt::print("corpus: {}, {:.2f} M characters, vocabulary of {}\n", plural(std::ssize(corpus.files), "file"),
             static_cast<double>(ds.size(Split::Train) + ds.size(Split::Validation)) / 1e6,
             plural(tokenizer.size(), "character"));
  if (o.new_corpus && !o.trained_corpus.empty() && o.trained_corpus != corpus_record(corpus))
    fmt::print("(--new-corpus: not the text the run trained on until now, which had {})\n", o.trained_corpus);
  fmt::print("model: {}, {}, n_embd {}, block {}{}{}: {:.2f} M parameters\n", plural(config.n_layer, "layer"),
             plural(config.n_head, "head"), config.n_embd, config.block_size,
             config.norm == ag::nn::NormKind::Rms ? ", RMSNorm" : "",
             config.mlp == ag::nn::MlpKind::Swiglu ? ", SwiGLU" : "",
             static_cast<double>(model.parameter_count()) / 1e6);
  fmt::print("training: {} of {} x {} tokens, AdamW lr {} (warm-up {}, cosine to {})\n", plural(o.steps, "step"),
             o.batch * micro, config.block_size, o.lr, o.warmup, o.min_lr);
  if (distributed)
    fmt::print("data-parallel: {} processes x {} per process, gradients summed in rank order\n", ag::dist::world_size(),
               plural(ag::get_num_threads(), "thread"));
  else if (micro > 1)
    fmt::print("gradient accumulation: {} micro-batches of {} per step, gradients summed in order\n", micro,
               plural(o.batch, "window"));
  if (ag::kernels() == ag::Kernels::Reference)
    fmt::print("kernels: reference (ops/reference/): the readable route, slower than the default\n");
  if (ag::kernels() == ag::Kernels::Naive)
    fmt::print("kernels: naive (kernels/naive/): plain loops on one thread, slower than the default\n");
  fmt::print("precision: {}\n", o.precision.why);
  if (!o.trace.empty())
    fmt::print("trace: every op's values of every step written to {}{} (compare two with minigpt bisect)\n", o.trace,
               ag::dist::world_size() > 1 ? " and FILE.rankR for the other ranks" : "");
}

// One optimizer step: the learning rate the schedule gives this step; the gradient of the step's
// loss in every parameter's .grad(); clipped to norm grad_clip; AdamW. Returns the step's loss,
// or none when a stop request cut its forward or backward passes short: the step is dropped.
std::optional<double> Run::train_step(std::int64_t step) {
  opt.set_lr(schedule.lr_at(step));
  std::optional<double> loss = forward_backward(step);
  if (!loss) return std::nullopt;
  stop_if_diverged(step, *loss);
  ag::optim::clip_grad_norm(model.parameters(), o.grad_clip);
  opt.step();
  if (trace && main_rank)  // every rank holds the same weights: rank 0's trace has them
    for (const auto& [name, p] : model.named_parameters()) trace->add(step, name, p);
  if (distributed) check_weights_in_sync(step);
  return loss;
}

// loss = mean cross-entropy over the step's micro x batch windows, and its gradient, one
// micro-batch at a time: dp.begin_micro_batch() sets the gradients so far aside (no zero_grad
// needed), dp.end_micro_batch() adds this micro-batch's to them (under mpirun: sums every rank's).
//
// The passes stop at the next op when asked (one process only: under mpirun a rank must not
// leave the others waiting half-way through a step); the update after them never stops
// half-way, so the model is always the one a whole number of steps made.
std::optional<double> Run::forward_backward(std::int64_t step) {
  draws.remember();
  std::vector<double> losses;  // this process's micro-batches', each weighed 1 / micro
  try {
    std::optional<StopBetweenOps> stop_points;
    if (!distributed) stop_points.emplace();
    if (micro > 1) draws.begin_keyed_step();
    // The step's global batch is micro x batch windows, drawn in order by every rank; micro-
    // batch k is the k-th run of `batch`: one process runs each as it is drawn, a rank under
    // mpirun only its own.
    for (std::int64_t k = 0; k < micro; ++k) {
      auto batch = ds.sample(Split::Train, o.batch, config.block_size, data_gen);  // x, y: int64 [batch, block]
      if (distributed && k != mine.front()) continue;                              // another rank's micro-batch
      if (micro > 1) draws.key_micro_batch(k);
      dp.begin_micro_batch();
      if (trace) trace->set_place(step, k);
      ag::Tensor loss = model.loss(batch.x, batch.y);
      loss.backward(dp.loss_weight(loss));
      if (trace) trace->pause();
      dp.end_micro_batch();
      losses.push_back(loss.item() / static_cast<double>(micro));
    }
    if (micro > 1) draws.end_keyed_step();
  } catch (const Interrupted&) {
    if (trace) trace->pause();
    draws.undo();  // the step's random draws, as if it had not begun
    return std::nullopt;
  }
  return dp.sum_over_micro_batches(losses);
}

// A loss that is no longer finite would make every weight NaN at this update, and the next
// checkpoint would write them over the last good one: stop before the update instead.
void Run::stop_if_diverged(std::int64_t step, double loss) const {
  if (!std::isfinite(loss)) diverged(fmt::format("the loss of step {} is {}", step + 1, loss));
}

// Stops the run, saying what went wrong and which checkpoint still holds good weights.
void Run::diverged(const std::string& what) const {
  std::string kept = saved >= 0 ? fmt::format("{} keeps step {}", state_path, saved)
                     : o.resume ? fmt::format("{} keeps step {}", state_path, start)
                                : "no checkpoint was written";
  throw std::runtime_error(fmt::format("{}: training diverged (a smaller --lr may help); {}", what, kept));
}

// Under mpirun every rank has applied the same update to the same weights; every so often, and
// after the last step, check.
void Run::check_weights_in_sync(std::int64_t step) const {
  if ((step + 1) % o.sync_check_interval != 0 && step + 1 != o.steps) return;
  try {
    ag::dist::check_in_sync(fmt::format("the weights after step {}", step + 1), model.parameters());
  } catch (const ag::dist::Mismatch& e) {  // on every rank at once
    if (main_rank)
      fmt::print(stderr, "minigpt train: {}; stopped (the last checkpoint, if any, is from before)\n", e.what());
    throw ag::examples::AgreedExit{1};
  }
}

void Run::show_progress(std::int64_t step, double loss) {
  smoothed = step == start ? loss : 0.95 * smoothed + 0.05 * loss;
  history.steps.push_back(static_cast<double>(step + 1));
  history.losses.push_back(loss);
  if (bar)
    bar->update(step + 1 - start, (step + 1 - start) * o.batch * micro * config.block_size,
                fmt::format("loss {:.4f}", smoothed));
}

// Every eval_interval steps and after the last: the mean loss on held-out windows. None on the
// other steps, and when a stop request cut it short (eval_cut says which).
std::optional<double> Run::evaluate(std::int64_t step) {
  std::optional<double> val =
      evaluation_due(step) ? estimate_loss(model, ds, Split::Validation, o, data_gen) : std::nullopt;
  eval_cut = evaluation_due(step) && !val;
  return val;
}

// The step's line in the log; a checkpoint at every evaluation and every checkpoint_interval
// steps; and the validation loss on the screen.
void Run::report(std::int64_t step, double loss, const std::optional<double>& val) {
  // Weights whose validation loss is not finite are no good checkpoint, finite as they may be.
  if (val && !std::isfinite(*val)) diverged(fmt::format("the validation loss after step {} is {}", step + 1, *val));
  if (main_rank)
    write_log_line(log.get(), log_path,
                   fmt::format("{},{},{},{}\n", step + 1, loss, opt.lr(), val ? fmt::format("{}", *val) : ""));
  if (val) {
    history.val_steps.push_back(static_cast<double>(step + 1));
    history.val_losses.push_back(*val);
  }
  if (evaluation_due(step) || (step + 1) % o.checkpoint_interval == 0) checkpoint(step + 1, val.has_value());
  if (val && bar) {
    // Perplexity e^loss: as unsure as a uniform choice among that many characters.
    bar->print_line(fmt::format("step {:>5}: train loss {:.4f}, validation loss {:.4f}, perplexity {:.2f}  (saved {})",
                                step + 1, smoothed, *val, std::exp(*val), model_path));
  }
}

// `done`: how many steps are complete; a resumed run starts there. The training state goes
// first: it alone is what --resume reads; the model file beside it is for sample and eval.
// Only rank 0 writes, and only weights and moments that another run can use: every value finite
// (examples/common/finite.h), and a finite loss on held-out text, the validation loss when one
// was just `evaluated`, else probe_loss's. Every rank holds the same weights, so all stop alike.
void Run::checkpoint(std::int64_t done, bool evaluated) {
  std::vector<ag::nn::NamedTensor> weights = model.named_parameters();
  for (auto& [name, t] : opt.state()) weights.emplace_back("optimizer state " + name, t);
  if (std::optional<std::string> bad = ag::examples::first_bad_value(weights))
    diverged(fmt::format("after step {}, {}", done, *bad));
  if (!evaluated)
    if (double probe = probe_loss(); !std::isfinite(probe))
      diverged(fmt::format("the weights after step {} are finite, but their loss on held-out text is {}", done, probe));
  if (main_rank) {
    ag::io::save_training_state(state_path, state, tokenizer, done);
    ag::io::save_gpt(model_path, model, tokenizer);
    if (!replaced.empty()) {  // the new run can be resumed now: the old one is no longer needed
      std::error_code ec;
      std::filesystem::remove_all(replaced, ec);
      replaced.clear();
    }
  }
  saved = done;
}

// Finite weights can still be no good: after a huge --lr they may be 1e10, and the next forward
// overflows. One window of held-out text, drawn by a generator of its own (the run's draws stay
// as they were) and read in eval mode (no dropout draws either), shows it.
double Run::probe_loss() {
  ag::NoGradGuard no_grad;
  model.eval();
  ag::Generator probe(0);
  auto b = ds.sample(Split::Validation, 1, config.block_size, probe);
  double loss = model.loss(b.x, b.y).item();
  model.train();
  return loss;
}

// Whether to stop after this step. Under mpirun, when any rank was asked to: all ranks agree,
// at the end of the same step.
bool Run::stop_agreed() const { return distributed ? ag::dist::any(stop.requested()) : stop.requested(); }

// After the last step, or the one a stop request ended. Stopped: a checkpoint of the steps done
// (unless the last one holds them already), status 130, and --resume continues from it.
// Otherwise, on rank 0: the log closed, the pictures, a sample and the final validation loss.
int Run::after_training(std::int64_t step, bool stopping) {
  if (bar) bar->finish();
  // Under mpirun only the stop all ranks agreed on counts: a signal that reached one rank after
  // the last agreement must not make it exit alone.
  if (distributed ? stopping : stop.requested()) {
    if (saved != step) checkpoint(step);
    if (main_rank) {
      fmt::print("interrupted at step {}: saved {}; continue it with the same command and --resume\n", step,
                 model_path);
      if (eval_cut)
        fmt::print("(the {} cut its evaluation short: the log has no validation loss for that step)\n",
                   stop.signal_name());
    }
    return 130;
  }
  if (!main_rank) return 0;  // the pictures and the sample are rank 0's
  if (std::fclose(log.release()) != 0)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", log_path, std::strerror(errno)));
  // A step reads batch windows per micro-batch (under mpirun, every process's count).
  double seconds = bar->elapsed_seconds(),
         tokens = static_cast<double>((step - start) * o.batch * dp.micro_batches() * config.block_size);
  fmt::print("trained {} in {} ({:.2f} s, {:.0f} tokens a second, evaluations and checkpoints included)\n",
             plural(step - start, "step"), ag::examples::format_duration(seconds), seconds,
             seconds > 0 ? tokens / seconds : 0.0);
  if (!pictures_and_sample(step)) return 130;
  if (!history.val_losses.empty())
    fmt::print("\nfinal validation loss: {:.4f} (perplexity {:.2f})\n", history.val_losses.back(),
               std::exp(history.val_losses.back()));
  fmt::print("checkpoint: {}\n", model_path);
  return 0;
}

// The loss curve, the attention maps of a prompt, and a sample. The checkpoint of the last step
// is already complete, so a stop request here only skips what is left: false then.
bool Run::pictures_and_sample(std::int64_t step) {
  try {
    ag::examples::stop_point();
    std::string loss_png = out("loss.png");
    if (!history.losses.empty()) {
      // A run stopped during its first evaluation, and resumed, has no validation loss to draw.
      std::vector<ag::plot::Series> series{{"train (per step)", history.steps, history.losses}};
      if (!history.val_losses.empty()) series.push_back({"validation", history.val_steps, history.val_losses});
      ag::plot::line_plot_png(loss_png, series, "Mini-GPT training", "step", "cross-entropy (nats per character)");
      fmt::print("wrote {}\n", loss_png);
    }
    StopBetweenOps stop_points;
    auto maps = write_attention_maps(model, tokenizer, attention_prompt(), o.out_dir);
    fmt::print("wrote {}, {} ... {}\n", plural(std::ssize(maps), "attention map"), maps.front(), maps.back());

    ag::Generator sample_gen(o.seed + 3);
    auto ids = ag::nn::generate(model, tokenizer.encode("\n"),
                                {.max_new_tokens = o.sample_tokens, .temperature = 0.8, .top_k = 20}, sample_gen);
    fmt::print("\nsample (temperature 0.8, top-k 20):\n{}\n", tokenizer.decode(ids));
  } catch (const Interrupted&) {
    fmt::print(
        "\ninterrupted ({}) after training: {} holds step {}, complete; the pictures and the sample left "
        "undone were skipped\n",
        stop.signal_name(), model_path, step);
    return false;
  }
  return true;
}

// --prompt, or one from held-out text: the first 32 characters of a random validation window.
std::string Run::attention_prompt() const {
  if (!o.prompt.empty()) return o.prompt;
  std::string val_text = tokenizer.decode([&] {
    ag::Generator g(o.seed + 2);
    return ds.sample(Split::Validation, 1, config.block_size, g).x.to_vector<std::int64_t>();
  }());
  std::u32string chars = ag::data::decode_utf8(val_text);
  return ag::data::encode_utf8(chars.substr(0, std::min<std::size_t>(chars.size(), 32)));
}

}  // namespace

int train(const TrainOptions& o) {
  CheckedRun checked = check_run(o);
  if (ag::dist::is_main_process())
    for (const std::string& note : o.resume_notes) fmt::print("note: {}\n", note);
  // From here on SIGINT and SIGTERM are requests to stop, answered at the next stop point
  // (under mpirun: at the end of the step, all ranks together).
  ag::examples::StopOnSignal stop;
  std::unique_ptr<Run> run = prepare(o, std::move(checked), stop);
  if (!run) return 130;  // stopped before training started; nothing was written
  std::int64_t step = run->start;
  bool stopping = false;
  for (; step < o.steps && !stopping; ++step) {
    std::optional<double> loss = run->train_step(step);
    if (!loss) break;  // cut short by a stop request: the model is the one the last whole step left
    run->show_progress(step, *loss);
    std::optional<double> val = run->evaluate(step);
    run->report(step, *loss, val);
    stopping = run->stop_agreed();
  }
  return run->after_training(step, stopping);
}

}  // namespace minigpt
