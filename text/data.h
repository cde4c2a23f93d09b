// Text data: a character tokenizer over Unicode code points, and random training windows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../autograd/generator.h"
#include "../autograd/tensor.h"

namespace ag::data {

// Strict UTF-8 decoding: overlong forms, surrogates, code points past U+10FFFF and truncated
// sequences are errors naming the byte offset.
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);

// One token per Unicode code point ("a", "中", "\n"), ids in the order of the vocabulary.
class CharTokenizer {
 public:
  // The vocabulary: every distinct code point of `text`, sorted.
  static CharTokenizer from_text(std::string_view utf8);
  // A vocabulary given token by token (from a checkpoint): each one code point of UTF-8, none
  // twice, sorted by code point. Errors name the entry at fault.
  explicit CharTokenizer(const std::vector<std::string>& tokens);

  // Errors name the byte offset of invalid UTF-8, or the character missing from the
  // vocabulary and where it is.
  std::vector<std::int64_t> encode(std::string_view utf8) const;
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::vector<std::string> tokens() const;
  std::int64_t size() const { return static_cast<std::int64_t>(vocab_.size()); }

 private:
  explicit CharTokenizer(std::u32string vocab);
  static std::u32string checked_vocabulary(const std::vector<std::string>& tokens);
  std::u32string vocab_;  // sorted
};

// A token stream split into a training part (the first 1 - val_fraction) and a validation
// part (the rest), from which random windows are drawn.
class TextDataset {
 public:
  TextDataset(std::vector<std::int64_t> ids, double val_fraction);

  enum class Split { Train, Validation };
  struct Batch {
    Tensor x, y;  // int64 [B, T]; y is x shifted by one token
  };
  // `batch` windows of `block` tokens at uniformly random offsets in the split.
  Batch sample(Split split, std::int64_t batch, std::int64_t block, Generator& generator) const;
  std::int64_t size(Split split) const;
  // Every token of a split, in order (for models fitted by counting, such as a bigram table).
  const std::vector<std::int64_t>& tokens(Split split) const { return part(split); }

 private:
  const std::vector<std::int64_t>& part(Split split) const { return split == Split::Train ? train_ : val_; }
  std::vector<std::int64_t> train_, val_;
};

}  // namespace ag::data
