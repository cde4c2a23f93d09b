// GPT checkpoints (io/checkpoint.h): a nanoGPT state dict in safetensors, with the config and
// the vocabulary in its metadata, and the checks that make a load all or nothing.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>

#include "../autograd/dispatch.h"
#include "../ops/shape.h"
#include "../runtime/error.h"
#include "checkpoint.h"
#include "json.h"
#include "staging.h"

namespace ag::io {

namespace {

// attograd name -> nanoGPT name: the same tensors, in the same layout (qkv_proj is nanoGPT's
// c_attn, q, k and v stacked in that order), under other names.
std::string nanogpt_name(const std::string& name) {
  static const std::pair<std::string_view, std::string_view> kRenames[] = {{"attn.qkv_proj.", "attn.c_attn."},
                                                                           {"attn.out_proj.", "attn.c_proj."},
                                                                           {"mlp.fc.", "mlp.c_fc."},
                                                                           {"mlp.proj.", "mlp.c_proj."}};
  std::string out = name;
  if (out.starts_with("blocks."))
    out = "transformer.h." + out.substr(7);
  else
    out = "transformer." + out;  // wte, wpe, ln_f
  for (auto [from, to] : kRenames)
    if (auto at = out.find(from); at != std::string::npos) out.replace(at, from.size(), to);
  return out;
}

}  // namespace

std::vector<nn::NamedTensor> gpt_state_dict(const nn::GPT& model, bool gradients) {
  auto pick = [gradients](const Tensor& p) {
    if (!gradients) return p.detach();
    return p.grad().defined() ? p.grad() : zeros(p.shape(), p.dtype());
  };
  std::vector<nn::NamedTensor> out;
  for (const auto& [name, t] : model.named_parameters()) out.emplace_back(nanogpt_name(name), pick(t));
  return out;
}

Metadata gpt_metadata(const nn::GPTConfig& c, const data::CharTokenizer& tokenizer) {
  json::object config{
      {"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer},
      {"n_head", c.n_head},         {"n_embd", c.n_embd},         {"bias", c.bias},
  };
  // Written only when it is not GPT-2's LayerNorm, so such checkpoints stay as nanoGPT writes them.
  if (c.norm != nn::NormKind::Layer) config["norm"] = nn::norm_name(c.norm);
  if (c.mlp != nn::MlpKind::Gelu) config["mlp"] = nn::mlp_name(c.mlp);
  std::vector<std::string> tokens = tokenizer.tokens();  // returned by value: begin and end of one copy
  json::array vocab(tokens.begin(), tokens.end());
  return {{"config", json::serialize(config)}, {"vocab", json::serialize(vocab)}, {"format", "attograd-gpt"}};
}

void save_gpt(const std::string& path, const nn::GPT& model, const data::CharTokenizer& tokenizer) {
  if (tokenizer.size() != model.config.vocab_size)
    throw_invalid("save_gpt", "the tokenizer has {} tokens but the model's vocab_size is {}", tokenizer.size(),
                  model.config.vocab_size);
  save_safetensors(path, gpt_state_dict(model), gpt_metadata(model.config, tokenizer));
}

GPTCheckpoint read_gpt_checkpoint(const std::string& path) { return gpt_checkpoint(load_safetensors(path), path); }

GPTCheckpoint gpt_checkpoint(TensorFile file, std::string_view source) {
  GPTCheckpoint ckpt;
  ckpt.file = std::move(file);
  ckpt.source = std::string(source);
  auto meta = [&](const char* key) -> const std::string& {
    auto it = ckpt.file.metadata.find(key);
    if (it == ckpt.file.metadata.end()) throw_invalid(source, "metadata has no \"{}\" entry", key);
    return it->second;
  };
  try {
    json::value config = json::parse(meta("config"));
    const json::object& fields = json::as_object(config, "config");
    // A key this version does not read would be dropped without a word, and the model built
    // from the rest might not be the one that was saved.
    for (const auto& field : fields)
      if (std::string_view key = field.key(); key != "vocab_size" && key != "block_size" && key != "n_layer" &&
                                              key != "n_head" && key != "n_embd" && key != "bias" && key != "norm" &&
                                              key != "mlp")
        throw_invalid("config",
                      "\"{}\" is no setting of a GPT this version reads (it reads vocab_size, "
                      "block_size, n_layer, n_head, n_embd, bias, norm and mlp)",
                      key);
    auto get = [&](const char* key) {
      const json::value* v = fields.if_contains(key);
      if (!v) throw_invalid("config", "missing \"{}\"", key);
      return json::as_int(*v, fmt::format("config.{}", key));
    };
    ckpt.config.vocab_size = get("vocab_size");
    ckpt.config.block_size = get("block_size");
    ckpt.config.n_layer = get("n_layer");
    ckpt.config.n_head = get("n_head");
    ckpt.config.n_embd = get("n_embd");
    if (const json::value* bias = fields.if_contains("bias")) ckpt.config.bias = json::as_bool(*bias, "config.bias");
    if (const json::value* norm = fields.if_contains("norm"))
      ckpt.config.norm = nn::parse_norm(json::as_string(*norm, "config.norm"));
    if (const json::value* mlp = fields.if_contains("mlp"))
      ckpt.config.mlp = nn::parse_mlp(json::as_string(*mlp, "config.mlp"));
    json::value vocab = json::parse(meta("vocab"));
    for (const json::value& t : json::as_array(vocab, "vocab"))
      ckpt.vocab.emplace_back(json::as_string(t, "vocab entry"));
    // A config and a vocabulary in another kind of file (or in one that says nothing of its kind)
    // are not read as a GPT's on trust.
    if (const std::string& format = meta("format"); format != "attograd-gpt")
      throw_invalid("format", "\"{}\" is not a GPT checkpoint's (\"attograd-gpt\")", format);
  } catch (const std::invalid_argument& e) {
    throw_invalid(source, "bad metadata: {}", e.what());
  }
  const nn::GPTConfig& c = ckpt.config;
  if (c.vocab_size <= 0 || c.block_size <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 ||
      c.n_embd % c.n_head != 0)
    throw_invalid(source,
                  "config (vocab {}, block {}, layers {}, heads {}, embd {}) needs positive sizes and n_embd "
                  "divisible by n_head",
                  c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd);
  if (static_cast<std::int64_t>(ckpt.vocab.size()) != c.vocab_size)
    throw_invalid(source, "metadata lists {} vocabulary tokens but config.vocab_size is {}", ckpt.vocab.size(),
                  c.vocab_size);
  try {
    data::CharTokenizer check(ckpt.vocab);  // one character each, none twice, sorted
  } catch (const std::invalid_argument& e) {
    throw_invalid(source, "bad vocab metadata: {}", e.what());
  }
  // The config must describe the tensors in the file before anyone builds a model from it: a
  // corrupt config could otherwise ask for a model far larger than the file.
  auto expect_shape = [&](const std::string& name, const Shape& shape) {
    const Tensor* t = ckpt.file.find(name);
    if (!t) throw_invalid(source, "tensor '{}' is missing from the checkpoint", name);
    if (t->shape() != shape)
      throw_invalid(source, "tensor '{}' has shape {} but the config says {}", name, shape_str(t->shape()),
                    shape_str(shape));
  };
  expect_shape("transformer.wte.weight", {c.vocab_size, c.n_embd});
  expect_shape("transformer.wpe.weight", {c.block_size, c.n_embd});
  std::set<std::int64_t> layers;  // every layer from 0 to n_layer - 1 must hold a tensor
  for (const auto& [name, _] : ckpt.file.tensors) {
    if (!name.starts_with("transformer.h.")) continue;
    std::int64_t layer = -1;
    std::string_view rest = std::string_view(name).substr(14);
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
    if (ec != std::errc() || end == rest.data() + rest.size() || *end != '.' || layer < 0)
      throw_invalid(source, "tensor '{}' has no layer number after transformer.h.", name);
    if (layer >= c.n_layer)
      throw_invalid(source, "tensor '{}' belongs to layer {} but config.n_layer is {}", name, layer, c.n_layer);
    layers.insert(layer);
  }
  if (static_cast<std::int64_t>(layers.size()) != c.n_layer)
    throw_invalid(source, "the tensors hold {} layers but config.n_layer is {}", layers.size(), c.n_layer);
  return ckpt;
}

namespace detail {

void check_finite(const Tensor& t, std::string_view name, std::string_view where) {
  std::int64_t count = 0, first = -1;
  double value = 0;
  dispatch_floating(t.dtype(), "load_gpt", [&](auto tag) {
    const auto* p = t.data_ptr<decltype(tag)>();
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i)
      if (!std::isfinite(p[i]) && count++ == 0) first = i, value = static_cast<double>(p[i]);
  });
  if (count > 0)
    throw_invalid(where,
                  "tensor '{}' holds {} at element {} ({} non-finite values in all); pass "
                  "LoadOptions{{.allow_non_finite = true}} to load it anyway",
                  name, value, first, count);
}

std::map<std::string, Tensor> stage_gpt(const nn::GPT& model, const GPTCheckpoint& ckpt, const LoadOptions& options) {
  const std::string where = ckpt.source.empty() ? "load_gpt" : fmt::format("{}: load_gpt", ckpt.source);
  const nn::GPTConfig &a = model.config, &b = ckpt.config;
  if (a.vocab_size != b.vocab_size || a.block_size != b.block_size || a.n_layer != b.n_layer || a.n_head != b.n_head ||
      a.n_embd != b.n_embd || a.bias != b.bias || a.norm != b.norm || a.mlp != b.mlp)
    throw_invalid(
        where,
        "checkpoint config (vocab {}, block {}, layers {}, heads {}, embd {}, bias {}, norm {}, mlp {}) differs "
        "from the model's (vocab {}, block {}, layers {}, heads {}, embd {}, bias {}, norm {}, mlp {})",
        b.vocab_size, b.block_size, b.n_layer, b.n_head, b.n_embd, b.bias, nn::norm_name(b.norm), nn::mlp_name(b.mlp),
        a.vocab_size, a.block_size, a.n_layer, a.n_head, a.n_embd, a.bias, nn::norm_name(a.norm), nn::mlp_name(a.mlp));
  // Stage every tensor first: names, shapes, dtypes and values all checked before the model changes.
  std::vector<nn::NamedTensor> expected = gpt_state_dict(model);  // no biases when config.bias is false
  std::set<std::string> wanted;
  for (const auto& [name, _] : expected) wanted.insert(name);
  for (const auto& [name, _] : ckpt.file.tensors)
    if (!wanted.count(name) && name != "lm_head.weight")
      throw_invalid(where, "unexpected tensor '{}' in the checkpoint{}", name,
                    name.ends_with(".bias") && !b.bias ? " (its config has bias = false)" : "");
  std::map<std::string, Tensor> staged;
  for (const auto& [name, current] : expected) {
    const Tensor* t = ckpt.file.find(name);
    if (!t)
      throw_invalid(where, "tensor '{}' is missing from the checkpoint{}", name,
                    name.ends_with(".bias") ? " (its config has bias = true, so every bias must be there)" : "");
    if (t->shape() != current.shape())
      throw_invalid(where, "tensor '{}' has shape {} in the checkpoint, the model needs {}", name,
                    shape_str(t->shape()), shape_str(current.shape()));
    if (!is_floating(t->dtype()))
      throw_invalid(where, "tensor '{}' is {} in the checkpoint; weights must be F32 or F64", name,
                    dtype_name(t->dtype()));
    staged[name] = t->dtype() == current.dtype() ? *t : t->to(current.dtype());
    if (!options.allow_non_finite) check_finite(staged[name], name, where);  // after the cast: F64 1e300 is F32 inf
  }
  if (const Tensor* head = ckpt.file.find("lm_head.weight")) {  // allowed only as the tied copy of wte
    // Compared with wte as stored, before either is converted to the model's dtype: a float64
    // head is the copy of a float64 wte, not of its float32 rounding.
    const Tensor& wte = *ckpt.file.find("transformer.wte.weight");
    if (head->shape() != wte.shape() || !is_floating(head->dtype()))
      throw_invalid(where, "lm_head.weight has shape {} but must equal wte's {}", shape_str(head->shape()),
                    shape_str(wte.shape()));
    Tensor h = head->to(kFloat64), w = wte.to(kFloat64);
    if (std::memcmp(h.raw_data(), w.raw_data(), static_cast<std::size_t>(h.numel()) * 8) != 0)
      throw_invalid(where,
                    "lm_head.weight differs from transformer.wte.weight; this GPT ties its head to the "
                    "token embedding and cannot hold a separate one");
  }
  return staged;
}

void commit_gpt(nn::GPT& model, const std::map<std::string, Tensor>& staged) {
  for (const auto& [name, p] : model.named_parameters()) {
    Tensor param = p;
    param.set_data(staged.at(nanogpt_name(name)).clone().detach());
  }
}

}  // namespace detail

void load_gpt(nn::GPT& model, const GPTCheckpoint& ckpt, const LoadOptions& options) {
  detail::commit_gpt(model, detail::stage_gpt(model, ckpt, options));  // all checks first, then the copy
}

namespace {
std::vector<nn::NamedTensor> module_tensors(const nn::Module& module) {
  std::vector<nn::NamedTensor> all = module.named_parameters(), buffers = module.named_buffers();
  all.insert(all.end(), buffers.begin(), buffers.end());
  return all;
}
}  // namespace

void save_module(const std::string& path, const nn::Module& module, const Metadata& metadata) {
  save_safetensors(path, module_tensors(module), metadata);
}

std::vector<std::pair<Tensor, Tensor>> detail::stage_module(const nn::Module& module, const TensorFile& file,
                                                            const LoadOptions& options, const std::string& where) {
  std::vector<nn::NamedTensor> expected = module_tensors(module);
  std::set<std::string> wanted;
  for (const auto& [name, _] : expected) wanted.insert(name);
  for (const auto& [name, _] : file.tensors)
    if (!wanted.count(name))
      throw_invalid(where, "unexpected tensor '{}': the module has no such parameter or buffer", name);
  // Every tensor checked and converted before the first one is copied in.
  std::vector<std::pair<Tensor, Tensor>> staged;
  for (const auto& [name, current] : expected) {
    const Tensor* t = file.find(name);
    if (!t) throw_invalid(where, "tensor '{}' is missing from the file", name);
    if (t->shape() != current.shape())
      throw_invalid(where, "tensor '{}' has shape {} in the file, the module needs {}", name, shape_str(t->shape()),
                    shape_str(current.shape()));
    if (is_floating(t->dtype()) != is_floating(current.dtype()) ||
        (!is_floating(t->dtype()) && t->dtype() != current.dtype()))
      throw_invalid(where, "tensor '{}' is {} in the file, the module holds {}", name, dtype_name(t->dtype()),
                    dtype_name(current.dtype()));
    Tensor value = t->dtype() == current.dtype() ? *t : t->to(current.dtype());
    if (is_floating(current.dtype()) && !options.allow_non_finite) detail::check_finite(value, name, where);
    staged.emplace_back(current, value);
  }
  return staged;
}

void detail::commit_module(const std::vector<std::pair<Tensor, Tensor>>& staged) {
  for (auto [target, value] : staged) target.set_data(value.clone().detach());
}

void load_module(nn::Module& module, const TensorFile& file, const LoadOptions& options, std::string_view source) {
  const std::string where = source.empty() ? "load_module" : fmt::format("{}: load_module", source);
  detail::commit_module(detail::stage_module(module, file, options, where));
}

void load_module(nn::Module& module, const std::string& path, const LoadOptions& options) {
  load_module(module, load_safetensors(path), options, path);
}

}  // namespace ag::io
