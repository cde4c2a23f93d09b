// A run's training state (io/checkpoint.h): the model, the optimizer, the step, the schedule and
// every random generator in one safetensors file. It is read whole and every part is checked
// before any is applied, so a resume either continues the run exactly or changes nothing.
#include <algorithm>
#include <charconv>
#include <optional>
#include <set>

#include "../autograd/dispatch.h"
#include "../nn/layers.h"
#include "../runtime/error.h"
#include "checkpoint.h"
#include "json.h"
#include "staging.h"

namespace ag::io {

// (A module tree is a few levels deep, so recursion is safe here.)
void collect_dropouts(nn::Module& module, const std::string& path,
                      std::vector<std::pair<std::string, nn::Dropout*>>& out) {
  if (auto* d = dynamic_cast<nn::Dropout*>(&module)) out.emplace_back(path, d);
  for (const auto& [name, child] : module.named_children())
    collect_dropouts(*child, path.empty() ? name : path + "." + name, out);
}

namespace {

constexpr const char* kFormat = kTrainingStateFormat;

// A count written plainly: decimal digits, no sign, no leading zero ("0" itself aside).
std::optional<std::int64_t> plain_count(std::string_view text) {
  std::int64_t n = 0;
  if (text.empty() || (text[0] == '0' && text.size() > 1)) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0) return std::nullopt;
  return n;
}

optim::WarmupCosine parse_schedule(const std::string& text, std::string_view source) {
  optim::WarmupCosine s;
  try {
    json::value v = json::parse(text);
    const json::object& fields = json::as_object(v, "schedule");
    auto field = [&](const char* key) -> const json::value& {
      const json::value* f = fields.if_contains(key);
      if (!f) throw_invalid("schedule", "missing \"{}\"", key);
      return *f;
    };
    s.warmup = json::as_int(field("warmup"), "schedule.warmup");
    s.total = json::as_int(field("total"), "schedule.total");
    s.max_lr = json::as_double(field("max_lr"), "schedule.max_lr");
    s.min_lr = json::as_double(field("min_lr"), "schedule.min_lr");
    if (fields.size() != 4) throw_invalid("schedule", "holds more than warmup, total, max_lr and min_lr");
  } catch (const std::invalid_argument& e) {
    throw_invalid(source, "bad schedule metadata: {}", e.what());
  }
  if (s.warmup < 0 || s.total < 0 || !(s.max_lr >= 0) || !(s.min_lr >= 0))
    throw_invalid(source, "schedule {} needs non-negative steps and learning rates", text);
  return s;
}

// The "options" entry: a JSON object whose values are strings (TrainingState::options).
std::map<std::string, std::string> parse_options(const std::string& text, std::string_view source) {
  std::map<std::string, std::string> options;
  try {
    json::value v = json::parse(text);
    for (const auto& [key, value] : json::as_object(v, "options")) {
      std::string name(key.data(), key.size());
      options.emplace(name, std::string(json::as_string(value, "options." + name)));
    }
  } catch (const std::invalid_argument& e) {
    throw_invalid(source, "bad options metadata: {}", e.what());
  }
  return options;
}

// The state entries `opt` keeps for each parameter from its first step on, under the names
// Optimizer::state gives them; nullopt for a kind of optimizer not known here. (Every parameter
// of a GPT gets a gradient at every step, so after one step each has all of them.) An SGD whose
// groups differ in having momentum is not checked here; Optimizer::load_state still is.
// Adam's second moment is a running mean of squares: a negative value comes from no update, and
// would make the next one divide by the square root of a negative number.
void check_not_negative(const Tensor& t, const std::string& entry, std::string_view source) {
  dispatch_floating(t.dtype(), "load_training_state", [&](auto tag) {
    const auto* p = t.data_ptr<decltype(tag)>();
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i)
      if (p[i] < 0)
        throw_invalid(source,
                      "tensor '{}' holds {} at element {}: a second moment (a mean of squares) is never "
                      "negative",
                      entry, static_cast<double>(p[i]), i);
  });
}

std::optional<std::vector<std::string>> slots_after_a_step(const optim::Optimizer& opt) {
  if (dynamic_cast<const optim::Adam*>(&opt)) return std::vector<std::string>{"exp_avg", "exp_avg_sq"};
  if (const auto* sgd = dynamic_cast<const optim::SGD*>(&opt)) {
    std::size_t with_momentum = 0;
    for (std::size_t g = 0; g < sgd->group_count(); ++g) with_momentum += sgd->group_options(g).momentum != 0;
    if (with_momentum == sgd->group_count()) return std::vector<std::string>{"momentum_buffer"};
    if (with_momentum == 0) return std::vector<std::string>{};
  }
  return std::nullopt;
}

