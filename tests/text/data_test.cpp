// Checks text/data.cpp: UTF-8, the character tokenizer, and the window loader.
#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

TEST(Utf8, DecodesAndRejectsMalformedInput) {
  EXPECT_EQ(data::decode_utf8("a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"),
            (std::u32string{U'a', U'\u00e9', U'\u4e2d', U'\U0001F600'}));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::decode_utf8("ab\xff"); },
                                                 "invalid UTF-8: byte 0xff at byte offset 2 cannot start a character"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::decode_utf8("a\xe4\xb8"); },
                                                 "the character at byte offset 1 is cut off by the end of the text"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        data::decode_utf8(
            "\xe4"
            "a"
            "\xad");
      },
      "byte 0x61 at byte offset 1 should continue a character"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::decode_utf8("\xc0\xaf"); },  // overlong '/'
                                                 "the sequence at byte offset 0 encodes no valid character"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::decode_utf8("\xed\xa0\x80"); },  // a surrogate
                                                 "encodes no valid character (U+D800)"));
}

TEST(CharTokenizer, RoundTripsMixedEnglishAndChinese) {
  std::string text = "Attention is all you need. 注意力就是你所需要的。\n床前明月光";
  auto tok = data::CharTokenizer::from_text(text);
  std::vector<std::int64_t> ids = tok.encode(text);
  EXPECT_EQ(ids.size(), data::decode_utf8(text).size());  // one id per character, not per byte
  EXPECT_EQ(tok.decode(ids), text);
  // Ids follow code-point order: '\n' (U+000A) first, '。' (U+3002) before the CJK ideographs.
  EXPECT_EQ(tok.tokens().front(), "\n");
  EXPECT_EQ(tok.encode("\n")[0], 0);
  // A vocabulary saved as its token list comes back identical.
  data::CharTokenizer again(tok.tokens());
  EXPECT_EQ(again.encode(text), ids);
}

TEST(CharTokenizer, Errors) {
  auto tok = data::CharTokenizer::from_text("abc 中");
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { tok.encode("ab 文"); },
      "CharTokenizer: character '文' (U+6587) at byte offset 3 is not in the vocabulary"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        tok.decode({0, 9});
      },
      "CharTokenizer: id 9 at position 1 is outside the vocabulary of 5 tokens"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { tok.encode("a\x80"); }, "invalid UTF-8: byte 0x80 at byte offset 1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        data::CharTokenizer(std::vector<std::string>{"b", "a"});
      },
      "CharTokenizer: the vocabulary must be sorted by code point"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::CharTokenizer(std::vector<std::string>{"ab"}); },
                                                 "CharTokenizer: token \"ab\" is not exactly one character"));
}

// A vocabulary read from a checkpoint: each error names the entry at fault and shows the
// character with its code point, so a newline or a space is visible.
TEST(CharTokenizer, VocabularyErrorsNameTheEntry) {
  auto refuses = [](std::vector<std::string> tokens, const std::string& message) {
    return throws_with<std::invalid_argument>([&] { data::CharTokenizer{tokens}; }, message);
  };
  EXPECT_TRUE(
      refuses({"\n", " ", " ", "a"}, "CharTokenizer: the vocabulary lists \" \" (U+0020) twice (entries 1 and 2)"));
  EXPECT_TRUE(refuses({"a", "b", "a"}, "the vocabulary lists \"a\" (U+0061) twice (entries 0 and 2)"));
  EXPECT_TRUE(
      refuses({"a", "c", "b"},
              "the vocabulary must be sorted by code point; entry 2, \"b\" (U+0062), comes after \"c\" (U+0063)"));
  EXPECT_TRUE(refuses({"中", "a"}, "entry 1, \"a\" (U+0061), comes after \"中\" (U+4E2D)"));
  EXPECT_TRUE(refuses({"a", "xy"}, "token \"xy\" is not exactly one character (entry 1 of the vocabulary)"));
  EXPECT_TRUE(refuses({"a", ""}, "token \"\" is not exactly one character (entry 1 of the vocabulary)"));
  EXPECT_TRUE(refuses({"a", "\xff"}, "entry 1 of the vocabulary is not valid UTF-8: utf8: invalid UTF-8: byte 0xff"));
  EXPECT_TRUE(refuses({}, "CharTokenizer: the vocabulary is empty"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { data::CharTokenizer::from_text(""); },
                                         "CharTokenizer: the vocabulary is empty (an empty text has no characters)"));
  EXPECT_EQ(data::CharTokenizer(std::vector<std::string>{"\n", " ", "a", "中"}).size(), 4);
}

TEST(TextDataset, WindowsAreShiftedPairsFromTheRightSplit) {
  std::vector<std::int64_t> ids(100);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  data::TextDataset ds(ids, 0.2);
  EXPECT_EQ(ds.size(data::TextDataset::Split::Train), 80);
  EXPECT_EQ(ds.size(data::TextDataset::Split::Validation), 20);
  Generator gen(1);
  auto batch = ds.sample(data::TextDataset::Split::Validation, 16, 8, gen);
  EXPECT_EQ(batch.x.shape(), (Shape{16, 8}));
  const auto* x = batch.x.data_ptr<std::int64_t>();
  const auto* y = batch.y.data_ptr<std::int64_t>();
  for (int i = 0; i < 16 * 8; ++i) {
    EXPECT_EQ(y[i], x[i] + 1);  // the target is the next token
    EXPECT_GE(x[i], 80);        // drawn from the validation part only
    EXPECT_LT(y[i], 100);
  }
  for (int b = 0; b < 16; ++b)
    for (int t = 1; t < 8; ++t) EXPECT_EQ(x[b * 8 + t], x[b * 8 + t - 1] + 1);  // contiguous windows
  // Same seed, same batch.
  Generator g1(7), g2(7);
  EXPECT_EQ(ds.sample(data::TextDataset::Split::Train, 4, 5, g1).x.to_vector<std::int64_t>(),
            ds.sample(data::TextDataset::Split::Train, 4, 5, g2).x.to_vector<std::int64_t>());
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { ds.sample(data::TextDataset::Split::Validation, 1, 20, gen); },
                                         "TextDataset: the validation split has 20 tokens, fewer than block + 1 = 21"));
}

}  // namespace
}  // namespace ag
