#include <fstream>

#include "../common/corpus.h"
#include "../common/preflight.h"
#include "../common/progress.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {
int failures = 0;
}

namespace {

// The first `chars` characters of the English fortunes, as the experiments have always read
// them: the files in name order, '%' separator lines dropped, ASCII only (so that every byte is
// a character and the vocabulary stays small).
std::string english_fortunes(std::int64_t chars) {
  std::string text;
  for (const std::string& file : ag::examples::default_corpus()) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line) && static_cast<std::int64_t>(text.size()) < chars;)
      if (line != "%") text += line + "\n";
    if (static_cast<std::int64_t>(text.size()) >= chars) break;
  }
  std::string ascii;
  for (char c : text)
    if (static_cast<unsigned char>(c) < 128) ascii += c;
  if (ascii.empty()) ag::examples::refuse("--corpus-chars {}: no ASCII text in the first {} characters", chars, chars);
  return ascii;
}

// The first `chars` characters (code points, so Chinese counts one per character) of `files`.
std::string first_characters(const std::vector<std::string>& files, std::int64_t chars) {
  std::u32string text = ag::data::decode_utf8(ag::examples::read_corpus(files));
  return ag::data::encode_utf8(
      text.substr(0, static_cast<std::size_t>(std::min<std::int64_t>(chars, std::ssize(text)))));
}

}  // namespace

Text load_text(const Options& o, std::int64_t block) {
  std::string text = o.corpus.empty() ? english_fortunes(o.corpus_chars) : first_characters(o.corpus, o.corpus_chars);
  auto tokenizer = ag::data::CharTokenizer::from_text(text);
  ag::data::TextDataset dataset(tokenizer.encode(text), 0.1);
  // Every language model here reads windows of `block` characters, from both splits.
  const std::string source = o.corpus.empty() ? "--corpus-chars " + std::to_string(o.corpus_chars) : "--corpus";
  if (dataset.size(ag::data::TextDataset::Split::Validation) < block + 1)
    ag::examples::refuse("{}: its validation tenth has {} characters, fewer than the {} a window needs", source,
                         dataset.size(ag::data::TextDataset::Split::Validation), block + 1);
  return {tokenizer, std::move(dataset)};
}

std::string prompt_for(const Text& text, const std::string& wanted) {
  try {
    text.tokenizer.encode(wanted);
    return wanted;
  } catch (const std::invalid_argument&) {  // a character the corpus does not have
    const auto& val = text.dataset.tokens(ag::data::TextDataset::Split::Validation);
    return text.tokenizer.decode({val.begin(), val.begin() + std::min<std::ptrdiff_t>(4, std::ssize(val))});
  }
}

ag::nn::GPTConfig small_gpt(std::int64_t vocab_size) {
  return {.vocab_size = vocab_size, .block_size = 32, .n_layer = 2, .n_head = 4, .n_embd = 64};
}

void fit(ag::nn::Module& model, const Text& text, const Options& o, std::int64_t steps, std::int64_t block,
         const Schedule& schedule, const std::string& label,
         const std::function<Tensor(const Tensor&, const Tensor&)>& loss_of,
         const std::function<void(std::int64_t, double)>& after_step,
         const std::function<void(std::int64_t)>& before_step) {
  ag::Generator gen(o.seed + 100);  // the same batches for every model
  ag::optim::AdamW opt(ag::optim::decay_groups(model, 0.1), {.lr = schedule.lr, .beta2 = schedule.beta2});
  ag::optim::WarmupCosine lr{
      .warmup = schedule.warmup, .total = steps, .max_lr = schedule.lr, .min_lr = schedule.min_lr};
  ag::examples::ProgressBar bar(steps);
  model.train();
  for (std::int64_t step = 0; step < steps; ++step) {
    if (before_step) before_step(step);
    auto b = text.dataset.sample(ag::data::TextDataset::Split::Train, o.batch, block, gen);
    opt.set_lr(lr.lr_at(step));
    Tensor loss = loss_of(b.x, b.y);
    opt.zero_grad();
    loss.backward();
    ag::optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    double l = loss.item();
    after_step(step, l);
    bar.update(step + 1, (step + 1) * o.batch * block, fmt::format("{}  loss {:.4f}", label, l));
  }
  bar.finish();
}

double train_with(ag::nn::Module& model, const Text& text, const Options& o, std::int64_t block,
                  const std::string& label, const std::function<Tensor(const Tensor&, const Tensor&)>& loss_of) {
  double tail_sum = 0;
  std::int64_t tail_n = 0;
  fit(model, text, o, o.steps, block, {.warmup = o.steps / 10}, label, loss_of, [&](std::int64_t step, double l) {
    if (step >= o.steps - std::max<std::int64_t>(1, o.steps / 10)) tail_sum += l, ++tail_n;
  });
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

double validation_loss(ag::nn::GPT& model, const Text& text, const Options& o, std::int64_t batches,
                       const std::function<Tensor(const Tensor&, const Tensor&)>& loss_of) {
  ag::NoGradGuard no_grad;
  model.eval();
  double sum = 0;
  for (const auto& b : validation_batches(text, o, model.config.block_size, batches))
    sum += (loss_of ? loss_of(b.x, b.y) : model.loss(b.x, b.y)).item();
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

WindowMLP::WindowMLP(std::int64_t vocab, std::int64_t window, std::int64_t embed, std::int64_t hidden_size,
                     ag::Generator& gen)
    : window(window) {
  emb = register_module("emb", std::make_shared<ag::nn::Embedding>(vocab, embed, gen));
  hidden = register_module("hidden", std::make_shared<ag::nn::Linear>(window * embed, hidden_size, true, gen));
  out = register_module("out", std::make_shared<ag::nn::Linear>(hidden_size, vocab, true, gen));
}

Tensor WindowMLP::forward(const Tensor& ids) const {
  std::int64_t b = ids.size(0), t = ids.size(1), l = t - window + 1;
  const auto* p = ids.data_ptr<std::int64_t>();
  std::vector<Tensor> parts;
  for (std::int64_t k = 0; k < window; ++k) {  // the k-th token of every window
    std::vector<std::int64_t> column(static_cast<std::size_t>(b * l));
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t j = 0; j < l; ++j) column[static_cast<std::size_t>(bi * l + j)] = p[bi * t + j + k];
    parts.push_back(emb->forward(ag::from_vector(column, {b, l})));
  }
  return out->forward(hidden->forward(ag::cat(parts, -1)).tanh());
}

Tensor window_targets(const Tensor& y, std::int64_t window) { return y.slice(1, window - 1, y.size(1)); }

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = ag::examples::display_width(header[c]);
    for (const auto& r : rows) width[c] = std::max(width[c], ag::examples::display_width(r[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c)
      out += (c ? "  " : "") + std::string(width[c] - std::min(width[c], ag::examples::display_width(cells[c])), ' ') +
             cells[c];
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