// Checks the optimizer's entries ("step", "INDEX.SLOT") against the model and the step, before
// Optimizer::load_state checks them against the optimizer itself.
void check_optimizer_state(const std::vector<nn::NamedTensor>& entries, const optim::Optimizer& opt,
                           std::size_t parameters, std::int64_t step, const LoadOptions& options,
                           std::string_view source) {
  std::optional<std::int64_t> optimizer_step;
  std::vector<std::set<std::string>> slots(parameters);
  for (const auto& [name, t] : entries) {
    std::string entry = "optim." + name;
    if (name == "step") {
      if (t.dtype() != kInt64 || t.numel() != 1)
        throw_invalid(source, "tensor '{}' must be one int64, not {} {}", entry, dtype_name(t.dtype()),
                      shape_str(t.shape()));
      optimizer_step = t.item<std::int64_t>();
      continue;
    }
    auto dot = name.find('.');
    std::optional<std::int64_t> index = plain_count(std::string_view(name).substr(0, dot));
    if (dot == std::string::npos || !index)
      throw_invalid(source, "tensor '{}' is not named INDEX.SLOT with a plain parameter index", entry);
    if (static_cast<std::size_t>(*index) >= parameters)
      throw_invalid(source, "tensor '{}' is for parameter {}, but the model has {} parameters", entry, *index,
                    parameters);
    slots[static_cast<std::size_t>(*index)].insert(name.substr(dot + 1));
    if (!options.allow_non_finite) detail::check_finite(t, entry, source);
    if (name.ends_with(".exp_avg_sq") && is_floating(t.dtype())) check_not_negative(t, entry, source);
  }
  if (!optimizer_step) throw_invalid(source, "tensor 'optim.step' is missing");
  if (*optimizer_step != step)
    throw_invalid(source, "the optimizer has taken {} steps but the metadata says step {}", *optimizer_step, step);
  auto needed = slots_after_a_step(opt);
  if (!needed) return;
  for (std::size_t i = 0; i < parameters; ++i)
    for (const std::string& slot : slots[i])
      if (std::find(needed->begin(), needed->end(), slot) == needed->end())
        throw_invalid(source, "tensor 'optim.{}.{}' is no state this optimizer keeps ({})", i, slot,
                      needed->empty() ? "it keeps none" : fmt::format("{}", fmt::join(*needed, ", ")));
  for (std::size_t i = 0; i < parameters; ++i)
    for (const std::string& slot : *needed)
      if (step > 0 && !slots[i].count(slot))
        throw_invalid(source, "tensor 'optim.{}.{}' is missing: after step {} every parameter has its {}", i, slot,
                      step, slot);
}

}  // namespace

std::string schedule_json(const optim::WarmupCosine& s) {
  return fmt::format(R"({{"warmup": {}, "total": {}, "max_lr": {}, "min_lr": {}}})", s.warmup, s.total, s.max_lr,
                     s.min_lr);
}

void save_training_state(const std::string& path, const TrainingState& st, const data::CharTokenizer& tokenizer,
                         std::int64_t step) {
  std::vector<nn::NamedTensor> tensors;
  for (auto& [name, t] : gpt_state_dict(st.model)) tensors.emplace_back("model." + name, t);
  for (auto& [name, t] : st.opt.state()) tensors.emplace_back("optim." + name, t);
  Metadata meta = gpt_metadata(st.model.config, tokenizer);
  meta["format"] = kFormat;
  meta["dropout"] = fmt::format("{}", st.model.config.dropout);  // the shortest text that reads back exactly
  meta["step"] = std::to_string(step);
  meta["schedule"] = schedule_json(st.schedule);
  meta["generator"] = st.data_gen.state();
  if (!st.options.empty()) {
    json::object options;
    for (const auto& [name, value] : st.options) options[name] = value;
    meta["options"] = json::serialize(options);
  }
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  collect_dropouts(st.model, "", dropouts);
  for (auto& [name, d] : dropouts) meta["generator." + name] = d->generator().state();
  save_safetensors(path, tensors, meta);
}

namespace {

const std::string& metadata_entry(const TensorFile& file, const std::string& path, const std::string& key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) throw_invalid(path, "no \"{}\" in its metadata", key);
  return it->second;
}

// The "model." tensors into `model_part` and the "optim." ones into `optim_part`, prefixes
// dropped; any other is refused.
void split_tensors(const TensorFile& file, const std::string& path, TensorFile& model_part,
                   std::vector<nn::NamedTensor>& optim_part) {
  for (auto& [name, t] : file.tensors) {
    if (name.starts_with("model."))
      model_part.tensors.emplace_back(name.substr(6), t);
    else if (name.starts_with("optim."))
      optim_part.emplace_back(name.substr(6), t);
    else
      throw_invalid(path, "unexpected tensor '{}' (neither model. nor optim.)", name);
  }
}

