// minigpt train: the training loop, with evaluation, checkpoints and pictures.
//
//   for each step:  lr from the warm-up + cosine schedule
//                   x, y = a random batch of windows;  loss = cross_entropy(model(x), y)
//                   zero_grad; backward; clip the gradient norm; AdamW step
//   every eval_interval steps: mean loss on held-out windows, a checkpoint
#include <csignal>
#include <filesystem>

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

std::string state_path(const std::string& model_path) {
  return model_path.substr(0, model_path.size() - 12) + ".train.safetensors";
}

// The optimizer's state, the step and the data generator, beside the model file.
void save_training_state(const std::string& path, const ag::optim::Optimizer& opt, std::int64_t step,
                         const ag::Generator& gen) {
  ag::io::save_safetensors(path, opt.state(), {{"step", std::to_string(step)}, {"generator", gen.state()}});
}

}  // namespace

int train(const TrainOptions& o) {
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
  std::int64_t start = 0;
  if (o.resume) {
    ag::io::GPTCheckpoint saved = ag::io::read_gpt_checkpoint(model_path);
    if (saved.vocab != tokenizer.tokens())
      throw std::invalid_argument(
          fmt::format("{} was trained on another vocabulary; resume with the same corpus", model_path));
    ag::io::load_gpt(model, saved);
    ag::io::TensorFile state = ag::io::load_safetensors(state_path(model_path));
    opt.load_state(state.tensors);
    start = std::stoll(state.metadata.at("step"));
    data_gen.set_state(state.metadata.at("generator"));
    fmt::print("resuming from step {} of {}\n", start, model_path);
  }

  fmt::print("corpus: {} files, {:.2f} M characters, vocabulary of {} characters\n", files.size(),
             static_cast<double>(ds.size(Split::Train) + ds.size(Split::Validation)) / 1e6, tokenizer.size());
  fmt::print("model: {} layers, {} heads, n_embd {}, block {}: {:.2f} M parameters\n", config.n_layer, config.n_head,
             config.n_embd, config.block_size, static_cast<double>(model.parameter_count()) / 1e6);
  fmt::print("training: {} steps of {} x {} tokens, AdamW lr {} (warm-up {}, cosine to {})\n", o.steps, o.batch,
             config.block_size, o.lr, o.warmup, o.min_lr);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  ag::examples::ProgressBar bar(o.steps - start);
  std::vector<double> train_steps, train_losses, eval_steps, val_losses;
  double smoothed = 0;
  std::int64_t step = start;
  // `done`: how many steps are complete; a resumed run starts there.
  auto checkpoint = [&](std::int64_t done) {
    ag::io::save_gpt(model_path, model, tokenizer);
    save_training_state(state_path(model_path), opt, done, data_gen);
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
    train_steps.push_back(static_cast<double>(step + 1));
    train_losses.push_back(l);
    bar.update(step + 1 - start, (step + 1 - start) * o.batch * config.block_size,
               fmt::format("loss {:.4f}", smoothed));
    if ((step + 1) % o.eval_interval == 0 || step + 1 == o.steps) {
      double val = estimate_loss(model, ds, Split::Validation, o, data_gen);
      eval_steps.push_back(static_cast<double>(step + 1));
      val_losses.push_back(val);
      checkpoint(step + 1);
      bar.print_line(fmt::format("step {:>5}: train loss {:.4f}, validation loss {:.4f}  (saved {})", step + 1,
                                 smoothed, val, model_path));
    }
  }
  bar.finish();
  std::signal(SIGINT, SIG_DFL);  // from here on, Ctrl-C simply stops the program
  std::signal(SIGTERM, SIG_DFL);
  if (g_stop) {
    checkpoint(step);
    fmt::print("interrupted at step {}: saved {}; continue with --resume\n", step, model_path);
    return 130;
  }
  fmt::print("trained {} steps in {}\n", step - start, ag::examples::format_duration(bar.elapsed_seconds()));

  std::string loss_png = (std::filesystem::path(o.out_dir) / "loss.png").string();
  if (!train_losses.empty()) {
    ag::plot::line_plot_png(loss_png,
                            {{"train (per step)", train_steps, train_losses}, {"validation", eval_steps, val_losses}},
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
  if (!val_losses.empty()) fmt::print("\nfinal validation loss: {:.4f}\n", val_losses.back());
  fmt::print("checkpoint: {}\n", model_path);
  return 0;
}

}  // namespace minigpt
