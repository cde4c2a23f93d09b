// minigpt train: the training loop, with evaluation, checkpoints and pictures.
//
//   for each step:  lr from the warm-up + cosine schedule
//                   x, y = a random batch of windows;  loss = cross_entropy(model(x), y)
//                   zero_grad; backward; clip the gradient norm; AdamW step
//   every eval_interval steps: mean loss on held-out windows, and a checkpoint
//   every checkpoint_interval steps, and on SIGINT / SIGTERM: a checkpoint (model, optimizer,
//   step, schedule and generators in one file, written atomically), from which --resume
//   continues exactly as if the run had not stopped
#include <charconv>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "../common/plot.h"
#include "../common/progress.h"
#include "minigpt.h"

namespace minigpt {

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

using Split = ag::data::TextDataset::Split;

// Mean loss over `batches` random batches of one split, without a graph and in eval mode.
double estimate_loss(ag::nn::GPT& model, const ag::data::TextDataset& ds, Split split, const TrainOptions& o,
                     ag::Generator& gen) {
  ag::NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (std::int64_t i = 0; i < o.eval_batches; ++i) {
    auto b = ds.sample(split, o.batch, o.model.block_size, gen);
    total += model.loss(b.x, b.y).item();
  }
  model.train();
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

}  // namespace

int train(const TrainOptions& o) {
  for (auto [name, value] : {std::pair{"--steps", o.steps},
                             {"--batch", o.batch},
                             {"--eval-interval", o.eval_interval},
                             {"--eval-batches", o.eval_batches},
                             {"--checkpoint-interval", o.checkpoint_interval}})
    if (value <= 0) throw std::invalid_argument(fmt::format("{} must be positive, got {}", name, value));
  std::vector<std::string> files = o.corpus.empty() ? default_corpus() : o.corpus;
  std::string text = read_corpus(files);
  auto tokenizer = ag::data::CharTokenizer::from_text(text);
  ag::data::TextDataset ds(tokenizer.encode(text), o.val_fraction);
  ag::nn::GPTConfig config = o.model;
  config.vocab_size = tokenizer.size();

  std::filesystem::create_directories(o.out_dir);
  std::string model_path = (std::filesystem::path(o.out_dir) / "minigpt.safetensors").string();
  ag::Generator init_gen(o.seed), data_gen(o.seed + 1);
  ag::nn::GPT model(config, init_gen);
  ag::optim::AdamW opt(ag::optim::decay_groups(model, o.weight_decay), {.lr = o.lr, .beta2 = 0.99});
  ag::optim::WarmupCosine schedule{.warmup = o.warmup, .total = o.steps, .max_lr = o.lr, .min_lr = o.min_lr};
  std::string state_path = (std::filesystem::path(o.out_dir) / "minigpt.train.safetensors").string();
  ag::io::TrainingState state{model, opt, schedule, data_gen};  // saved and restored by io/training_state.cpp
  std::int64_t start = 0;
  if (o.resume) {
    ag::io::ResumedTraining resumed = ag::io::load_training_state(state_path, state, tokenizer);
    start = resumed.step;
    if (ag::io::schedule_json(resumed.schedule) != ag::io::schedule_json(schedule))
      fmt::print("note: the learning-rate schedule was {}, it is now {}\n", ag::io::schedule_json(resumed.schedule),
                 ag::io::schedule_json(schedule));
    fmt::print("resuming from step {} of {}\n", start, state_path);
  }
  std::string log_path = (std::filesystem::path(o.out_dir) / "train_log.csv").string();
  LossLog history = truncate_log(log_path, start);
  std::FILE* log = std::fopen(log_path.c_str(), "a");
  if (!log) throw std::runtime_error(fmt::format("cannot open '{}' for appending", log_path));
  std::setvbuf(log, nullptr, _IOLBF, 0);  // a line per step, on disk as soon as it is written

  fmt::print("corpus: {} files, {:.2f} M characters, vocabulary of {} characters\n", files.size(),
             static_cast<double>(ds.size(Split::Train) + ds.size(Split::Validation)) / 1e6, tokenizer.size());
  fmt::print("model: {} layers, {} heads, n_embd {}, block {}: {:.2f} M parameters\n", config.n_layer, config.n_head,
             config.n_embd, config.block_size, static_cast<double>(model.parameter_count()) / 1e6);
  fmt::print("training: {} steps of {} x {} tokens, AdamW lr {} (warm-up {}, cosine to {})\n", o.steps, o.batch,
             config.block_size, o.lr, o.warmup, o.min_lr);
  if (ag::kernels() == ag::Kernels::Reference)
    fmt::print("kernels: reference (ops/reference/): the readable route, slower than the default\n");

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  ag::examples::ProgressBar bar(o.steps - start);
  double smoothed = 0;
  std::int64_t step = start;
  // `done`: how many steps are complete; a resumed run starts there. The training state goes
  // first: it alone is what --resume reads; the model file beside it is for sample and eval.
  auto checkpoint = [&](std::int64_t done) {
    std::fflush(log);
    ag::io::save_training_state(state_path, state, tokenizer, done);
    ag::io::save_gpt(model_path, model, tokenizer);
  };
  for (; step < o.steps && !g_stop; ++step) {
    opt.set_lr(schedule.lr_at(step));
    auto batch = ds.sample(Split::Train, o.batch, config.block_size, data_gen);
    ag::Tensor loss = model.loss(batch.x, batch.y);
    opt.zero_grad();
    loss.backward();
    ag::optim::clip_grad_norm(model.parameters(), o.grad_clip);
    opt.step();

    double l = loss.item();
    smoothed = step == start ? l : 0.95 * smoothed + 0.05 * l;
    history.steps.push_back(static_cast<double>(step + 1));
    history.losses.push_back(l);
    bar.update(step + 1 - start, (step + 1 - start) * o.batch * config.block_size,
               fmt::format("loss {:.4f}", smoothed));
    bool evaluate = (step + 1) % o.eval_interval == 0 || step + 1 == o.steps;
    double val = evaluate ? estimate_loss(model, ds, Split::Validation, o, data_gen) : 0;
    fmt::print(log, "{},{},{},{}\n", step + 1, l, opt.lr(), evaluate ? fmt::format("{}", val) : "");
    if (evaluate) {
      history.val_steps.push_back(static_cast<double>(step + 1));
      history.val_losses.push_back(val);
    }
    if (evaluate || (step + 1) % o.checkpoint_interval == 0) checkpoint(step + 1);
    if (evaluate) {
      bar.print_line(fmt::format("step {:>5}: train loss {:.4f}, validation loss {:.4f}  (saved {})", step + 1,
                                 smoothed, val, model_path));
    }
  }
  bar.finish();
  std::signal(SIGINT, SIG_DFL);  // from here on, Ctrl-C simply stops the program
  std::signal(SIGTERM, SIG_DFL);
  if (g_stop) {
    checkpoint(step);
    std::fclose(log);
    fmt::print("interrupted at step {}: saved {}; continue with --resume\n", step, model_path);
    return 130;
  }
  std::fclose(log);
  fmt::print("trained {} steps in {}\n", step - start, ag::examples::format_duration(bar.elapsed_seconds()));

  std::string loss_png = (std::filesystem::path(o.out_dir) / "loss.png").string();
  if (!history.losses.empty()) {
    ag::plot::line_plot_png(
        loss_png,
        {{"train (per step)", history.steps, history.losses}, {"validation", history.val_steps, history.val_losses}},
        "Mini-GPT training", "step", "cross-entropy (nats per character)");
    fmt::print("wrote {}\n", loss_png);
  }
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
  fmt::print("wrote {} attention maps, {} ... {}\n", maps.size(), maps.front(), maps.back());

  ag::Generator sample_gen(o.seed + 3);
  auto ids = ag::nn::generate(model, tokenizer.encode("\n"),
                              {.max_new_tokens = o.sample_tokens, .temperature = 0.8, .top_k = 20}, sample_gen);
  fmt::print("\nsample (temperature 0.8, top-k 20):\n{}\n", tokenizer.decode(ids));
  if (!history.val_losses.empty()) fmt::print("\nfinal validation loss: {:.4f}\n", history.val_losses.back());
  fmt::print("checkpoint: {}\n", model_path);
  return 0;
}

}  // namespace minigpt