// The file's format, then its model part ("model." tensors and the metadata), checked as
// load_gpt checks a checkpoint; the optimizer's tensors go to `optim_part`.
GPTCheckpoint split_training_state(const TensorFile& file, const std::string& path,
                                   std::vector<nn::NamedTensor>& optim_part) {
  const std::string& format = metadata_entry(file, path, "format");
  if (format != kFormat)
    throw_invalid(path, "not a training checkpoint (format \"{}\"); a training state's format is \"{}\"", format,
                  kFormat);
  TensorFile model_part;
  model_part.metadata = file.metadata;
  model_part.metadata["format"] = "attograd-gpt";  // its model part is one, read as load_gpt reads one
  split_tensors(file, path, model_part, optim_part);
  return gpt_checkpoint(std::move(model_part), path);
}

// The "dropout" entry: none in a file written before it was kept.
std::optional<double> stored_dropout(const TensorFile& file, const std::string& path) {
  auto it = file.metadata.find("dropout");
  if (it == file.metadata.end()) return std::nullopt;
  const std::string& text = it->second;
  double p = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), p);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(p >= 0 && p < 1))
    throw_invalid(path, "dropout \"{}\" is not a probability in [0, 1)", text);
  return p;
}

}  // namespace

TrainedModel read_training_model(const TensorFile& file, const std::string& source) {
  std::vector<nn::NamedTensor> optim_part;
  GPTCheckpoint ckpt = split_training_state(file, source, optim_part);
  TrainedModel out{ckpt.config, stored_dropout(file, source),
                   parse_schedule(metadata_entry(file, source, "schedule"), source), {}, ckpt.vocab};
  if (out.dropout) out.config.dropout = *out.dropout;
  if (auto it = file.metadata.find("options"); it != file.metadata.end())
    out.options = parse_options(it->second, source);
  return out;
}

TrainedModel read_training_model(const std::string& path) { return read_training_model(load_safetensors(path), path); }

ResumedTraining load_training_state(const std::string& path, const TrainingState& st,
                                    const data::CharTokenizer& tokenizer, const LoadOptions& options) {
  return load_training_state(load_safetensors(path), path, st, tokenizer, options);
}

ResumedTraining load_training_state(const TensorFile& file, const std::string& path, const TrainingState& st,
                                    const data::CharTokenizer& tokenizer, const LoadOptions& options) {
  auto meta = [&](const std::string& key) -> const std::string& { return metadata_entry(file, path, key); };

  // The model's part, checked as load_gpt checks a checkpoint, the vocabulary and the dropout.
  std::vector<nn::NamedTensor> optim_part;
  GPTCheckpoint ckpt = split_training_state(file, path, optim_part);
  if (std::optional<double> dropout = stored_dropout(file, path); dropout && *dropout != st.model.config.dropout)
    throw_invalid(path, "was trained with dropout {}, this model has {}", *dropout, st.model.config.dropout);
  if (ckpt.vocab != tokenizer.tokens())
    throw_invalid(path,
                  "was trained on another vocabulary ({} tokens, this corpus has {}); resume with the same corpus",
                  ckpt.vocab.size(), tokenizer.size());
  std::map<std::string, Tensor> staged = detail::stage_gpt(st.model, ckpt, options);

  // The step, the schedule, the optimizer's state.
  std::optional<std::int64_t> step = plain_count(meta("step"));
  if (!step) throw_invalid(path, "step \"{}\" is not a non-negative integer", meta("step"));
  ResumedTraining resumed{*step, parse_schedule(meta("schedule"), path)};
  check_optimizer_state(optim_part, st.opt, st.model.named_parameters().size(), *step, options, path);

  // Generators: restored into copies first, so a bad state changes nothing.
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  collect_dropouts(st.model, "", dropouts);
  auto restore = [&](Generator gen, const std::string& key) {
    try {
      gen.set_state(meta(key));
    } catch (const std::invalid_argument& e) {
      throw_invalid(path, "metadata \"{}\": {}", key, e.what());
    }
    return gen;
  };
  Generator data_gen = restore(st.data_gen, "generator");
  std::vector<Generator> dropout_gens;
  std::set<std::string> known{"generator"};
  for (auto& [name, d] : dropouts) {
    dropout_gens.push_back(restore(d->generator(), "generator." + name));
    known.insert("generator." + name);
  }
  for (const auto& [key, _] : file.metadata)
    if (key.starts_with("generator") && !known.count(key))
      throw_invalid(path, "metadata \"{}\" names a generator the model does not have", key);

  // Apply. The optimizer checks its part against itself and commits only if all is well; after
  // it nothing can fail.
  try {
    st.opt.load_state(optim_part);
  } catch (const std::invalid_argument& e) {
    throw_invalid(path, "{}", e.what());
  }
  detail::commit_gpt(st.model, staged);
  st.data_gen = data_gen;
  for (std::size_t i = 0; i < dropouts.size(); ++i) dropouts[i].second->generator() = dropout_gens[i];
  return resumed;
}

}  // namespace ag::io

