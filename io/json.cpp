#include "json.h"

#include <boost/json/basic_parser_impl.hpp>  // the parser's definitions, for the one file that instantiates it
#include <boost/json/value_stack.hpp>

#include <charconv>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "../runtime/error.h"

namespace ag::json {

namespace {

using boost::json::error;
using boost::json::error_code;
using boost::json::string_view;

// Boost's parser reports each piece of the document here; the pieces go onto Boost's
// value_stack, which assembles the value. Two rules Boost 1.81 has no option for are checked on
// the way (docs/reliability.md): it keeps the last of two equal keys without a word, and its
// fast conversion of a number to a double can miss the nearest double by a unit or two.
class Builder {
 public:
  // Boost's own containers' limits: past them the parser stops with an error instead of the
  // value_stack throwing std::length_error.
  static constexpr std::size_t max_object_size = boost::json::object::max_size();
  static constexpr std::size_t max_array_size = boost::json::array::max_size();
  static constexpr std::size_t max_key_size = boost::json::string::max_size();
  static constexpr std::size_t max_string_size = boost::json::string::max_size();

  value release() { return values_.release(); }
  // What a failed check found, or empty when the error is Boost's own.
  const std::string& problem() const { return problem_; }

  bool on_document_begin(error_code&) {
    values_.reset();
    return true;
  }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) {
    keys_.emplace_back();
    return true;
  }
  bool on_object_end(std::size_t n, error_code&) {
    keys_.pop_back();
    values_.push_object(n);
    return true;
  }
  bool on_array_begin(error_code&) { return true; }
  bool on_array_end(std::size_t n, error_code&) {
    values_.push_array(n);
    return true;
  }
  // A long key or string comes in parts; the last call brings the rest.
  bool on_key_part(string_view s, std::size_t, error_code&) {
    key_.append(s);
    values_.push_chars(s);
    return true;
  }
  bool on_key(string_view s, std::size_t, error_code& ec) {
    key_.append(s);  // unescaped, so "a" and "\u0061" are the same key
    if (!keys_.back().insert(key_).second) return fail(ec, fmt::format("duplicate key \"{}\"", key_));
    key_.clear();
    values_.push_key(s);
    return true;
  }
  bool on_string_part(string_view s, std::size_t, error_code&) {
    values_.push_chars(s);
    return true;
  }
  bool on_string(string_view s, std::size_t, error_code&) {
    values_.push_string(s);
    return true;
  }
  bool on_number_part(string_view s, error_code&) {
    number_.append(s);
    return true;
  }
  bool on_int64(std::int64_t n, string_view, error_code&) {
    number_.clear();
    values_.push_int64(n);
    return true;
  }
  bool on_uint64(std::uint64_t n, string_view, error_code&) {
    number_.clear();
    values_.push_uint64(n);
    return true;
  }
  // Boost has checked the number's syntax; from_chars converts its text again, rounding
  // correctly, and says when it is beyond a double's range (Boost would give infinity).
  bool on_double(double, string_view s, error_code& ec) {
    number_.append(s);
    double d = 0;
    if (std::from_chars(number_.data(), number_.data() + number_.size(), d).ec != std::errc())
      return fail(ec, fmt::format("number {} is out of a double's range", number_));
    number_.clear();
    values_.push_double(d);
    return true;
  }
  bool on_bool(bool b, error_code&) {
    values_.push_bool(b);
    return true;
  }
  bool on_null(error_code&) {
    values_.push_null();
    return true;
  }
  // Comments are not allowed (parse_options::allow_comments is off), so these never run.
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

 private:
  bool fail(error_code& ec, std::string problem) {
    problem_ = std::move(problem);
    ec = boost::system::errc::make_error_code(boost::system::errc::invalid_argument);
    return false;
  }

  boost::json::value_stack values_;
  std::vector<std::set<std::string>> keys_;  // the keys seen so far in each open object
  std::string key_, number_;                 // the parts of the current key or number
  std::string problem_;
};

// Boost names the kind of error; for a syntax error, the byte where it stopped says more.
std::string describe(const error_code& ec, std::string_view text, std::size_t at) {
  if (ec == error::incomplete) return "unexpected end of input";
  if (ec == error::too_deep) return "nesting deeper than 64 levels";
  if (ec == error::illegal_leading_surrogate || ec == error::illegal_trailing_surrogate) return "unpaired surrogate";
  if (ec == error::expected_hex_digit) return "invalid \\u escape";
  if (ec == error::exponent_overflow) return "number out of a double's range";
  if (ec != error::syntax || at >= text.size()) return ec.message();
  auto byte = static_cast<unsigned char>(text[at]);
  if (byte < 0x20 || byte == 0x7f) return fmt::format("unexpected control character 0x{:02x}", byte);
  // Inside a string Boost stops only at bytes that are not UTF-8; outside one, at any non-ASCII.
  if (byte >= 0x80) return fmt::format("unexpected byte 0x{:02x} (not valid UTF-8, or outside a string)", byte);
  return fmt::format("unexpected '{}'", static_cast<char>(byte));
}

const char* kind_name(const value& v) {
  switch (v.kind()) {
    case boost::json::kind::null: return "null";
    case boost::json::kind::bool_: return "a boolean";
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_: return "a number";
    case boost::json::kind::string: return "a string";
    case boost::json::kind::array: return "an array";
    case boost::json::kind::object: return "an object";
  }
  return "?";
}

void expect(bool ok, const value& v, std::string_view what, std::string_view wanted) {
  if (!ok) throw_invalid("json", "{} must be {}, got {}", what, wanted, kind_name(v));
}

}  // namespace

value parse(std::string_view text) {
  boost::json::parse_options options;  // no comments, no trailing commas, no invalid UTF-8
  options.max_depth = 64;
  boost::json::basic_parser<Builder> parser(options);
  error_code ec;
  std::size_t end = parser.write_some(false, text.data(), text.size(), ec);
  if (ec) {
    const std::string& problem = parser.handler().problem();
    throw_invalid("json", "{} at byte offset {}", problem.empty() ? describe(ec, text, end) : problem, end);
  }
  if (end != text.size()) throw_invalid("json", "unexpected text after the value at byte offset {}", end);
  return parser.handler().release();
}

bool as_bool(const value& v, std::string_view what) {
  expect(v.is_bool(), v, what, "a boolean");
  return v.get_bool();
}
std::int64_t as_int(const value& v, std::string_view what) {
  expect(v.is_number(), v, what, "an integer");
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return static_cast<std::int64_t>(v.get_uint64());
  throw_invalid("json", "{} must be an integer that fits in int64, got {}", what, serialize(v));
}
double as_double(const value& v, std::string_view what) {
  expect(v.is_number(), v, what, "a number");
  return v.to_number<double>();
}
std::string_view as_string(const value& v, std::string_view what) {
  expect(v.is_string(), v, what, "a string");
  return {v.get_string().data(), v.get_string().size()};
}
const array& as_array(const value& v, std::string_view what) {
  expect(v.is_array(), v, what, "an array");
  return v.get_array();
}
const object& as_object(const value& v, std::string_view what) {
  expect(v.is_object(), v, what, "an object");
  return v.get_object();
}

}  // namespace ag::json
