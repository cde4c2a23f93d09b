// NumPy's .npy format (io/checkpoint.h), as numpy/lib/format.py defines it:
//
//   "\x93NUMPY"  major  minor  HEADER_LEN  header  data
//   version 1.0: HEADER_LEN is 2 bytes little-endian, the header latin-1;
//   version 2.0: HEADER_LEN is 4 bytes; version 3.0: 4 bytes, the header UTF-8.
//   header: a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//           padded with spaces and ended by '\n' (NumPy pads so the data starts 64-byte aligned).
//
// NumPy reads the header with ast.literal_eval and then asks for a dict with exactly the keys
// 'descr', 'fortran_order' and 'shape', a bool and a tuple of ints. The reader below takes the
// subset of Python's literal syntax that such a dict is written in, by recursive descent:
//
//   header   = dict ' '* '\n'
//   dict     = '{' [entry (',' entry)* [',']] '}'
//   entry    = string ':' value
//   value    = string | 'True' | 'False' | integer | tuple | list
//   tuple    = '(' ')' | '(' integer ',' ')' | '(' integer (',' integer)+ [','] ')'
//   list     = '[' [integer (',' integer)* [',']] ']'      (read only to say it is not a tuple)
//   string   = "'" char* "'" | '"' char* '"'               (no escapes: a header never needs one)
//   integer  = ['-' | '+'] ('0' | [1-9] [0-9]*)
//
// with Python's white space (space, tab, newline, carriage return, form feed) allowed between
// tokens. `(3)` is Python's integer 3 in parentheses, not a tuple, and is refused as NumPy
// refuses it. Whatever NumPy refuses is refused; a few things it takes are refused too (a key
// given twice, which Python silently resolves to the last; hex or underscored integers).
#include <cctype>
#include <cstring>
#include <limits>
#include <optional>

#include "../runtime/error.h"
#include "checkpoint.h"

namespace ag::io {

namespace {

// NumPy's default max_header_size (format.py): a longer header is refused unless trusted.
constexpr std::size_t kMaxNpyHeader = 10000;

// One value of the header's dict.
struct Literal {
  enum Kind { String, Bool, Integer, Tuple, List } kind = String;
  std::string text;                 // String
  bool truth = false;               // Bool
  std::int64_t integer = 0;         // Integer
  std::vector<std::int64_t> items;  // Tuple, List
};

std::string describe(const Literal& v) {
  switch (v.kind) {
    case Literal::String: return fmt::format("the string '{}'", v.text);
    case Literal::Bool: return v.truth ? "True" : "False";
    case Literal::Integer: return fmt::format("the integer {}", v.integer);
    case Literal::Tuple: return fmt::format("the tuple ({})", fmt::join(v.items, ", "));
    case Literal::List: return fmt::format("the list [{}]", fmt::join(v.items, ", "));
  }
  return "?";
}

// A recursive-descent reader of the grammar above. Each function reads one rule starting at
// pos_ (after white space) and leaves pos_ just past it; errors give the byte offset in the header.
class HeaderReader {
 public:
  HeaderReader(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  // header = dict ' '* '\n'
  std::vector<std::pair<std::string, Literal>> header() {
    if (text_.empty() || text_[0] != '{') fail("the header must start with '{' (a Python dict)");
    auto entries = dict();
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;  // the padding
    if (pos_ == text_.size()) fail("the header must end with '\\n' after its padding");
    if (text_[pos_] != '\n') fail("expected only spaces and a final '\\n' after the dict");
    if (pos_ + 1 != text_.size()) fail("the header must end at its '\\n'");
    return entries;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw_invalid(source_, ".npy header, byte {}: {}, found {}", pos_, what, found());
  }
  std::string found() const {
    if (pos_ >= text_.size()) return "the end of the header";
    auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\n') return "'\\n'";
    return c >= 0x20 && c < 0x7f ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("byte 0x{:02x}", c);
  }
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }
  // Skips white space, then takes `c` if it is next.
  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool at(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  // dict = '{' [entry (',' entry)* [',']] '}'
  std::vector<std::pair<std::string, Literal>> dict() {
    take('{');
    std::vector<std::pair<std::string, Literal>> entries;
    while (!take('}')) {
      if (!at('\'') && !at('"')) fail("expected a quoted key or '}'");
      std::string key = string();
      for (const auto& [k, _] : entries)
        if (k == key) fail(fmt::format("the key '{}' is given twice", key));
      if (!take(':')) fail(fmt::format("expected ':' after the key '{}'", key));
      entries.emplace_back(key, value());
      if (!take(',') && !at('}')) fail("expected ',' or '}' after a value");
    }
    return entries;
  }

  // value = string | 'True' | 'False' | integer | tuple | list
  Literal value() {
    skip_space();
    Literal v;
    std::string_view rest = text_.substr(pos_);
    auto word = [&](std::string_view w) {
      return rest.starts_with(w) &&
             (rest.size() == w.size() || !std::isalnum(static_cast<unsigned char>(rest[w.size()])));
    };
    if (at('\'') || at('"')) {
      v.text = string();
    } else if (word("True") || word("False")) {
      v.kind = Literal::Bool;
      v.truth = rest[0] == 'T';
      pos_ += v.truth ? 4 : 5;
    } else if (at('(')) {
      v = parenthesised();
    } else if (at('[')) {
      v.kind = Literal::List;
      take('[');
      while (!take(']')) {
        v.items.push_back(integer());
        if (!take(',') && !at(']')) fail("expected ',' or ']' in a list");
      }
    } else if (at('-') || at('+') || (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])))) {
      v.kind = Literal::Integer;
      v.integer = integer();
    } else {
      fail("expected a value: a quoted string, True, False, an integer or a tuple");
    }
    return v;
  }

