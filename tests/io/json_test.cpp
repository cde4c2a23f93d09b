// Checks io/json.cpp: Boost.JSON read strictly, with byte offsets in errors, and writing back.
#include "../../io/json.h"

#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

// Whether parse refuses `text` with an error that contains `message`.
::testing::AssertionResult rejects(const std::string& text, const std::string& message) {
  return throws_with<std::invalid_argument>([&] { json::parse(text); }, message);
}

TEST(Json, ParsesEveryKind) {
  json::value v = json::parse(R"( {"a": [1, -2.5e3, true, false, null], "b": "x\"y\u00e9\ud83d\ude00", "c": {}} )");
  const json::object& o = json::as_object(v, "v");
  const json::array& a = json::as_array(o.at("a"), "a");
  EXPECT_EQ(json::as_int(a[0], "n"), 1);
  EXPECT_DOUBLE_EQ(json::as_double(a[1], "n"), -2500.0);
  EXPECT_TRUE(json::as_bool(a[2], "b"));
  EXPECT_TRUE(a[4].is_null());
  EXPECT_EQ(json::as_string(o.at("b"), "b"), "x\"y\xc3\xa9\xf0\x9f\x98\x80");  // é and U+1F600 as UTF-8
  EXPECT_TRUE(json::as_object(o.at("c"), "c").empty());
  EXPECT_EQ(o.if_contains("missing"), nullptr);
  std::vector<std::string> keys;  // in the order written
  for (const auto& [key, _] : o) keys.emplace_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Json, LargeIntegersStayExact) {
  EXPECT_EQ(json::as_int(json::parse("9007199254740993"), "n"), 9007199254740993LL);  // 2^53 + 1: not a double
  EXPECT_EQ(json::as_int(json::parse("-9223372036854775808"), "n"), INT64_MIN);
  EXPECT_EQ(json::parse("18446744073709551615").as_uint64(), UINT64_MAX);
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::as_int(json::parse("9223372036854775808"), "offset"); },
                                                 "json: offset must be an integer that fits in int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::as_int(json::parse("18446744073709551616"), "offset"); },
                                                 "json: offset must be an integer that fits in int64"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { json::as_int(json::parse("1.5"), "size"); }, "size must be an integer"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::as_int(json::parse("\"7\""), "size"); },
                                                 "json: size must be an integer, got a string"));
}

// Boost 1.81 alone reads the first of these as a neighbour of the nearest double; parse does not.
TEST(Json, DoublesAreCorrectlyRounded) {
  EXPECT_EQ(json::as_double(json::parse("1.3927926388013963e-143"), "x"), 1.3927926388013963e-143);
  EXPECT_EQ(json::as_double(json::parse("0.1"), "x"), 0.1);
  EXPECT_EQ(json::as_double(json::parse("4.9e-324"), "x"), 4.9e-324);  // the smallest subnormal
  EXPECT_TRUE(rejects("1e400", "json: number 1e400 is out of a double's range"));
  EXPECT_TRUE(rejects("[-1E400]", "json: number -1E400 is out of a double's range"));
  EXPECT_TRUE(rejects("1e-400", "json: number 1e-400 is out of a double's range"));
}

TEST(Json, SerializeRoundTrips) {
  // Compact, members in the order given; a double in Boost's exponent form, read back the same.
  std::string text = R"({"k":"tab\there \"q\" \u0001","n":[1,2.5,-3],"t":true,"z":null})";
  std::string written = json::serialize(json::parse(text));
  EXPECT_EQ(written, R"({"k":"tab\there \"q\" \u0001","n":[1,2.5E0,-3],"t":true,"z":null})");
  EXPECT_EQ(json::parse(written), json::parse(text));
  EXPECT_EQ(json::serialize(json::value("\xe6\xb3\xa8\b/")), "\"\xe6\xb3\xa8\\b/\"");  // UTF-8 passes through
}

