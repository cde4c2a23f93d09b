// Saving and loading tensors: the safetensors format, NumPy's .npy, and GPT checkpoints laid
// out as a nanoGPT state dict so the same file loads in PyTorch.
//
// safetensors: [8-byte little-endian header length N][N bytes of JSON header][raw data]
//   header: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"key": "string value", ...}}
//   offsets count bytes from the start of the data section; data is little-endian, row-major.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../data/dataset.h"
#include "../nn/gpt.h"
#include "../nn/module.h"
#include "../nn/optim.h"
#include "../text/data.h"

namespace ag::io {

using Metadata = std::map<std::string, std::string>;

struct TensorFile {
  std::vector<nn::NamedTensor> tensors;  // in data-offset order
  Metadata metadata;
  const Tensor* find(std::string_view name) const;
};

// The largest header a reader takes: Hugging Face's safetensors refuses more than 100 MB, and
// so does load_safetensors.
inline constexpr std::size_t kMaxHeaderBytes = 100'000'000;

// Writes atomically: a temporary file beside `path`, flushed to disk, then renamed over it,
// so a crash leaves either the old file or the new one, never half of one. Refuses, naming the
// entry, what load_safetensors would refuse: a tensor name used twice or "__metadata__", names,
// metadata keys or values that are not UTF-8, a header over kMaxHeaderBytes.
void save_safetensors(const std::string& path, const std::vector<nn::NamedTensor>& tensors,
                      const Metadata& metadata = {});
std::string safetensors_bytes(const std::vector<nn::NamedTensor>& tensors, const Metadata& metadata = {});
// Validates everything before returning: header length against the file size, the header's
// JSON and its shape, dtypes (F32, F64, I64, BOOL), shapes, offsets (in range, matching the
// byte size, no overlaps or gaps), duplicate names. Errors name the file and the entry.
TensorFile load_safetensors(const std::string& path);
TensorFile parse_safetensors(std::string_view bytes, std::string_view source = "safetensors");

// .npy versions 1.0, 2.0 and 3.0 (io/npy.cpp), dtypes <f4, <f8, <i8 and |b1, C order. The
// header is read as the Python dict literal it is; whatever NumPy's reader refuses is refused,
// and errors name the file and the byte of the header at fault.
void save_npy(const std::string& path, const Tensor& t);
std::string npy_bytes(const Tensor& t);  // what save_npy writes: version 1.0, data 64-byte aligned
Tensor load_npy(const std::string& path);
Tensor parse_npy(std::string_view bytes, std::string_view source = "npy");

// Writes `bytes` to `path` atomically: to a new temporary file beside it, under a name no
// other file has (".<name>.tmp-" and six random letters or digits, created with O_EXCL, so a
// symbolic link planted there is never followed), flushed to disk, renamed over `path`, and the
// directory flushed. `path` itself is replaced, never written through: a symbolic link or a hard
// link there is replaced by the new file, and what it pointed to keeps its bytes. Errors
// (std::runtime_error) name `path` and the reason; the temporary file is removed.
void write_file_atomically(const std::string& path, std::string_view bytes);
// Removes from `dir` the temporary files write_file_atomically leaves when its process is killed
// before the rename: the entries named as above that are regular files or symbolic links (never
// followed; a directory of that name is kept). Returns their names, sorted. Only for a directory
// no other process writes in at the time (a live writer's temporary would go too); best effort:
// an entry that cannot be removed is skipped, as no writer reuses its name.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);
// The whole file. Errors (std::runtime_error) name the path and the reason: missing,
// unreadable, a directory.
std::string read_file(const std::string& path);
// The same for a UTF-8 text such as a corpus: also std::invalid_argument, naming the path, for
// an empty file or invalid UTF-8 (with the byte offset of the first bad byte).
std::string read_text_file(const std::string& path);

// --- GPT checkpoints ------------------------------------------------------------------------

// The model's parameters under nanoGPT's names (q, k and v stacked into c_attn, [3C, C]); or,
// with `gradients`, their gradients laid out the same way (zeros where there is none).
std::vector<nn::NamedTensor> gpt_state_dict(const nn::GPT& model, bool gradients = false);
// Metadata "config" (vocab_size, block_size, n_layer, n_head, n_embd and bias as a JSON object,
// and norm when it is not LayerNorm), "vocab" (the tokens in id order, a JSON array) and
// "format": "attograd-gpt".
Metadata gpt_metadata(const nn::GPTConfig& config, const data::CharTokenizer& tokenizer);
void save_gpt(const std::string& path, const nn::GPT& model, const data::CharTokenizer& tokenizer);

struct GPTCheckpoint {
  nn::GPTConfig config;
  std::vector<std::string> vocab;  // checked: one character each, none twice, sorted
  TensorFile file;
  std::string source;  // the file it came from, named in load_gpt's errors
};
GPTCheckpoint read_gpt_checkpoint(const std::string& path);
// The same from a file already read: checks the "config" and "vocab" metadata (`source` names
// the file in errors). The tensors are checked later, by load_gpt.
GPTCheckpoint gpt_checkpoint(TensorFile file, std::string_view source);
struct LoadOptions {
  // Weights holding NaN or infinity are refused unless this is set: a run that diverged would
  // otherwise load without a word and sample nonsense. Set it to inspect such a model.
  bool allow_non_finite = false;
};
// Copies the checkpoint's tensors into `model`. Every name, shape and dtype is checked first
// (and that every value is finite, unless options say otherwise), and the config must match
// the model's; on any error the model is left exactly as it was. Errors name the file and the
// tensor. A model without biases (config.bias false) needs no bias tensors, and takes none.
void load_gpt(nn::GPT& model, const GPTCheckpoint& checkpoint, const LoadOptions& options = {});

// --- Any module ------------------------------------------------------------------------------
// A module's parameters and buffers, under the names named_parameters() and named_buffers()
// give them ("blocks.0.attn.qkv_proj.weight"), in one safetensors file: the checkpoint of a
// model of one's own (docs/models.md).
void save_module(const std::string& path, const nn::Module& module, const Metadata& metadata = {});
// Loads such a file back into a module built the same way. The file must hold exactly the
// module's tensors, each with its shape; float32 and float64 convert to the module's dtype.
// Everything is checked before anything is copied: on any error the module is left as it was,
// and the error names the file and the tensor.
void load_module(nn::Module& module, const std::string& path, const LoadOptions& options = {});
// `source` names the file in errors.
void load_module(nn::Module& module, const TensorFile& file, const LoadOptions& options = {},
                 std::string_view source = {});

// A run of one's own model, to resume exactly (io/training_state.cpp): in one safetensors file,
// the module's tensors as "model." + their names, the optimizer's as "optim." + the names
// Optimizer::state gives, and in the metadata the format "attograd-checkpoint", the state of
// every Dropout's generator ("generator." + its dotted path), the batch order's state
// ("batch_order", when one is given: DataLoader::order()) and the caller's own entries.
inline constexpr const char* kCheckpointFormat = "attograd-checkpoint";
void save_checkpoint(const std::string& path, const nn::Module& module, const optim::Optimizer& opt,
                     const data::BatchOrder* batches = nullptr, const Metadata& metadata = {});
// Restores what save_checkpoint wrote into a module and optimizer built the same way (and the
// batch order, when one is given; a file saved with one needs one). Everything is read and
// checked first, as load_module and Optimizer::load_state check, with every generator state and
// the batch order's; on any error std::invalid_argument names the file and the entry, and
// nothing has changed. Returns the metadata, for the caller's own entries.
Metadata load_checkpoint(const std::string& path, nn::Module& module, optim::Optimizer& opt,
                         data::BatchOrder* batches = nullptr, const LoadOptions& options = {});

// --- Training state -------------------------------------------------------------------------
// Everything a run needs to continue exactly (io/training_state.cpp), in one safetensors file:
// the model's tensors as "model." + their checkpoint names, the optimizer's as "optim." + the
// names Optimizer::state gives; in the metadata, format "attograd-gpt-training", the config and
// vocabulary (as gpt_metadata), "dropout" (the model's dropout probability, which the config
// of a model file leaves out), "step", "schedule" (schedule_json), "generator" (the batch
// generator's state), "generator." + path for each Dropout in the model and, when the program
// gave any, "options" (a JSON object of strings: its own settings, for a resumed run to take).
inline constexpr const char* kTrainingStateFormat = "attograd-gpt-training";

// Every Dropout in `module` with its dotted path ("generator.blocks.0.mlp.drop"), appended to
// `out`: the generators a training state saves, and a step draws from.
void collect_dropouts(nn::Module& module, const std::string& path,
                      std::vector<std::pair<std::string, nn::Dropout*>>& out);

struct TrainingState {
  nn::GPT& model;
  optim::Optimizer& opt;
  const optim::WarmupCosine& schedule;
  Generator& data_gen;
  // The program's settings that are neither the model's nor the schedule's (a batch size, say),
  // by name, as text: saved with the state and handed back by read_training_model, so that a
  // resumed run can take them again. Not read by load_training_state.
  std::map<std::string, std::string> options = {};
};

std::string schedule_json(const optim::WarmupCosine& schedule);
void save_training_state(const std::string& path, const TrainingState& state, const data::CharTokenizer& tokenizer,
                         std::int64_t step);

struct ResumedTraining {
  std::int64_t step;             // the number of steps already done
  optim::WarmupCosine schedule;  // the schedule the state was written with (the caller's is kept)
};

// The run a training state was written for, read (and the file checked) without building the
// model: its config, with `dropout` none for a file written before the dropout was kept, its
// schedule, the program's options (TrainingState::options; empty for a file that has none) and
// the vocabulary (checked as gpt_checkpoint checks one).
// Errors (std::invalid_argument) name the file, as load_training_state's do.
struct TrainedModel {
  nn::GPTConfig config;
  std::optional<double> dropout;
  optim::WarmupCosine schedule;
  std::map<std::string, std::string> options;
  std::vector<std::string> vocab;
};
TrainedModel read_training_model(const std::string& path);
// The same from a file already read; `source` names it in errors.
TrainedModel read_training_model(const TensorFile& file, const std::string& source);

// Restores what save_training_state wrote into `state`. Every part is read and checked before
// anything changes: the format, the tensors' names, the model's tensors (as load_gpt), the
// vocabulary against `tokenizer`, the step (the optimizer's must agree), the schedule, every
// generator state, and the optimizer's state: parameter indices in range and written plainly,
// and, once a step has been taken, the moments (or momentum buffers) of every parameter. On any
// error std::invalid_argument names the file and the entry, and nothing has changed.
ResumedTraining load_training_state(const std::string& path, const TrainingState& state,
                                    const data::CharTokenizer& tokenizer, const LoadOptions& options = {});
// The same from a file already read; `source` names it in errors.
ResumedTraining load_training_state(const TensorFile& file, const std::string& source, const TrainingState& state,
                                    const data::CharTokenizer& tokenizer, const LoadOptions& options = {});

}  // namespace ag::io
