// What minigpt checks before it starts work (examples/common/preflight.h): a run that passes
// these cannot fail later for a reason known at the start.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <type_traits>

#include "../common/cli.h"
#include "../common/corpus.h"
#include "../common/memory_budget.h"
#include "../common/preflight.h"
#include "../common/ranks.h"
#include "../common/run_lock.h"
#include "minigpt.h"

namespace minigpt {

using ag::examples::plural;
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

// The training options a training state records beside the model and the schedule, by the
// name of their command-line option, so that --resume alone continues a run as it began.
// --precision and --kernels are not among them: they say how this machine runs the steps. Nor is
// --grad-accum: the state records the micro-batches a step sums ("micro-batches"), which
// --grad-accum makes in one process and the process count under mpirun (docs/distributed.md).
template <class Options, class F>
void for_each_recorded(Options& o, F&& f) {
  f("batch", o.batch);
  f("weight-decay", o.weight_decay);
  f("eval-interval", o.eval_interval);
  f("eval-batches", o.eval_batches);
  f("checkpoint-interval", o.checkpoint_interval);
  f("sync-every", o.sync_check_interval);
  f("seed", o.seed);
  f("prompt", o.prompt);
  f("sample-tokens", o.sample_tokens);
}

// A recorded option's text back as its value (as recorded_options wrote it); none when it is not one.
template <class T>
std::optional<T> parse_recorded(const std::string& text) {
  if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else {
    T value{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
  }
}

// Whether a recorded value is one the option accepts (check_train_options' ranges), so that a bad
// file is named as the culprit rather than an option the command line never gave.
template <class T>
bool recorded_value_ok(std::string_view option, const T& value) {
  if constexpr (std::is_same_v<T, std::int64_t>)
    return value >= (option == "sample-tokens" ? 0 : 1);
  else if constexpr (std::is_same_v<T, double>)
    return std::isfinite(value) && value >= 0;  // --weight-decay
  else
    return true;  // --seed, --prompt
}

}  // namespace

std::map<std::string, std::string> recorded_options(const TrainOptions& o, const std::string& corpus) {
  std::map<std::string, std::string> out;
  out["corpus"] = corpus;
  for_each_recorded(o, [&](const char* option, const auto& value) { out[option] = fmt::format("{}", value); });
  out["micro-batches"] = std::to_string(o.grad_accum * ag::dist::world_size());
  return out;
}

namespace {

// Where a run that an --overwrite was replacing lies when that run was killed before its first
// checkpoint (train.cpp, set_replaced_run_aside): " (the run it was replacing is in DIR: ...)",
// or "" when there is none.
std::string replaced_run_note(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().filename().string().starts_with(".replaced-") && entry.is_directory(ec))
      return fmt::format(
          "; the run an --overwrite was replacing when it stopped is in {}: move its files back into {} to keep it",
          entry.path().string(), dir);
  return "";
}

}  // namespace