  // tuple = '(' ')' | '(' integer ',' ')' | '(' integer (',' integer)+ [','] ')'; and
  // '(' integer ')', which in Python is the integer itself.
  Literal parenthesised() {
    take('(');
    Literal v;
    v.kind = Literal::Tuple;
    if (take(')')) return v;  // ()
    v.items.push_back(integer());
    if (take(')')) {  // (3): no comma, so no tuple
      v.kind = Literal::Integer;
      v.integer = v.items[0];
      v.items.clear();
      return v;
    }
    if (!take(',')) fail("expected ',' or ')' in a tuple");
    while (!take(')')) {
      v.items.push_back(integer());
      if (!take(',') && !at(')')) fail("expected ',' or ')' in a tuple");
    }
    return v;
  }

  // string = "'" char* "'" | '"' char* '"', with no escape sequences
  std::string string() {
    skip_space();
    char quote = text_[pos_++];
    std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail("escape sequences in strings are not read");
      if (text_[pos_] == '\n') fail("a string must end on its line");
      ++pos_;
    }
    if (pos_ == text_.size()) fail("a string is not closed");
    return std::string(text_.substr(begin, pos_++ - begin));
  }

  // integer = ['-' | '+'] ('0' | [1-9] [0-9]*), within int64
  std::int64_t integer() {
    skip_space();
    bool negative = false;
    if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) negative = text_[pos_++] == '-';
    skip_space();  // Python allows "- 3"
    std::size_t begin = pos_;
    std::uint64_t magnitude = 0;
    constexpr std::uint64_t kLimit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
      if (magnitude > (kLimit - digit) / 10) fail("an integer beyond the int64 range");
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (pos_ == begin) fail("expected an integer");
    if (text_[begin] == '0' && pos_ - begin > 1) {
      pos_ = begin;
      fail("an integer with a leading zero (not valid Python)");
    }
    if (pos_ < text_.size() &&
        (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' || text_[pos_] == '.'))
      fail("an integer written in decimal digits only");
    return negative ? -static_cast<std::int64_t>(magnitude) : static_cast<std::int64_t>(magnitude);
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
};

const char* npy_descr(DType d) {
  switch (d) {
    case kFloat32: return "<f4";
    case kFloat64: return "<f8";
    case kInt64: return "<i8";
    case kBool: return "|b1";
  }
  return "?";
}

DType dtype_from_descr(const Literal& descr, std::string_view source) {
  if (descr.kind != Literal::String) throw_invalid(source, "'descr' must be a string, got {}", describe(descr));
  for (DType d : {kFloat32, kFloat64, kInt64, kBool})
    if (descr.text == npy_descr(d)) return d;
  throw_invalid(source, "dtype '{}' is not supported (<f4, <f8, <i8, |b1)", descr.text);
}

Shape shape_from(const Literal& shape, std::string_view source) {
  if (shape.kind != Literal::Tuple)
    throw_invalid(source, "shape must be a tuple such as (), (3,) or (2, 3), got {}", describe(shape));
  for (std::int64_t s : shape.items)
    if (s < 0) throw_invalid(source, "shape entry {} is negative in {}", s, describe(shape));
  return Shape(shape.items.begin(), shape.items.end());
}

struct NpyHeader {
  DType dtype;
  Shape shape;
  std::size_t data_start;  // the byte after the header
};

// The magic, the version, the header's length and the header itself.
NpyHeader read_npy_header(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    throw_invalid(source, "not a .npy file (missing the \\x93NUMPY magic)");
  unsigned major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    throw_invalid(source, "unsupported .npy version {}.{} (NumPy writes 1.0, 2.0 and 3.0)", major, minor);
  std::size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    start = 10;
  } else {
    if (bytes.size() < 12) throw_invalid(source, "truncated header");
    std::uint32_t n = 0;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_len = n;
    start = 12;
  }
  if (header_len > bytes.size() - start)
    throw_invalid(source, "header length {} is larger than the {} bytes that follow it", header_len,
                  bytes.size() - start);
  if (header_len > kMaxNpyHeader)
    throw_invalid(source, "header length {} is over the {} bytes NumPy reads without trusting the file", header_len,
                  kMaxNpyHeader);
  std::optional<Literal> descr, fortran_order, shape;
  for (auto& [key, value] : HeaderReader(bytes.substr(start, header_len), source).header()) {
    if (key == "descr")
      descr = value;
    else if (key == "fortran_order")
      fortran_order = value;
    else if (key == "shape")
      shape = value;
    else
      throw_invalid(source, "header has an unknown key '{}'; it holds exactly 'descr', 'fortran_order' and 'shape'",
                    key);
  }
  if (!descr) throw_invalid(source, "header has no 'descr' entry");
  if (!fortran_order) throw_invalid(source, "header has no 'fortran_order' entry");
  if (!shape) throw_invalid(source, "header has no 'shape' entry");
  NpyHeader h{dtype_from_descr(*descr, source), {}, start + header_len};
  if (fortran_order->kind != Literal::Bool)
    throw_invalid(source, "'fortran_order' must be True or False, got {}", describe(*fortran_order));
  if (fortran_order->truth) throw_invalid(source, "Fortran-ordered arrays are not supported");
  h.shape = shape_from(*shape, source);
  return h;
}

