// Checks io/json.cpp: strict parsing with byte offsets in errors, and writing back.
#include "../../io/json.h"

#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

TEST(Json, ParsesEveryKind) {
  json::Value v = json::parse(R"( {"a": [1, -2.5e3, true, false, null], "b": "x\"y\u00e9\ud83d\ude00", "c": {}} )");
  const auto& a = v.find("a")->as_array("a");
  EXPECT_EQ(a[0].as_int("n"), 1);
  EXPECT_DOUBLE_EQ(a[1].as_double("n"), -2500.0);
  EXPECT_TRUE(a[2].as_bool("b"));
  EXPECT_TRUE(a[4].is(json::Value::Kind::Null));
  EXPECT_EQ(v.find("b")->as_string("b"), "x\"y\xc3\xa9\xf0\x9f\x98\x80");  // é and U+1F600 as UTF-8
  EXPECT_TRUE(v.find("c")->as_object("c").empty());
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, LargeIntegersStayExact) {
  EXPECT_EQ(json::parse("9007199254740993").as_int("n"), 9007199254740993LL);  // 2^53 + 1: not a double
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("18446744073709551616").as_int("offset"); },
                                                 "json: offset must be an integer that fits in int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("1.5").as_int("size"); }, "size must be an integer"));
}

TEST(Json, DumpRoundTrips) {
  std::string text = R"({"k":"tab\there \"q\" \u0001","n":[1,2.5,-3],"t":true,"z":null})";
  EXPECT_EQ(json::dump(json::parse(text)), text);
}

TEST(Json, ErrorsNameTheOffset) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("{\"a\": 1,}"); },
                                                 "json: expected a string key at byte offset 8"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { json::parse("[1, 2"); }, "json: expected ',' or ']' at byte offset 5"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("[1, "); },
                                                 "json: unexpected end of input at byte offset 4"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { json::parse("{\"a\":1,\"a\":2}"); }, "json: duplicate key \"a\""));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("01"); },
                                                 "unexpected text after the value at byte offset 1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("\"\\ud800\""); }, "unpaired surrogate"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("\"a\nb\""); }, "control character in a string"));
  // JSON text is UTF-8: a string with a stray continuation byte or an overlong form is not JSON.
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("\"a\x80\""); }, "string is not valid UTF-8"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("\"\xc0\xaf\""); }, "string is not valid UTF-8"));
  EXPECT_EQ(json::parse("\"\xe6\xb3\xa8\"").as_string("s"), "\xe6\xb3\xa8");  // U+6CE8, three bytes
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { json::parse(std::string(100, '[')); }, "nesting deeper than 64 levels"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { json::parse("{}").as_array("header"); },
                                                 "json: header must be an array, got an object"));
}

}  // namespace
}  // namespace ag