void take_resumed_run(TrainOptions& o, const std::function<bool(const std::string&)>& given) {
  // What the resumed run changes, said by train once every check has passed.
  auto note = [&o]<class... Args>(fmt::format_string<Args...> f, Args&&... args) {
    o.resume_notes.push_back(fmt::format(f, std::forward<Args>(args)...));
  };
  std::string path = (std::filesystem::path(o.out_dir) / "minigpt.train.safetensors").string();
  // A run that stopped before its first checkpoint (it diverged, or was killed) left a log and
  // no state: say what is there and which flag starts it again.
  if (!std::filesystem::exists(path) && !run_files_in(o.out_dir).empty())
    refuse(
        "--resume: {} holds a run that saved no training state (it stopped before its first checkpoint); pass "
        "--overwrite instead to start it again (nothing was changed){}",
        o.out_dir, replaced_run_note(o.out_dir));
  ag::examples::check_input_file("--resume", path);
  ag::io::TrainedModel stored;
  try {
    stored = ag::io::read_training_model(path);
  } catch (const std::invalid_argument& e) {
    refuse("--resume: {}", e.what());
  }
  // The run's value of a model option, as `spell` writes it on a command line; one given that
  // differs is refused.
  auto take_spelled = [&](const char* option, auto& value, auto stored_value, auto spell) {
    if (given(option) && value != stored_value)
      refuse(
          "--{} {} conflicts with the run being resumed: {} was trained with --{} {}; a resumed run keeps its "
          "model, so leave --{} out (or start a new run: another --out, or --overwrite without --resume)",
          option, spell(value), path, option, spell(stored_value), option);
    value = stored_value;
  };
  auto take = [&](const char* option, auto& value, auto stored_value) {
    take_spelled(option, value, stored_value, [](auto v) { return ag::examples::as_typed(v); });
  };
  take("block", o.model.block_size, stored.config.block_size);
  take("layers", o.model.n_layer, stored.config.n_layer);
  take("heads", o.model.n_head, stored.config.n_head);
  take("embd", o.model.n_embd, stored.config.n_embd);
  if (stored.dropout)
    take("dropout", o.model.dropout, *stored.dropout);
  else
    note("{} does not record its dropout (an older file); using --dropout {}", path,
         ag::examples::as_typed(o.model.dropout));
  o.model.bias = stored.config.bias;
  take_spelled("norm", o.model.norm, stored.config.norm, ag::nn::norm_name);
  take_spelled("mlp", o.model.mlp, stored.config.mlp, ag::nn::mlp_name);
  // The schedule: --steps, --lr, --min-lr and --warmup left out are the run's. One given that
  // differs makes a new schedule, which train notes when it resumes. (The file's, checked here,
  // so that a bad one is not blamed on an option the command line never gave.)
  const ag::optim::WarmupCosine& schedule = stored.schedule;
  if (schedule.total < 1 || !(std::isfinite(schedule.max_lr) && schedule.max_lr > 0) ||
      !(schedule.min_lr <= schedule.max_lr) || schedule.warmup > schedule.total)
    refuse("--resume: {}: its schedule {} is not one a run can have", path, ag::io::schedule_json(schedule));
  if (!given("steps")) o.steps = schedule.total;
  if (!given("lr")) o.lr = schedule.max_lr;
  if (!given("min-lr")) o.min_lr = schedule.min_lr;
  if (!given("warmup")) o.warmup = schedule.warmup;
  // Every recorded option is one this version reads: another would be dropped without a word.
  std::set<std::string> known{"micro-batches", "corpus"};
  for_each_recorded(o, [&](const char* option, const auto&) { known.insert(option); });
  for (const auto& [key, value] : stored.options)
    if (!known.count(key))
      refuse("--resume: {}: its training options record \"{}\" ({}), which this version does not read (it reads {})",
             path, key, ag::examples::as_typed(value), fmt::join(known, ", "));
  if (auto it = stored.options.find("corpus"); it != stored.options.end()) o.trained_corpus = it->second;
  if (stored.options.empty()) {
    note("{} does not record the training options (an older file); using those given, or their defaults", path);
    return;
  }
  // The other training options: one left out is the run's; one given that differs is this
  // run's, with a note.
  auto stored_as = [&]<class T>(const char* entry, const T&, std::string_view shown) -> std::optional<T> {
    auto it = stored.options.find(entry);
    if (it == stored.options.end()) return std::nullopt;
    std::optional<T> value = parse_recorded<T>(it->second);
    if (!value) refuse("--resume: {}: its {} {} is not a value of it", path, shown, ag::examples::as_typed(it->second));
    return value;
  };
  for_each_recorded(o, [&](const char* option, auto& value) {
    auto stored_value = stored_as(option, value, fmt::format("--{}", option));
    if (!stored_value) return;
    if (!recorded_value_ok(option, *stored_value))
      refuse("--resume: {}: its --{} {} is out of the option's range", path, option,
             ag::examples::as_typed(*stored_value));
    if (!given(option))
      value = *stored_value;
    else if (value != *stored_value)
      note("--{} {} differs from the run being resumed, which had {}; this run uses {}", option,
           ag::examples::as_typed(value), ag::examples::as_typed(*stored_value), ag::examples::as_typed(value));
  });
  // The micro-batches a step sums: one process takes the run's as its --grad-accum; under mpirun
  // each process is one, so another count is this run's, with a note.
  std::int64_t processes = ag::dist::world_size();
  if (std::optional<std::int64_t> micro = stored_as("micro-batches", o.grad_accum, "count of micro-batches a step")) {
    if (*micro < 1 || *micro > ag::examples::kMaxMicroBatches)
      refuse("--resume: {}: its count of micro-batches a step, {}, is not from 1 to {}", path, *micro,
             ag::examples::kMaxMicroBatches);
    std::string was = fmt::format("the run being resumed, which summed {} micro-batches a step", *micro);
    if (processes == 1 && !given("grad-accum"))
      o.grad_accum = *micro;
    else if (processes == 1 && o.grad_accum != *micro)
      note("--grad-accum {} differs from {}; the remaining steps sum {}", o.grad_accum, was, o.grad_accum);
    else if (processes > 1 && o.grad_accum * processes != *micro)
      note("{} processes differ from {}; the remaining steps sum {}", processes, was, o.grad_accum * processes);
  }
}

