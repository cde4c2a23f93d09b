// minigpt sample / eval, and the attention maps.
#include <filesystem>

#include "../common/plot.h"
#include "../common/preflight.h"
#include "minigpt.h"

namespace minigpt {

namespace {

Loaded load_checked(const std::string& path, ag::DType dtype) {
  ag::io::TensorFile file = ag::io::load_safetensors(path);
  // The training state is a safetensors file too, beside the model, and easy to pass by mistake.
  if (auto format = file.metadata.find("format");
      format != file.metadata.end() && format->second == ag::io::kTrainingStateFormat) {
    std::filesystem::path model = std::filesystem::path(path).parent_path() / "minigpt.safetensors";
    ag::examples::refuse(
        "--checkpoint {} is the training state minigpt train keeps for --resume (the model, its optimizer and "
        "its step), not the model file; pass the model file it writes beside it: --checkpoint {}",
        path, model.string());
  }
  ag::io::GPTCheckpoint ckpt = ag::io::gpt_checkpoint(std::move(file), path);
  ag::data::CharTokenizer tokenizer(ckpt.vocab);
  auto model = std::make_unique<ag::nn::GPT>(ckpt.config);
  model->to(dtype);
  ag::io::load_gpt(*model, ckpt);
  return {std::move(ckpt), std::move(tokenizer), std::move(model)};
}

}  // namespace

// What the file holds is checked as it is read, before the model computes anything, so a file
// that is not this program's model (not safetensors, truncated, another model's tensors) is
// refused naming --checkpoint.
Loaded load(const std::string& path, ag::DType dtype) {
  try {
    return load_checked(path, dtype);
  } catch (const ag::examples::Refused&) {
    throw;
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    if (what.starts_with(path + ": ")) ag::examples::refuse("--checkpoint {}", what);  // the reader named it
    ag::examples::refuse("--checkpoint {}: {}", path, what);
  }
}

PromptAttention attention_for_prompt(ag::nn::GPT& model, const ag::data::CharTokenizer& tokenizer,
                                     const std::string& prompt) {
  std::vector<std::int64_t> ids = tokenizer.encode(prompt);
  if (ids.empty()) throw std::invalid_argument("the attention prompt is empty");
  if (static_cast<std::int64_t>(ids.size()) > model.config.block_size)
    ids.resize(static_cast<std::size_t>(model.config.block_size));
  PromptAttention out;
  for (auto id : ids) out.tokens.push_back(tokenizer.decode({id}));
  {
    ag::NoGradGuard no_grad;
    model.eval();
    model.forward(ag::from_vector(ids, {1, static_cast<std::int64_t>(ids.size())}), nullptr, &out.weights);
    model.train();
  }
  for (auto& w : out.weights) w = w.to(ag::kFloat64);
  return out;
}

std::vector<std::string> write_attention_maps(ag::nn::GPT& model, const ag::data::CharTokenizer& tokenizer,
                                              const std::string& prompt, const std::string& out_dir) {
  PromptAttention a = attention_for_prompt(model, tokenizer, prompt);
  std::vector<std::string> paths;
  for (std::size_t layer = 0; layer < a.weights.size(); ++layer) {
    const ag::Tensor& w = a.weights[layer];
    for (std::int64_t head = 0; head < w.size(1); ++head) {
      // The GPT is causal: key j > query i is hidden by the mask, which is not a weight of 0.
      ag::plot::Heatmap map{.row_labels = a.tokens,
                            .col_labels = a.tokens,
                            .title = fmt::format("layer {}, head {}", layer, head),
                            .row_title = "query position (the character attending)",
                            .col_title = "key position (the character attended to)",
                            .value_title = "attention weight"};
      for (std::int64_t i = 0; i < w.size(2); ++i) {
        map.values.emplace_back();
        map.masked.emplace_back();
        for (std::int64_t j = 0; j < w.size(3); ++j) {
          map.values.back().push_back(w.at<double>({0, head, i, j}));
          map.masked.back().push_back(j > i);
        }
      }
      std::string path =
          (std::filesystem::path(out_dir) / fmt::format("attention_layer{}_head{}.png", layer, head)).string();
      ag::plot::heatmap_png(path, map);
      paths.push_back(path);
    }
  }
  return paths;
}

}  // namespace minigpt