namespace ag::io {

namespace {
void dropout_states(const nn::Module& module, const std::string& path, Metadata& out) {
  if (auto* d = dynamic_cast<const nn::Dropout*>(&module)) out["generator." + path] = d->generator().state();
  for (const auto& [name, child] : module.named_children())
    dropout_states(*child, path.empty() ? name : path + "." + name, out);
}
}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& module, const optim::Optimizer& opt,
                     const data::BatchOrder* batches, const Metadata& metadata) {
  Metadata meta;
  dropout_states(module, "", meta);
  if (batches) meta["batch_order"] = batches->state();
  meta["format"] = kCheckpointFormat;
  for (const auto& [key, value] : metadata) {
    if (meta.count(key) || key.starts_with("generator."))
      throw_invalid("save_checkpoint", "metadata key \"{}\" is the checkpoint's own; give it another name", key);
    meta[key] = value;
  }
  std::vector<nn::NamedTensor> tensors;
  for (auto& [name, t] : module.named_parameters()) tensors.emplace_back("model." + name, t);
  for (auto& [name, t] : module.named_buffers()) tensors.emplace_back("model." + name, t);
  for (auto& [name, t] : opt.state()) tensors.emplace_back("optim." + name, t);
  save_safetensors(path, tensors, meta);
}

Metadata load_checkpoint(const std::string& path, nn::Module& module, optim::Optimizer& opt, data::BatchOrder* batches,
                         const LoadOptions& options) {
  TensorFile file = load_safetensors(path);
  auto meta = [&](const std::string& key) -> const std::string& { return metadata_entry(file, path, key); };
  if (meta("format") != kCheckpointFormat)
    throw_invalid(path, "not a checkpoint of a module and its optimizer (format \"{}\"; save_checkpoint writes \"{}\")",
                  meta("format"), kCheckpointFormat);
  TensorFile model_part;
  std::vector<nn::NamedTensor> optim_part;
  split_tensors(file, path, model_part, optim_part);
  auto staged = detail::stage_module(module, model_part, options, path + ": load_checkpoint");

  // The optimizer's step is its own "step" entry; its slots are checked against it and the model.
  std::int64_t step = 0;
  for (const auto& [name, t] : optim_part)
    if (name == "step" && t.dtype() == kInt64 && t.numel() == 1) step = t.item<std::int64_t>();
  check_optimizer_state(optim_part, opt, module.named_parameters().size(), step, options, path);

  // Generators and the batch order: restored into copies first, so a bad state changes nothing.
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  collect_dropouts(module, "", dropouts);
  std::vector<Generator> dropout_gens;
  std::set<std::string> known;
  for (auto& [name, d] : dropouts) {
    Generator gen = d->generator();
    try {
      gen.set_state(meta("generator." + name));
    } catch (const std::invalid_argument& e) {
      throw_invalid(path, "metadata \"generator.{}\": {}", name, e.what());
    }
    dropout_gens.push_back(gen);
    known.insert("generator." + name);
  }
  for (const auto& [key, _] : file.metadata)
    if (key.starts_with("generator.") && !known.count(key))
      throw_invalid(path, "metadata \"{}\" names a Dropout the module does not have", key);
  std::optional<data::BatchOrder> order;
  bool saved_order = file.metadata.count("batch_order") > 0;
  if (batches && !saved_order)
    throw_invalid(path, "holds no batch order (metadata \"batch_order\"), and one was given to restore");
  if (!batches && saved_order)
    throw_invalid(path, "holds a batch order (metadata \"batch_order\"); give the loader's order() to restore it");
  if (batches) {
    order = *batches;
    try {
      order->set_state(meta("batch_order"));
    } catch (const std::invalid_argument& e) {
      throw_invalid(path, "metadata \"batch_order\": {}", e.what());
    }
  }

  // Apply. The optimizer checks its part against itself and commits only if all is well; after
  // it nothing can fail.
  try {
    opt.load_state(optim_part);
  } catch (const std::invalid_argument& e) {
    throw_invalid(path, "{}", e.what());
  }
  detail::commit_module(staged);
  for (std::size_t i = 0; i < dropouts.size(); ++i) dropouts[i].second->generator() = dropout_gens[i];
  if (batches) *batches = *order;
  return file.metadata;
}

}  // namespace ag::io