void check_train_options(const TrainOptions& o) {
  if (o.resume && o.overwrite)
    refuse("--resume and --overwrite exclude each other: --resume continues the run in --out, --overwrite replaces it");
  if (o.new_corpus && !o.resume) refuse("--new-corpus is for --resume: it lets a resumed run continue on another text");
  check_at_least("--steps", o.steps, 1);
  check_at_least("--batch", o.batch, 1);
  check_at_least("--block", o.model.block_size, 1);
  check_at_least("--layers", o.model.n_layer, 1);
  check_at_least("--heads", o.model.n_head, 1);
  check_at_least("--embd", o.model.n_embd, 1);
  check_at_least("--eval-interval", o.eval_interval, 1);
  check_at_least("--eval-batches", o.eval_batches, 1);
  check_at_least("--checkpoint-interval", o.checkpoint_interval, 1);
  ag::examples::check_grad_accum(o.grad_accum);
  check_at_least("--sync-every", o.sync_check_interval, 1);
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
  std::vector<std::string> files = o.corpus.empty() ? ag::examples::default_corpus() : o.corpus;
  std::string text = ag::examples::read_corpus(files);
  auto tokenizer = ag::data::CharTokenizer::from_text(text);
  ag::data::TextDataset dataset(tokenizer.encode(text), o.val_fraction);
  using Split = ag::data::TextDataset::Split;
  std::int64_t block = o.model.block_size, chars = dataset.size(Split::Train) + dataset.size(Split::Validation);
  for (auto [split, name] : {std::pair{Split::Train, "training split (the first 90%)"},
                             {Split::Validation, "validation split (the last 10%)"}})
    if (dataset.size(split) < block + 1)
      refuse(
          "the corpus has {}, so its {} has {}, fewer than --block + 1 = {}: every window needs "
          "block + 1 characters; use a longer corpus or a smaller --block",
          plural(chars, "character"), name, dataset.size(split), block + 1);
  if (!o.prompt.empty()) {
    std::vector<std::int64_t> ids = encode_prompt(tokenizer, "--prompt", o.prompt);
    if (std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()), block) > kMaxMapCharacters)
      refuse("--prompt has {}; the attention maps take at most {} (one cell per pair of characters)",
             plural(std::ssize(ids), "character"), kMaxMapCharacters);
  }
  encode_prompt(tokenizer, "the final sample's prompt", "\n");  // every corpus line ends in one
  // Compared between the ranks under mpirun, and between a run and its resume.
  std::uint64_t fingerprint = ag::dist::fingerprint(text);
  return {std::move(files), fingerprint, std::move(tokenizer), std::move(dataset)};
}

std::string corpus_record(const Corpus& c) {
  using Split = ag::data::TextDataset::Split;
  return fmt::format("fingerprint {:016x}, {} characters", c.fingerprint,
                     c.dataset.size(Split::Train) + c.dataset.size(Split::Validation));
}

// The vocabulary alone would let another text with the same characters through: the resumed
// run would then continue on data its first steps never saw, and its log would not say so.
void check_resumed_corpus(const TrainOptions& o, const Corpus& c) {
  if (!o.resume || o.trained_corpus.empty() || o.new_corpus) return;
  if (std::string now = corpus_record(c); now != o.trained_corpus)
    refuse(
        "--corpus is not the text the run being resumed trained on ({} in its training state, {} now); give that "
        "corpus, or pass --new-corpus to continue on this one",
        o.trained_corpus, now);
}

std::vector<std::string> train_output_files(const ag::nn::GPTConfig& config) {
  std::vector<std::string> files{"minigpt.lock", "train_log.csv", "minigpt.safetensors", "minigpt.train.safetensors",
                                 "loss.png"};
  for (std::int64_t layer = 0; layer < config.n_layer; ++layer)
    for (std::int64_t head = 0; head < config.n_head; ++head)
      files.push_back(fmt::format("attention_layer{}_head{}.png", layer, head));
  return files;
}

std::vector<std::string> train_files_written_in_place() { return {"minigpt.lock", "train_log.csv"}; }

