#include "data.h"

#include <algorithm>
#include <map>

#include "../runtime/error.h"

namespace ag::data {

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    unsigned char b = byte(i);
    std::size_t length = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (length == 0)
      throw_invalid("utf8", "invalid UTF-8: byte 0x{:02x} at byte offset {} cannot start a character", b, i);
    if (i + length > text.size())
      throw_invalid("utf8", "invalid UTF-8: the character at byte offset {} is cut off by the end of the text", i);
    char32_t c = length == 1 ? b : length == 2 ? (b & 0x1F) : length == 3 ? (b & 0x0F) : (b & 0x07);
    for (std::size_t k = 1; k < length; ++k) {
      if ((byte(i + k) >> 6) != 0x2)
        throw_invalid("utf8", "invalid UTF-8: byte 0x{:02x} at byte offset {} should continue a character", byte(i + k),
                      i + k);
      c = (c << 6) | (byte(i + k) & 0x3F);
    }
    static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};  // below these: overlong
    if (c < kSmallest[length] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
      throw_invalid("utf8", "invalid UTF-8: the sequence at byte offset {} encodes no valid character (U+{:04X})", i,
                    static_cast<std::uint32_t>(c));
    out += c;
    i += length;
  }
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  for (char32_t c : text) {
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
      throw_invalid("utf8", "U+{:04X} is not a valid character", static_cast<std::uint32_t>(c));
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

namespace {
// "a" (U+0061), so that a newline or a space in an error is still visible.
std::string show(char32_t c) {
  return fmt::format("\"{}\" (U+{:04X})", encode_utf8(std::u32string(1, c)), static_cast<std::uint32_t>(c));
}
}  // namespace

CharTokenizer::CharTokenizer(std::u32string vocab) : vocab_(std::move(vocab)) {
  std::sort(vocab_.begin(), vocab_.end());
  if (auto twice = std::adjacent_find(vocab_.begin(), vocab_.end()); twice != vocab_.end())
    throw_invalid("CharTokenizer", "the vocabulary lists {} twice", show(*twice));
  if (vocab_.empty()) throw_invalid("CharTokenizer", "the vocabulary is empty (an empty text has no characters)");
}

CharTokenizer CharTokenizer::from_text(std::string_view utf8) {
  std::u32string chars = decode_utf8(utf8);
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return CharTokenizer(std::move(chars));
}

// A vocabulary read from a checkpoint: each entry one character, no character twice, in
// code-point order (ids are positions, so any other order would give other ids).
std::u32string CharTokenizer::checked_vocabulary(const std::vector<std::string>& tokens) {
  std::u32string vocab;
  std::map<char32_t, std::size_t> entry_of;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::u32string c;
    try {
      c = decode_utf8(tokens[i]);
    } catch (const std::invalid_argument& e) {
      throw_invalid("CharTokenizer", "entry {} of the vocabulary is not valid UTF-8: {}", i, e.what());
    }
    if (c.size() != 1)
      throw_invalid("CharTokenizer", "token \"{}\" is not exactly one character (entry {} of the vocabulary)",
                    tokens[i], i);
    if (auto [at, first] = entry_of.try_emplace(c[0], i); !first)
      throw_invalid("CharTokenizer", "the vocabulary lists {} twice (entries {} and {})", show(c[0]), at->second, i);
    if (i > 0 && c[0] < vocab.back())
      throw_invalid("CharTokenizer", "the vocabulary must be sorted by code point; entry {}, {}, comes after {}", i,
                    show(c[0]), show(vocab.back()));
    vocab += c[0];
  }
  return vocab;
}

CharTokenizer::CharTokenizer(const std::vector<std::string>& tokens) : CharTokenizer(checked_vocabulary(tokens)) {}

std::vector<std::int64_t> CharTokenizer::encode(std::string_view utf8) const {
  std::u32string chars = decode_utf8(utf8);
  std::vector<std::int64_t> ids;
  ids.reserve(chars.size());
  std::size_t byte_offset = 0;
  for (char32_t c : chars) {
    auto it = std::lower_bound(vocab_.begin(), vocab_.end(), c);
    if (it == vocab_.end() || *it != c)
      throw_invalid("CharTokenizer", "character '{}' (U+{:04X}) at byte offset {} is not in the vocabulary",
                    encode_utf8(std::u32string(1, c)), static_cast<std::uint32_t>(c), byte_offset);
    ids.push_back(it - vocab_.begin());
    byte_offset += encode_utf8(std::u32string(1, c)).size();
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::u32string chars;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= size())
      throw_invalid("CharTokenizer", "id {} at position {} is outside the vocabulary of {} tokens", ids[i], i, size());
    chars += vocab_[static_cast<std::size_t>(ids[i])];
  }
  return encode_utf8(chars);
}

std::vector<std::string> CharTokenizer::tokens() const {
  std::vector<std::string> out;
  for (char32_t c : vocab_) out.push_back(encode_utf8(std::u32string(1, c)));
  return out;
}

TextDataset::TextDataset(std::vector<std::int64_t> ids, double val_fraction) {
  if (!(val_fraction >= 0 && val_fraction < 1))
    throw_invalid("TextDataset", "val_fraction must be in [0, 1), got {}", val_fraction);
  auto n_train = static_cast<std::ptrdiff_t>(static_cast<double>(ids.size()) * (1 - val_fraction));
  train_.assign(ids.begin(), ids.begin() + n_train);
  val_.assign(ids.begin() + n_train, ids.end());
}

std::int64_t TextDataset::size(Split split) const { return static_cast<std::int64_t>(part(split).size()); }

TextDataset::Batch TextDataset::sample(Split split, std::int64_t batch, std::int64_t block,
                                       Generator& generator) const {
  const auto& ids = part(split);
  auto n = static_cast<std::int64_t>(ids.size());
  if (batch <= 0 || block <= 0)
    throw_invalid("TextDataset", "batch and block must be positive, got {} and {}", batch, block);
  if (n < block + 1)
    throw_invalid("TextDataset", "the {} split has {} tokens, fewer than block + 1 = {}",
                  split == Split::Train ? "training" : "validation", n, block + 1);
  Tensor x = empty({batch, block}, kInt64), y = empty({batch, block}, kInt64);
  auto* px = x.mutable_data_ptr<std::int64_t>();
  auto* py = y.mutable_data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < batch; ++b) {
    // A start in 0 .. n - block - 1, so the target window (one further) still fits.
    auto start = static_cast<std::int64_t>(generator.next_u64() % static_cast<std::uint64_t>(n - block));
    std::copy(ids.begin() + start, ids.begin() + start + block, px + b * block);
    std::copy(ids.begin() + start + 1, ids.begin() + start + block + 1, py + b * block);
  }
  return {x, y};
}

}  // namespace ag::data