TEST(Json, ErrorsNameTheOffset) {
  EXPECT_TRUE(rejects("{\"a\": 1,}", "json: unexpected '}' at byte offset 8"));
  EXPECT_TRUE(rejects("[1, 2", "json: unexpected end of input at byte offset 5"));
  EXPECT_TRUE(rejects("[1, ", "json: unexpected end of input at byte offset 4"));
  EXPECT_TRUE(rejects("", "json: unexpected end of input at byte offset 0"));
  EXPECT_TRUE(rejects("{\"a\":1,\"a\":2}", "json: duplicate key \"a\" at byte offset 9"));
  EXPECT_TRUE(rejects("01", "unexpected text after the value at byte offset 1"));
  EXPECT_TRUE(rejects("[1] x", "unexpected text after the value at byte offset 4"));
  EXPECT_TRUE(rejects("\"\\ud800\"", "json: unexpected '\"' at byte offset 7"));  // a high surrogate alone
  EXPECT_TRUE(rejects("\"\\udc00\"", "unpaired surrogate at byte offset 7"));     // a low one alone
  EXPECT_TRUE(rejects("\"\\ud800\\u0041\"", "unpaired surrogate"));
  EXPECT_TRUE(rejects("\"\\u12g4\"", "invalid \\u escape at byte offset 5"));
  EXPECT_TRUE(rejects("\"a\nb\"", "unexpected control character 0x0a at byte offset 2"));
  // JSON text is UTF-8: a string with a stray continuation byte or an overlong form is not JSON.
  EXPECT_TRUE(rejects("\"a\x80\"", "byte 0x80 (not valid UTF-8, or outside a string) at byte offset 2"));
  EXPECT_TRUE(rejects("\"\xc0\xaf\"", "byte 0xc0 (not valid UTF-8, or outside a string) at byte offset 1"));
  EXPECT_TRUE(rejects("\"\xed\xa0\x80\"", "not valid UTF-8"));                       // a surrogate, encoded
  EXPECT_TRUE(rejects("\"\xf4\x90\x80\x80\"", "not valid UTF-8"));                   // past U+10FFFF
  EXPECT_TRUE(rejects("{\"\xff\": 1}", "not valid UTF-8"));                          // keys too
  EXPECT_EQ(json::as_string(json::parse("\"\xe6\xb3\xa8\""), "s"), "\xe6\xb3\xa8");  // U+6CE8, three bytes
  EXPECT_TRUE(rejects(std::string(100, '['), "nesting deeper than 64 levels"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::as_array(json::parse("{}"), "header"); },
                                                 "json: header must be an array, got an object"));
}

// Equal keys are equal after unescaping; the same key in two objects is no duplicate.
TEST(Json, DuplicateKeysAreFoundInEveryObject) {
  EXPECT_TRUE(rejects(R"({"a":1,"\u0061":2})", "duplicate key \"a\""));
  EXPECT_TRUE(rejects(R"({"x":{"a":1,"b":[{"c":1,"c":2}]}})", "duplicate key \"c\""));
  EXPECT_EQ(json::serialize(json::parse(R"({"a":{"x":1},"b":{"x":2},"x":[{"x":3}]})")),
            R"({"a":{"x":1},"b":{"x":2},"x":[{"x":3}]})");
}

// 64 nested arrays or objects read; the 65th is refused where it opens.
TEST(Json, NestingStopsAt64Levels) {
  EXPECT_NO_THROW(json::parse(std::string(64, '[') + std::string(64, ']')));
  EXPECT_TRUE(rejects(std::string(65, '[') + std::string(65, ']'), "nesting deeper than 64 levels at byte offset 64"));
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"k\":";
  EXPECT_TRUE(rejects(objects + "1" + std::string(65, '}'), "nesting deeper than 64 levels"));
}

// Only standard JSON: none of the extensions Boost.JSON can be asked to allow.
TEST(Json, RejectsWhatIsNotStandardJson) {
  EXPECT_EQ(json::as_int(json::parse(" \t\r\n7 \t\r\n"), "n"), 7);  // the four white-space bytes
  EXPECT_TRUE(rejects("\f7", "unexpected control character 0x0c at byte offset 0"));
  EXPECT_TRUE(rejects("[1,]", "unexpected ']' at byte offset 3"));
  EXPECT_TRUE(rejects("/* c */ 1", "unexpected '/' at byte offset 0"));
  EXPECT_TRUE(rejects("[1] // c", "unexpected text after the value at byte offset 4"));
  EXPECT_TRUE(rejects("\xef\xbb\xbf{}", "byte 0xef"));  // no byte-order mark
  EXPECT_TRUE(rejects("[NaN]", "unexpected 'N'"));
  EXPECT_TRUE(rejects("'a'", "unexpected '''"));
  EXPECT_TRUE(rejects("[.5]", "unexpected '.'"));
  EXPECT_TRUE(rejects("[+1]", "unexpected '+'"));
}

}  // namespace
}  // namespace ag
