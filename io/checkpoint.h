// Saving and loading tensors: the safetensors format, NumPy's .npy, and GPT checkpoints laid
// out as a nanoGPT state dict so the same file loads in PyTorch.
//
// safetensors: [8-byte little-endian header length N][N bytes of JSON header][raw data]
//   header: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"key": "string value", ...}}
//   offsets count bytes from the start of the data section; data is little-endian, row-major.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../text/data.h"
#include "../nn/gpt.h"
#include "../nn/module.h"

namespace ag::io {

using Metadata = std::map<std::string, std::string>;

struct TensorFile {
  std::vector<nn::NamedTensor> tensors;  // in data-offset order
  Metadata metadata;
  const Tensor* find(std::string_view name) const;
};

// Writes atomically: a temporary file beside `path`, flushed to disk, then renamed over it,
// so a crash leaves either the old file or the new one, never half of one.
void save_safetensors(const std::string& path, const std::vector<nn::NamedTensor>& tensors,
                      const Metadata& metadata = {});
// Validates everything before returning: header length against the file size, the header's
// JSON and its shape, dtypes (F32, F64, I64, BOOL), shapes, offsets (in range, matching the
// byte size, no overlaps or gaps), duplicate names. Errors name the file and the entry.
TensorFile load_safetensors(const std::string& path);
TensorFile parse_safetensors(std::string_view bytes, std::string_view source = "safetensors");

void save_npy(const std::string& path, const Tensor& t);
Tensor load_npy(const std::string& path);
Tensor parse_npy(std::string_view bytes, std::string_view source = "npy");

// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync of the directory).
void write_file_atomically(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);

// --- GPT checkpoints ------------------------------------------------------------------------

// The model's parameters under nanoGPT's names (q, k and v stacked into c_attn, [3C, C]); or,
// with `gradients`, their gradients laid out the same way (zeros where there is none).
std::vector<nn::NamedTensor> gpt_state_dict(const nn::GPT& model, bool gradients = false);
// Metadata "config" (vocab_size, block_size, n_layer, n_head, n_embd as a JSON object) and
// "vocab" (the tokens in id order, a JSON array).
Metadata gpt_metadata(const nn::GPTConfig& config, const data::CharTokenizer& tokenizer);
void save_gpt(const std::string& path, const nn::GPT& model, const data::CharTokenizer& tokenizer);

struct GPTCheckpoint {
  nn::GPTConfig config;
  std::vector<std::string> vocab;
  TensorFile file;
};
GPTCheckpoint read_gpt_checkpoint(const std::string& path);
// The same from a file already read: checks the "config" and "vocab" metadata (`source` names
// the file in errors). The tensors are checked later, by load_gpt.
GPTCheckpoint gpt_checkpoint(TensorFile file, std::string_view source);
// Copies the checkpoint's tensors into `model`. Every name, shape and dtype is checked first,
// and the config must match the model's; on any error the model is left exactly as it was.
void load_gpt(nn::GPT& model, const GPTCheckpoint& checkpoint);

}  // namespace ag::io
