// libFuzzer target: the UTF-8 decoder and the character tokenizer on arbitrary bytes. Valid
// UTF-8 must survive decode -> encode and tokenize -> detokenize unchanged; invalid UTF-8 must be
// refused with std::invalid_argument by both. A list of tokens makes a vocabulary exactly when
// it is sorted and has no character twice.
#include <attograd/attograd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::u32string chars;
  try {
    chars = ag::data::decode_utf8(text);
  } catch (const std::invalid_argument&) {
    try {
      ag::data::CharTokenizer::from_text(text);
    } catch (const std::invalid_argument&) {
      return 0;
    }
    std::abort();  // the tokenizer took text the decoder refused
  }
  if (ag::data::encode_utf8(chars) != text) std::abort();
  if (chars.empty()) return 0;
  auto tokenizer = ag::data::CharTokenizer::from_text(text);
  std::vector<std::int64_t> ids = tokenizer.encode(text);
  if (ids.size() != chars.size()) std::abort();
  for (std::int64_t id : ids)
    if (id < 0 || id >= tokenizer.size()) std::abort();
  if (tokenizer.decode(ids) != text) std::abort();
  // Its vocabulary, as a checkpoint stores it, makes the same tokenizer again; the text's own
  // characters in text order make one only if they are already sorted and distinct.
  if (ag::data::CharTokenizer(tokenizer.tokens()).tokens() != tokenizer.tokens()) std::abort();
  std::vector<std::string> in_order;
  for (char32_t c : chars) in_order.push_back(ag::data::encode_utf8(std::u32string(1, c)));
  bool sorted_distinct = std::adjacent_find(chars.begin(), chars.end(), std::greater_equal<>()) == chars.end();
  try {
    ag::data::CharTokenizer again(in_order);
    if (!sorted_distinct) std::abort();
  } catch (const std::invalid_argument&) {
    if (sorted_distinct) std::abort();
  }
  return 0;
}
