#include "json.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "../autograd/error.h"
#include "../text/data.h"

namespace ag::json {

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.bool_ = b;
  return v;
}
Value Value::number(std::string text) {
  Value v;
  v.kind_ = Kind::Number;
  v.text_ = std::move(text);
  return v;
}
Value Value::number(std::int64_t n) { return number(std::to_string(n)); }
Value Value::number(double d) {
  if (!std::isfinite(d)) throw_invalid("json", "cannot write the non-finite number {}", d);
  return number(fmt::format("{}", d));
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.text_ = std::move(s);
  return v;
}
Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Array;
  v.items_ = std::move(items);
  return v;
}
Value Value::object(std::vector<std::pair<std::string, Value>> members) {
  Value v;
  v.kind_ = Kind::Object;
  v.members_ = std::move(members);
  return v;
}

namespace {
const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "a boolean";
    case Value::Kind::Number: return "a number";
    case Value::Kind::String: return "a string";
    case Value::Kind::Array: return "an array";
    case Value::Kind::Object: return "an object";
  }
  return "?";
}
}  // namespace

void Value::expect(Kind wanted, std::string_view what, std::string_view wanted_name) const {
  if (kind_ != wanted) throw_invalid("json", "{} must be {}, got {}", what, wanted_name, kind_name(kind_));
}

bool Value::as_bool(std::string_view what) const {
  expect(Kind::Bool, what, "a boolean");
  return bool_;
}
std::int64_t Value::as_int(std::string_view what) const {
  expect(Kind::Number, what, "an integer");
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), n);
  if (ec != std::errc() || end != text_.data() + text_.size())
    throw_invalid("json", "{} must be an integer that fits in int64, got {}", what, text_);
  return n;
}
double Value::as_double(std::string_view what) const {
  expect(Kind::Number, what, "a number");
  return std::stod(text_);
}
const std::string& Value::as_string(std::string_view what) const {
  expect(Kind::String, what, "a string");
  return text_;
}
const std::vector<Value>& Value::as_array(std::string_view what) const {
  expect(Kind::Array, what, "an array");
  return items_;
}
const std::vector<std::pair<std::string, Value>>& Value::as_object(std::string_view what) const {
  expect(Kind::Object, what, "an object");
  return members_;
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

// --- reading ---------------------------------------------------------------------------------

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const { throw_invalid("json", "{} at byte offset {}", what, pos_); }

  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool take(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  Value value(int depth) {
    if (depth > 64) fail("nesting deeper than 64 levels");
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value::string(string());
    if (c == 't') return literal("true"), Value::boolean(true);
    if (c == 'f') return literal("false"), Value::boolean(false);
    if (c == 'n') return literal("null"), Value::null();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(fmt::format("unexpected character '{}'", c));
  }

  Value object(int depth) {
    ++pos_;  // {
    std::vector<std::pair<std::string, Value>> members;
    skip_space();
    if (take('}')) return Value::object(std::move(members));
    while (true) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
      std::string key = string();
      for (const auto& [k, _] : members)
        if (k == key) fail(fmt::format("duplicate key \"{}\"", key));
      skip_space();
      if (!take(':')) fail("expected ':'");
      members.emplace_back(std::move(key), value(depth + 1));
      skip_space();
      if (take('}')) return Value::object(std::move(members));
      if (!take(',')) fail("expected ',' or '}'");
    }
  }

  Value array(int depth) {
    ++pos_;  // [
    std::vector<Value> items;
    skip_space();
    if (take(']')) return Value::array(std::move(items));
    while (true) {
      items.push_back(value(depth + 1));
      skip_space();
      if (take(']')) return Value::array(std::move(items));
      if (!take(',')) fail("expected ',' or ']'");
    }
  }

  Value number() {
    std::size_t start = pos_;
    take('-');
    if (take('0')) {
    } else if (pos_ < s_.size() && s_[pos_] >= '1' && s_[pos_] <= '9') {
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    } else {
      fail("invalid number");
    }
    if (take('.')) {
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) fail("invalid number");
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    if (take('e') || take('E')) {
      if (!take('+')) take('-');
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) fail("invalid number");
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    return Value::number(std::string(s_.substr(start, pos_ - start)));
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("invalid \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    bool non_ascii = false;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') {
        if (non_ascii) {  // JSON text is UTF-8 (RFC 8259); a string must be too
          try {
            data::decode_utf8(out);
          } catch (const std::invalid_argument&) {
            fail("string is not valid UTF-8");
          }
        }
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        non_ascii |= static_cast<unsigned char>(c) >= 0x80;
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          char32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair encodes one code point
            if (!(take('\\') && take('u'))) fail("unpaired surrogate");
            char32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate");
          }
          out += data::encode_utf8(std::u32string(1, cp));
          break;
        }
        default: fail("invalid escape");
      }
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

void write_string(const std::string& s, std::string& out) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        else
          out += c;  // UTF-8 passes through as it is
    }
  }
  out += '"';
}

void write(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::Null: out += "null"; break;
    case Value::Kind::Bool: out += v.as_bool("value") ? "true" : "false"; break;
    case Value::Kind::Number: out += v.number_text(); break;
    case Value::Kind::String: write_string(v.as_string("value"), out); break;
    case Value::Kind::Array: {
      out += '[';
      bool first = true;
      for (const Value& item : v.as_array("value")) {
        if (!first) out += ',';
        first = false;
        write(item, out);
      }
      out += ']';
      break;
    }
    case Value::Kind::Object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.as_object("value")) {
        if (!first) out += ',';
        first = false;
        write_string(key, out);
        out += ':';
        write(item, out);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

Value parse(std::string_view text) { return Parser(text).document(); }

std::string dump(const Value& value) {
  std::string out;
  write(value, out);
  return out;
}

}  // namespace ag::json
