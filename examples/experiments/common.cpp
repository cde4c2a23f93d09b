#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/preflight.h"
#include "../common/progress.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {
int failures = 0;
}

Text load_text(std::int64_t chars) {
  // The English fortune files, concatenated in name order, '%' separator lines dropped.
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  if (!std::filesystem::is_directory(dir))
    ag::examples::refuse("{} does not exist: install Debian's `fortunes` package", dir.string());
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().find('.') == std::string::npos) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::string name = f.filename().string();
    if (name == "chinese" || name == "tang300" || name == "song100") continue;  // fortunes-zh
    std::ifstream in(f);
    for (std::string line; std::getline(in, line) && static_cast<std::int64_t>(text.size()) < chars;)
      if (line != "%") text += line + "\n";
    if (static_cast<std::int64_t>(text.size()) >= chars) break;
  }
  // Keep ASCII only, so every byte is a character and the vocabulary stays small.
  std::string ascii;
  for (char c : text)
    if (static_cast<unsigned char>(c) < 128) ascii += c;
  if (ascii.empty()) ag::examples::refuse("--corpus-chars {}: no ASCII text in the first {} characters", chars, chars);
  auto tokenizer = ag::data::CharTokenizer::from_text(ascii);
  ag::data::TextDataset dataset(tokenizer.encode(ascii), 0.1);
  // Every language model here reads windows of up to 32 characters (small_gpt), from both splits.
  std::int64_t need = small_gpt(1).block_size + 1;
  if (dataset.size(ag::data::TextDataset::Split::Validation) < need)
    ag::examples::refuse("--corpus-chars {}: its validation tenth has {} characters, fewer than the {} a window needs",
                         chars, dataset.size(ag::data::TextDataset::Split::Validation), need);
  return {tokenizer, std::move(dataset)};
}

ag::nn::GPTConfig small_gpt(std::int64_t vocab_size) {
  return {.vocab_size = vocab_size, .block_size = 32, .n_layer = 2, .n_head = 4, .n_embd = 64};
}

double train_with(ag::nn::Module& model, const Text& text, const Options& o, std::int64_t block,
                  const std::string& label, const std::function<Tensor(const Tensor&, const Tensor&)>& loss_of) {
  ag::Generator gen(o.seed + 100);  // the same batches for every model
  ag::optim::AdamW opt(ag::optim::decay_groups(model, 0.1), {.lr = 3e-3});
  ag::optim::WarmupCosine schedule{.warmup = o.steps / 10, .total = o.steps, .max_lr = 3e-3, .min_lr = 3e-4};
  ag::examples::ProgressBar bar(o.steps);
  double tail_sum = 0;
  std::int64_t tail_n = 0, tokens = 0;
  model.train();
  for (std::int64_t step = 0; step < o.steps; ++step) {
    auto b = text.dataset.sample(ag::data::TextDataset::Split::Train, o.batch, block, gen);
    opt.set_lr(schedule.lr_at(step));
    Tensor loss = loss_of(b.x, b.y);
    opt.zero_grad();
    loss.backward();
    ag::optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    double l = loss.item();
    if (step >= o.steps - std::max<std::int64_t>(1, o.steps / 10)) tail_sum += l, ++tail_n;
    tokens += o.batch * block;
    bar.update(step + 1, tokens, fmt::format("{}  loss {:.4f}", label, l));
  }
  bar.finish();
  return tail_sum / static_cast<double>(tail_n);
}

double train(ag::nn::GPT& model, const Text& text, const Options& o, const std::string& label) {
  return train_with(model, text, o, model.config.block_size, label,
                    [&](const Tensor& x, const Tensor& y) { return model.loss(x, y); });
}

std::vector<ag::data::TextDataset::Batch> validation_batches(const Text& text, const Options& o, std::int64_t block,
                                                             std::int64_t batches) {
  ag::Generator gen(o.seed + 200);  // the same batches for every model
  std::vector<ag::data::TextDataset::Batch> out;
  for (std::int64_t i = 0; i < batches; ++i)
    out.push_back(text.dataset.sample(ag::data::TextDataset::Split::Validation, o.batch, block, gen));
  return out;
}

double validation_loss(ag::nn::GPT& model, const Text& text, const Options& o, std::int64_t batches) {
  ag::NoGradGuard no_grad;
  model.eval();
  double sum = 0;
  for (const auto& b : validation_batches(text, o, model.config.block_size, batches))
    sum += model.loss(b.x, b.y).item();
  model.train();
  return sum / static_cast<double>(batches);
}

std::string sample(ag::nn::GPT& model, const Text& text, const std::string& prompt, std::int64_t n,
                   std::uint64_t seed) {
  ag::Generator gen(seed);
  model.eval();
  auto ids = ag::nn::generate(model, text.tokenizer.encode(prompt), {.max_new_tokens = n, .temperature = 0.8}, gen);
  model.train();
  return text.tokenizer.decode(ids);
}

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) out += (c ? "  " : "") + fmt::format("{:>{}}", cells[c], width[c]);
    fmt::print("{}\n", out);
  };
  line(header);
  std::vector<std::string> rule;
  for (auto w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& r : rows) line(r);
}

void expect(bool holds, const std::string& claim) {
  fmt::print("check: {} ... {}\n", claim, holds ? "PASS" : "FAIL");
  if (!holds) ++failures;
}

int exit_code() { return failures == 0 ? 0 : 1; }

}  // namespace experiments
