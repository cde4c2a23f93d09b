// What the two bottleneck experiments (bottleneck.cpp, rnn_bottleneck.cpp) share: the reversal
// task by source length, and the Transformer they train on it.
#pragma once

#include "../common/digit_tasks.h"

namespace experiments::reversal {

namespace digits = ag::examples::digits;

constexpr std::int64_t kShortest = 4, kLongest = 16;

inline const digits::Task kTask{.kind = "reverse", .min_len = kShortest, .max_len = kLongest};

// The encoder-decoder: two blocks each side, d_model 64, 4 heads, sinusoidal positions.
inline ag::nn::TransformerConfig transformer() {
  return {.src_vocab = digits::kVocab,
          .tgt_vocab = digits::kVocab,
          .d_model = 64,
          .n_heads = 4,
          .d_ff = 128,
          .n_encoder_layers = 2,
          .n_decoder_layers = 2,
          .max_len = kLongest + 2};
}

// 200 held-out sequences of each length from kShortest to kLongest, the same for every model
// trained with --seed `seed`.
inline std::vector<std::vector<digits::Sequence>> held_out_by_length(std::uint64_t seed) {
  std::vector<std::vector<digits::Sequence>> out;
  for (std::int64_t len = kShortest; len <= kLongest; ++len) {
    ag::Generator gen(seed + 500 + static_cast<std::uint64_t>(len));
    out.push_back(digits::held_out_set({.kind = "reverse", .min_len = len, .max_len = len}, 200, gen));
  }
  return out;
}

}  // namespace experiments::reversal
