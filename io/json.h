// A small, strict JSON reader and writer: enough for safetensors headers and checkpoint
// metadata. Numbers are kept as their text and read as int64 or double on request, so large
// offsets do not pass through a double.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ag::json {

class Value {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Value() = default;
  static Value null() { return {}; }
  static Value boolean(bool b);
  static Value number(std::string text);  // the number's JSON text
  static Value number(std::int64_t n);
  static Value number(double d);
  static Value string(std::string s);
  static Value array(std::vector<Value> items);
  static Value object(std::vector<std::pair<std::string, Value>> members);  // keeps order

  Kind kind() const { return kind_; }
  bool is(Kind k) const { return kind_ == k; }
  // Typed access; each throws std::invalid_argument naming `what` when the kind differs.
  bool as_bool(std::string_view what) const;
  std::int64_t as_int(std::string_view what) const;  // an integer that fits int64
  double as_double(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  const std::vector<Value>& as_array(std::string_view what) const;
  const std::vector<std::pair<std::string, Value>>& as_object(std::string_view what) const;
  // A number's JSON text, exactly as read or written.
  const std::string& number_text() const { return text_; }
  // The member named `key` of an object, or nullptr.
  const Value* find(std::string_view key) const;

 private:
  void expect(Kind wanted, std::string_view what, std::string_view wanted_name) const;

  Kind kind_ = Kind::Null;
  bool bool_ = false;
  std::string text_;  // number text or string value
  std::vector<Value> items_;
  std::vector<std::pair<std::string, Value>> members_;
};

// Parses exactly one JSON value (surrounding white space allowed). Throws
// std::invalid_argument naming the byte offset of the first problem. Nesting deeper than 64
// levels is rejected (no recursion bomb from a hostile file); duplicate object keys are rejected.
Value parse(std::string_view text);
std::string dump(const Value& value);

}  // namespace ag::json
