// Private to io/: the two halves of load_gpt and of load_module, so that a loader of a larger file (the training
// state) can check the model's part with everything else before any of it changes.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint.h"

namespace ag::io::detail {

// Every tensor `model` needs, checked (name, shape, dtype, finite values unless allowed) and
// converted to the model's dtype, keyed by checkpoint name. Changes nothing.
std::map<std::string, Tensor> stage_gpt(const nn::GPT& model, const GPTCheckpoint& checkpoint,
                                        const LoadOptions& options);
// Copies staged tensors into the model; cannot fail.
void commit_gpt(nn::GPT& model, const std::map<std::string, Tensor>& staged);
// The same for load_module: each of the module's parameters and buffers with its checked,
// converted value from `file`. Changes nothing.
std::vector<std::pair<Tensor, Tensor>> stage_module(const nn::Module& module, const TensorFile& file,
                                                    const LoadOptions& options, const std::string& where);
void commit_module(const std::vector<std::pair<Tensor, Tensor>>& staged);
// Throws, naming `where`, the tensor and the first bad element, if `t` holds NaN or infinity.
void check_finite(const Tensor& t, std::string_view name, std::string_view where);

}  // namespace ag::io::detail
