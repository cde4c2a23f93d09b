// minigpt train: the training loop, with evaluation, checkpoints and pictures.
//
//   before anything:  every option, the corpus, the memory the model needs and the output
//                     directory are checked (checks.cpp); then the directory is locked
//   for each step:    lr from the warm-up + cosine schedule
//                     x, y = a random batch of windows;  loss = cross_entropy(model(x), y)
//                     zero_grad; backward; clip the gradient norm; AdamW step
//   every eval_interval steps: mean loss on held-out windows, and a checkpoint
//   every checkpoint_interval steps, and on SIGINT / SIGTERM: a checkpoint (model, optimizer,
//   step, schedule and generators in one file, written atomically), from which --resume
//   continues exactly as if the run had not stopped
//
// A signal is answered within one op (examples/common/stop.h): a step it cuts short is dropped,
// its random draws undone, so the checkpoint is the one the last complete step left.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "../common/cli.h"
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
};

// Keeps the lines of `path` up to step `upto` (a resumed run continues from there) and returns them.
LossLog truncate_log(const std::string& path, std::int64_t upto) {
  LossLog log;
  std::string kept = "step,loss,lr,val_loss\n";
  if (upto > 0 && std::filesystem::exists(path)) {
    std::istringstream in(ag::io::read_file(path));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::int64_t step = 0;
      double loss = 0, lr = 0, val = 0;
      char rest[64] = {};
      if (std::sscanf(line.c_str(), "%ld,%lf,%lf,%63s", &step, &loss, &lr, rest) < 3 || step > upto) break;
      kept += line + "\n";
      log.steps.push_back(static_cast<double>(step));
      log.losses.push_back(loss);
      if (rest[0] && std::sscanf(rest, "%lf", &val) == 1) {
        log.val_steps.push_back(static_cast<double>(step));
        log.val_losses.push_back(val);
      }
    }
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
      "corpus: {} characters in {} (fingerprint {:016x})\nvocabulary: {}\nmodel: block {} layers {} heads {} embd {} dropout {}\n"
      "steps {} batch {} lr {} min-lr {} warmup {} weight-decay {} grad-clip {}\neval-interval {} eval-batches {} "
      "checkpoint-interval {} sync-every {}\nseed {}\nresume {}\nkernels {}\nprecision {}\nthreads per process {}\n",
      corpus.dataset.size(Split::Train) + corpus.dataset.size(Split::Validation), plural(std::ssize(corpus.files), "file"),
      corpus.fingerprint, config.vocab_size, config.block_size, config.n_layer,
      config.n_head, config.n_embd, config.dropout, o.steps, o.batch, o.lr, o.min_lr, o.warmup, o.weight_decay,
      o.grad_clip, o.eval_interval, o.eval_batches, o.checkpoint_interval, o.sync_check_interval, o.seed, o.resume,
      ag::kernels_name(ag::kernels()), ag::is_autocast_enabled() ? "bf16" : "fp32", ag::get_num_threads());
}

}  // namespace