std::vector<std::string> run_files_in(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  const std::vector<std::string> fixed = train_output_files({.n_layer = 0});
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name == "minigpt.lock") continue;  // left by every run, and holding nothing of it
    bool map = name.starts_with("attention_layer") && name.ends_with(".png");
    if (map || std::find(fixed.begin(), fixed.end(), name) != fixed.end()) found.push_back(name);
  }
  // The checkpoints and the log first: they are what a message naming a few should name.
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    bool map_a = a.starts_with("attention_layer"), map_b = b.starts_with("attention_layer");
    return map_a != map_b ? map_b : a < b;
  });
  return found;
}

namespace {
// Whether paths a and b name one file: the same file when both exist, else the same place once
// "." and ".." are resolved (a file the run is about to create has no identity yet).
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) {
    bool same = std::filesystem::equivalent(a, b, ec);
    return !ec && same;
  }
  std::filesystem::path ca = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  std::filesystem::path cb = std::filesystem::weakly_canonical(b, ec);
  return !ec && ca == cb;
}
}  // namespace

void check_trace_file(const std::string& path, const TrainOptions& o) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(parent, ec))
    refuse("--trace {}: its directory {} does not exist", path, parent.string());
  if (std::filesystem::is_directory(path, ec)) refuse("--trace {} is a directory; give a file's name", path);
  ag::examples::check_in_place_file("--trace", path);
  // The trace is written from the first step on, so it must not be a file the run reads or writes.
  for (const std::string& corpus : o.corpus)
    if (same_file(path, corpus))
      refuse("--trace {} is the corpus the run reads ({}); give the trace another name", path, corpus);
  for (const std::string& name : train_output_files(o.model))
    if (same_file(path, std::filesystem::path(o.out_dir) / name))
      refuse("--trace {} is the run's own {} in --out {}; give the trace another name", path, name, o.out_dir);
}

void check_train_resources(const TrainOptions& o, const ag::nn::GPTConfig& c) {
  ag::examples::check_fits_in_memory(
      fmt::format("the model (--layers {} --heads {} --embd {} --block {}, a vocabulary of {}) at --batch {}",
                  c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size, o.batch),
      ag::examples::gpt_training_memory(c, o.batch));
  // The loss history kept for the picture: a step number and a loss per step, as doubles.
  ag::examples::check_fits_in_memory(fmt::format("the loss history of --steps {}", o.steps),
                                     ag::examples::Size(o.steps) * 32);
  check_sampling_options("--sample-tokens", o.sample_tokens, 0.8, 20);
  // Checked last, as the cheapest to fix: nothing above depends on it.
  ag::examples::check_output_dir("--out", o.out_dir, train_output_files(c), train_files_written_in_place());
  ag::examples::check_not_in_use(o.out_dir, "minigpt.lock");
  const bool has_state = std::filesystem::exists(std::filesystem::path(o.out_dir) / "minigpt.train.safetensors");
  if (std::vector<std::string> found = run_files_in(o.out_dir); !found.empty() && !o.resume && !o.overwrite) {
    std::string named = fmt::format(
        "{}", fmt::join(found.begin(), found.begin() + std::min<std::ptrdiff_t>(std::ssize(found), 3), ", "));
    if (found.size() > 3) named += fmt::format(" and {} more", found.size() - 3);
    // A run that stopped before its first checkpoint (it diverged, or was killed) left no state
    // to continue: only one of the two flags can help, so name that one.
    if (!has_state)
      refuse(
          "--out {} holds a run that saved no training state ({}), so there is nothing to --resume; pass "
          "--overwrite to replace it (nothing was changed){}",
          o.out_dir, named, replaced_run_note(o.out_dir));
    refuse(
        "--out {} holds a run ({}); pass --resume to continue it or --overwrite to replace it (nothing was "
        "changed)",
        o.out_dir, named);
  }
  if (o.resume)
    ag::examples::check_input_file("--resume",
                                   (std::filesystem::path(o.out_dir) / "minigpt.train.safetensors").string());
}

void check_sampling_options(std::string_view tokens_option, std::int64_t tokens, double temperature,
                            std::int64_t top_k) {
  if (tokens < 0) refuse("{} (the number of tokens to sample) must be at least 0, got {}", tokens_option, tokens);
  // The ids (8 bytes each) and the text (up to 4 bytes a character, twice while decoding).
  ag::examples::check_fits_in_memory(
      fmt::format("{} {}: a sample of {}", tokens_option, tokens, plural(tokens, "token")),
      ag::examples::Size(tokens) * 16);
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
    refuse("{}: {} (a vocabulary of {})", option, e.what(), plural(tokenizer.size(), "character"));
  }
}

}  // namespace minigpt
