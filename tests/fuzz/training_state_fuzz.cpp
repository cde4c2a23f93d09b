// libFuzzer target: a training state as `minigpt train --resume` reads one. The bytes are parsed
// as safetensors and read as the run they were written for (io::read_training_model); a model
// of that config, AdamW over it as minigpt builds it, a batch generator and a tokenizer of the
// file's vocabulary are made, and the state is loaded into them (io::load_training_state).
// Every failure must be a std::invalid_argument that changes nothing: not a weight, not a
// moment, not a generator. A state that loads must be one a run can continue from: the
// optimizer's step is the file's, every weight and moment is finite, and every second moment
// (exp_avg_sq) is at least 0.
#include <attograd/attograd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

// Everything a load may change, as bytes and text.
struct Snapshot {
  std::vector<std::string> tensors;
  std::vector<std::string> generators;
  std::int64_t steps = 0;
  bool operator==(const Snapshot&) const = default;
};

std::string bytes_of(const ag::Tensor& t) {
  return {static_cast<const char*>(t.raw_data()), static_cast<std::size_t>(t.numel()) * ag::dtype_size(t.dtype())};
}

Snapshot snapshot(ag::nn::GPT& model, const ag::optim::Optimizer& opt, const ag::Generator& data_gen) {
  Snapshot s;
  for (const auto& [name, p] : model.named_parameters()) s.tensors.push_back(bytes_of(p));
  for (const auto& [name, t] : opt.state()) s.tensors.push_back(name + ":" + bytes_of(t));
  s.generators.push_back(data_gen.state());
  std::vector<std::pair<std::string, ag::nn::Dropout*>> dropouts;
  ag::io::collect_dropouts(model, "", dropouts);
  for (auto& [name, d] : dropouts) s.generators.push_back(name + ":" + d->generator().state());
  s.steps = opt.steps_taken();
  return s;
}

bool all_finite(const ag::Tensor& t, bool non_negative) {
  if (t.dtype() != ag::kFloat32) return true;  // the step count
  for (float v : t.to_vector<float>())
    if (!std::isfinite(v) || (non_negative && v < 0)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ag::io::TensorFile file;
  ag::io::TrainedModel run;
  try {
    file = ag::io::parse_safetensors(bytes, "fuzz");
    run = ag::io::read_training_model(file, "fuzz");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // read_training_model has checked the config against the file's embedding tables: the model
  // is no larger than the file's tensors allow, and the vocabulary makes a tokenizer.
  ag::nn::GPT model(run.config);
  ag::optim::AdamW opt{ag::optim::decay_groups(model, 0.1), {.lr = run.schedule.max_lr, .beta2 = 0.99}};
  ag::Generator data_gen(0);
  ag::data::CharTokenizer tokenizer(run.vocab);
  ag::io::TrainingState state{model, opt, run.schedule, data_gen};
  const Snapshot before = snapshot(model, opt, data_gen);
  ag::io::ResumedTraining resumed{};
  try {
    resumed = ag::io::load_training_state(file, "fuzz", state, tokenizer);
  } catch (const std::invalid_argument&) {
    if (snapshot(model, opt, data_gen) != before) std::abort();  // a partial load
    return 0;
  }
  if (opt.steps_taken() != resumed.step) std::abort();
  for (const auto& [name, p] : model.named_parameters())
    if (!all_finite(p, false)) std::abort();
  for (const auto& [name, t] : opt.state())
    if (!all_finite(t, name.ends_with("exp_avg_sq"))) std::abort();
  return 0;
}