int train(const TrainOptions& o) {
  const bool distributed = ag::dist::world_size() > 1, main_rank = ag::dist::is_main_process();
  // Everything that can be known before the first step is checked first; nothing is written
  // until all of it has passed. Under mpirun every rank checks its own options and corpus, and
  // only rank 0 its output directory; a refusal on any rank stops all of them.
  std::optional<Corpus> corpus_read;
  ag::nn::GPTConfig config = o.model;
  ag::examples::checks_on_every_rank("minigpt train", [&] {
    check_train_options(o);
    corpus_read.emplace(read_training_corpus(o));
    config.vocab_size = corpus_read->tokenizer.size();
    if (main_rank) check_train_resources(o, config);
  });
  // Then that every rank is about to run the same thing.
  if (distributed) ag::dist::check_same("the run's configuration", run_description(o, *corpus_read, config));
  Corpus& corpus = *corpus_read;
  const ag::data::CharTokenizer& tokenizer = corpus.tokenizer;
  const ag::data::TextDataset& ds = corpus.dataset;

  // From here on SIGINT and SIGTERM are requests to stop, answered at the next stop point
  // (under mpirun: at the end of the step, all ranks together).
  ag::examples::StopOnSignal stop;
  auto out = [&](const char* name) { return (std::filesystem::path(o.out_dir) / name).string(); };
  std::string model_path = out("minigpt.safetensors"), state_path = out("minigpt.train.safetensors"),
              log_path = out("train_log.csv");
  ag::Generator init_gen(o.seed), data_gen(o.seed + 1);
  std::unique_ptr<ag::nn::GPT> model_ptr;
  try {
    std::optional<StopBetweenOps> stop_points;  // a large model takes a while to initialise
    if (!distributed) stop_points.emplace();
    model_ptr = std::make_unique<ag::nn::GPT>(config, init_gen);
  } catch (const Interrupted&) {
    fmt::print("interrupted ({}) before training started; nothing was written\n", stop.signal_name());
    return 130;
  }
  ag::nn::GPT& model = *model_ptr;
  ag::optim::AdamW opt(ag::optim::decay_groups(model, o.weight_decay), {.lr = o.lr, .beta2 = 0.99});
  ag::optim::WarmupCosine schedule{.warmup = o.warmup, .total = o.steps, .max_lr = o.lr, .min_lr = o.min_lr};
  ag::io::TrainingState state{model, opt, schedule, data_gen};  // saved and restored by io/training_state.cpp
  std::int64_t start = 0;
  // Every rank reads the training state (under mpirun, a rank that cannot stops them all).
  if (o.resume) ag::examples::checks_on_every_rank("minigpt train", [&] {
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
      if (main_rank && ag::io::schedule_json(resumed.schedule) != ag::io::schedule_json(schedule))
        fmt::print("note: the learning-rate schedule was {}, it is now {}\n", ag::io::schedule_json(resumed.schedule),
                   ag::io::schedule_json(schedule));
      if (main_rank) fmt::print("resuming from step {} of {}\n", start, state_path);
    });
  // Every rank starts from rank 0's weights, and checks that the rest of its state (the step,
  // the optimizer's moments, the batch generator) is rank 0's too.
  ag::dist::DataParallel dp(model.parameters(), {.micro_batches = o.grad_accum});
  if (distributed) {
    std::vector<ag::Tensor> weights = model.parameters();
    for (auto& [_, b] : model.named_buffers()) weights.push_back(b);
    ag::dist::broadcast(weights);
    ag::dist::check_same("the training state", fmt::format("step {}\nbatch generator {}\n", start, data_gen.state()));
    std::vector<ag::Tensor> moments;
    for (auto& [_, t] : opt.state()) moments.push_back(t);
    ag::dist::check_in_sync("the optimizer's moments", moments);
  }
  if (ag::dist::any(stop.requested())) {
    if (main_rank) fmt::print("interrupted ({}) before training started; nothing was written\n", stop.signal_name());
    return 130;
  }
  // The first write: the directory, and the lock that keeps a second run out of it.
  std::optional<ag::examples::RunLock> lock;
  LossLog history;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log(nullptr, &std::fclose);
  if (main_rank) {
    lock.emplace(o.out_dir, "minigpt.lock");
    history = truncate_log(log_path, start);
    log.reset(std::fopen(log_path.c_str(), "a"));
    if (!log)
      throw std::runtime_error(fmt::format("cannot open '{}' for appending: {}", log_path, std::strerror(errno)));
  }
  const std::int64_t micro = dp.micro_batches();
  if (main_rank) {
    fmt::print("corpus: {}, {:.2f} M characters, vocabulary of {}\n", plural(std::ssize(corpus.files), "file"),
               static_cast<double>(ds.size(Split::Train) + ds.size(Split::Validation)) / 1e6,
               plural(tokenizer.size(), "character"));
    fmt::print("model: {}, {}, n_embd {}, block {}: {:.2f} M parameters\n", plural(config.n_layer, "layer"),
               plural(config.n_head, "head"), config.n_embd, config.block_size,
               static_cast<double>(model.parameter_count()) / 1e6);
    fmt::print("training: {} of {} x {} tokens, AdamW lr {} (warm-up {}, cosine to {})\n", plural(o.steps, "step"),
               o.batch * micro, config.block_size, o.lr, o.warmup, o.min_lr);
    if (distributed)
      fmt::print("data-parallel: {} processes x {} per process, gradients summed in rank order\n",
                 ag::dist::world_size(), plural(ag::get_num_threads(), "thread"));
    else if (micro > 1)
      fmt::print("gradient accumulation: {} micro-batches of {} per step, gradients summed in order\n", micro,
                 plural(o.batch, "window"));
    if (ag::kernels() == ag::Kernels::Reference)
      fmt::print("kernels: reference (ops/reference/): the readable route, slower than the default\n");
    fmt::print("precision: {}\n", ag::choose_precision(ag::parse_precision(o.precision)).why);
  }

  std::optional<ag::examples::ProgressBar> bar;
  if (main_rank) bar.emplace(o.steps - start);
  double smoothed = 0;
  std::int64_t step = start, saved = -1;
  // `done`: how many steps are complete; a resumed run starts there. The training state goes
  // first: it alone is what --resume reads; the model file beside it is for sample and eval.
  // Only rank 0 writes.
  auto checkpoint = [&](std::int64_t done) {
    if (main_rank) {
      ag::io::save_training_state(state_path, state, tokenizer, done);
      ag::io::save_gpt(model_path, model, tokenizer);
    }
    saved = done;
  };
  StepGenerators draws(model, data_gen);
  const std::vector<std::int64_t> mine = dp.my_micro_batches();
  bool eval_cut = false, stopping = false;
  for (; step < o.steps && !stopping; ++step) {
    // The step's forward and backward passes stop at the next op when asked (one process
    // only: under mpirun a rank must not leave the others waiting half-way through a step);
    // the update after them never stops half-way, so the model is always the one a whole
    // number of steps made.
    draws.remember();
    std::vector<double> losses;
    try {
      std::optional<StopBetweenOps> stop_points;
      if (!distributed) stop_points.emplace();
      opt.set_lr(schedule.lr_at(step));
      if (micro > 1) draws.begin_keyed_step();
      // The step's global batch is micro x batch windows, drawn in order by every rank; micro-
      // batch k is the k-th run of `batch`: one process runs each as it is drawn, a rank under
      // mpirun only its own.
      for (std::int64_t k = 0; k < micro; ++k) {
        auto batch = ds.sample(Split::Train, o.batch, config.block_size, data_gen);
        if (distributed && k != mine.front()) continue;  // another rank's micro-batch
        if (micro > 1) draws.key_micro_batch(k);
        dp.begin_micro_batch();
        ag::Tensor loss = model.loss(batch.x, batch.y);
        loss.backward(dp.loss_weight(loss));
        dp.end_micro_batch();
        losses.push_back(loss.item() / static_cast<double>(micro));
      }
      if (micro > 1) draws.end_keyed_step();
    } catch (const Interrupted&) {
      draws.undo();
      break;
    }
    double l = dp.sum_over_micro_batches(losses);
    // A loss that is no longer finite would make every weight NaN at this update, and the next
    // checkpoint would write them over the last good one: stop before the update instead.
    if (!std::isfinite(l)) {
      std::string kept = saved >= 0 ? fmt::format("{} keeps step {}", state_path, saved)
                         : o.resume ? fmt::format("{} keeps step {}", state_path, start)
                                    : "no checkpoint was written";
      throw std::runtime_error(
          fmt::format("the loss of step {} is {}: training diverged (a smaller --lr may help); {}", step + 1, l, kept));
    }
    ag::optim::clip_grad_norm(model.parameters(), o.grad_clip);
    opt.step();
    // Every rank has applied the same update to the same weights; every so often, check.
    if (distributed && ((step + 1) % o.sync_check_interval == 0 || step + 1 == o.steps)) {
      try {
        ag::dist::check_in_sync(fmt::format("the weights after step {}", step + 1), model.parameters());
      } catch (const ag::dist::Mismatch& e) {  // on every rank at once
        if (main_rank)
          fmt::print(stderr, "minigpt train: {}; stopped (the last checkpoint, if any, is from before)\n", e.what());
        throw ag::examples::AgreedExit{1};
      }
    }

    smoothed = step == start ? l : 0.95 * smoothed + 0.05 * l;
    history.steps.push_back(static_cast<double>(step + 1));
    history.losses.push_back(l);
    if (bar)
      bar->update(step + 1 - start, (step + 1 - start) * o.batch * micro * config.block_size,
                  fmt::format("loss {:.4f}", smoothed));
    bool evaluate = (step + 1) % o.eval_interval == 0 || step + 1 == o.steps;
    std::optional<double> val = evaluate ? estimate_loss(model, ds, Split::Validation, o, data_gen) : std::nullopt;
    eval_cut = evaluate && !val;
    if (main_rank)
      write_log_line(log.get(), log_path,
                     fmt::format("{},{},{},{}\n", step + 1, l, opt.lr(), val ? fmt::format("{}", *val) : ""));
    if (val) {
      history.val_steps.push_back(static_cast<double>(step + 1));
      history.val_losses.push_back(*val);
    }
    if (evaluate || (step + 1) % o.checkpoint_interval == 0) checkpoint(step + 1);
    if (val && bar) {
      // Perplexity e^loss: as unsure as a uniform choice among that many characters.
      bar->print_line(fmt::format("step {:>5}: train loss {:.4f}, validation loss {:.4f}, perplexity {:.2f}  (saved {})",
                                  step + 1, smoothed, *val, std::exp(*val), model_path));
    }
    stopping = distributed ? ag::dist::any(stop.requested()) : stop.requested();
  }
  if (bar) bar->finish();
  // Under mpirun only the stop all ranks agreed on counts: a signal that reached one rank after
  // the last agreement must not make it exit alone.
  if (distributed ? stopping : stop.requested()) {
    if (saved != step) checkpoint(step);
    if (main_rank) {
      fmt::print("interrupted at step {}: saved {}; continue with --resume\n", step, model_path);
      if (eval_cut)
        fmt::print("(the {} cut its evaluation short: the log has no validation loss for that step)\n",
                   stop.signal_name());
    }
    return 130;
  }
  if (!main_rank) return 0;  // the pictures and the sample are rank 0's
  if (std::fclose(log.release()) != 0)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", log_path, std::strerror(errno)));
  fmt::print("trained {} in {}\n", plural(step - start, "step"), ag::examples::format_duration(bar->elapsed_seconds()));

  // The pictures and the sample: the checkpoint of the last step is already complete, so a
  // stop request here only skips what is left.
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
    // A prompt from held-out text: the first 32 characters of a random validation window.
    std::string prompt = o.prompt;
    if (prompt.empty()) {
      std::string val_text = tokenizer.decode([&] {
        ag::Generator g(o.seed + 2);
        return ds.sample(Split::Validation, 1, config.block_size, g).x.to_vector<std::int64_t>();
      }());
      std::u32string chars = ag::data::decode_utf8(val_text);
      prompt = ag::data::encode_utf8(chars.substr(0, std::min<std::size_t>(chars.size(), 32)));
    }
    auto maps = write_attention_maps(model, tokenizer, prompt, o.out_dir);
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
    return 130;
  }
  if (!history.val_losses.empty())
    fmt::print("\nfinal validation loss: {:.4f} (perplexity {:.2f})\n", history.val_losses.back(),
               std::exp(history.val_losses.back()));
  fmt::print("checkpoint: {}\n", model_path);
  return 0;
}

}  // namespace minigpt