std::size_t nbytes(const Tensor& t) { return static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()); }

}  // namespace

std::string npy_bytes(const Tensor& t) {
  std::string shape = fmt::format("{}", fmt::join(t.shape(), ", "));
  if (t.dim() == 1) shape += ',';  // Python's one-element tuple: (4,)
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", npy_descr(t.dtype()), shape);
  std::size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');  // the data starts 64-byte aligned, as NumPy writes it
  dict += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  auto len = static_cast<std::uint16_t>(dict.size());
  bytes.append(reinterpret_cast<const char*>(&len), 2);
  bytes += dict;
  bytes.append(static_cast<const char*>(t.raw_data()), nbytes(t));
  return bytes;
}

void save_npy(const std::string& path, const Tensor& t) { write_file_atomically(path, npy_bytes(t)); }

Tensor parse_npy(std::string_view bytes, std::string_view source) {
  NpyHeader h = read_npy_header(bytes, source);
  // The byte count is checked against the file before anything is allocated.
  std::int64_t numel = 0;
  try {
    numel = shape_numel(h.shape, "shape");
  } catch (const std::invalid_argument&) {
    throw_invalid(source, "shape {} has an element count that overflows", shape_str(h.shape));
  }
  std::string_view data = bytes.substr(h.data_start);
  auto n = static_cast<std::uint64_t>(numel), size = static_cast<std::uint64_t>(dtype_size(h.dtype));
  bool fits = n <= std::numeric_limits<std::uint64_t>::max() / size;
  if (!fits || n * size != data.size())
    throw_invalid(source, "shape {} of {} needs {} bytes of data, the file has {}", shape_str(h.shape),
                  dtype_name(h.dtype), fits ? fmt::format("{}", n * size) : fmt::format("{} x {}", n, size),
                  data.size());
  if (h.dtype == kBool)
    for (char c : data)
      if (c != 0 && c != 1) throw_invalid(source, "a bool byte is neither 0 nor 1");
  Tensor t = empty(h.shape, h.dtype);
  if (!data.empty()) std::memcpy(t.mutable_raw_data(), data.data(), data.size());
  return t;
}

Tensor load_npy(const std::string& path) { return parse_npy(read_file(path), path); }

}  // namespace ag::io
