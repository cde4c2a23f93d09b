// libFuzzer target: a GPT checkpoint as `minigpt sample` reads one. The bytes are parsed as
// safetensors, the metadata's config and vocabulary are checked against the tensors, a model is
// built from that config, and the tensors are loaded into it; a "generator" metadata entry is
// read as a random generator's state, and a training state's model, schedule and options as
// `minigpt train --resume` reads them (io::read_training_model). Every failure must be a
// std::invalid_argument, and a failed load must leave the model as it was; an accepted
// vocabulary must make a tokenizer.
#include <attograd/attograd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace {

std::vector<std::string> snapshot(const ag::nn::GPT& model) {
  std::vector<std::string> out;
  for (const auto& [name, p] : model.named_parameters())
    out.emplace_back(static_cast<const char*>(p.raw_data()),
                     static_cast<std::size_t>(p.numel()) * ag::dtype_size(p.dtype()));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ag::io::GPTCheckpoint ckpt;
  try {
    ag::io::TensorFile file = ag::io::parse_safetensors(bytes, "fuzz");
    if (auto it = file.metadata.find("generator"); it != file.metadata.end()) {
      ag::Generator gen(0);
      gen.set_state(it->second);
    }
    if (auto it = file.metadata.find("format"); it != file.metadata.end() && it->second == ag::io::kTrainingStateFormat) {
      ag::io::read_training_model(file, "fuzz");
      return 0;  // its model's tensors are named "model." + a checkpoint's: not a checkpoint itself
    }
    ckpt = ag::io::gpt_checkpoint(std::move(file), "fuzz");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // gpt_checkpoint has checked the vocabulary: a tokenizer must take it as it is.
  if (ag::data::CharTokenizer(ckpt.vocab).tokens() != ckpt.vocab) std::abort();
  // The config now matches the embedding tables in the file, so the model is no larger than
  // about 12 n_layer n_embd^2 parameters, with n_embd and n_layer bounded by the file's tensors.
  ag::nn::GPT model(ckpt.config);
  std::vector<std::string> before = snapshot(model);
  try {
    ag::io::load_gpt(model, ckpt);
  } catch (const std::invalid_argument&) {
    if (snapshot(model) != before) std::abort();  // a partial load
    try {  // refused for NaN or infinity alone? Then it loads when that is allowed.
      ag::io::load_gpt(model, ckpt, {.allow_non_finite = true});
    } catch (const std::invalid_argument&) {
      if (snapshot(model) != before) std::abort();
    }
  }
  return 0;
}
