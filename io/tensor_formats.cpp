// The two tensor file formats (io/checkpoint.h): safetensors and NumPy's .npy, each written
// whole and read with every byte of the header checked before any tensor is built.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <set>

#include "../autograd/error.h"
#include "checkpoint.h"
#include "json.h"

namespace ag::io {

static_assert(std::endian::native == std::endian::little, "the file formats here are little-endian");

const Tensor* TensorFile::find(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

// --- safetensors -------------------------------------------------------------------------------

namespace {

const char* safetensors_dtype(DType d) {
  switch (d) {
    case kFloat32: return "F32";
    case kFloat64: return "F64";
    case kInt64: return "I64";
    case kBool: return "BOOL";
  }
  return "?";
}

DType dtype_from_safetensors(std::string_view s, std::string_view source, const std::string& name) {
  if (s == "F32") return kFloat32;
  if (s == "F64") return kFloat64;
  if (s == "I64") return kInt64;
  if (s == "BOOL") return kBool;
  throw_invalid(source, "tensor '{}' has dtype \"{}\"; supported: F32, F64, I64, BOOL", name, s);
}

std::size_t nbytes(const Tensor& t) { return static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()); }

}  // namespace

void save_safetensors(const std::string& path, const std::vector<nn::NamedTensor>& tensors, const Metadata& metadata) {
  json::object header;  // written in insertion order: the metadata, then the tensors in data order
  if (!metadata.empty()) {
    json::object meta;
    for (const auto& [k, v] : metadata) meta.emplace(k, v);
    header.emplace("__metadata__", std::move(meta));
  }
  std::set<std::string> names;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      throw_invalid("save_safetensors", "tensor name '{}' is reserved or repeated", name);
    std::size_t end = offset + nbytes(t);
    header.emplace(name, json::object{{"dtype", safetensors_dtype(t.dtype())},
                                      {"shape", json::array(t.shape().begin(), t.shape().end())},
                                      {"data_offsets", {offset, end}}});
    offset = end;
  }
  std::string text = json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  std::string bytes(8, '\0');
  std::uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += text;
  for (const auto& [_, t] : tensors) bytes.append(static_cast<const char*>(t.raw_data()), nbytes(t));
  write_file_atomically(path, bytes);
}

TensorFile parse_safetensors(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 8)
    throw_invalid(source, "file has {} bytes, too short for the 8-byte header length", bytes.size());
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len == 0) throw_invalid(source, "header length is 0");
  if (header_len > bytes.size() - 8)
    throw_invalid(source, "header length {} is larger than the {} bytes that follow it", header_len, bytes.size() - 8);
  json::value header;
  try {
    header = json::parse(bytes.substr(8, header_len));
  } catch (const std::invalid_argument& e) {
    throw_invalid(source, "header is not valid JSON: {}", e.what());
  }
  std::string_view data = bytes.substr(8 + header_len);
  if (!header.is_object()) throw_invalid(source, "header must be a JSON object");

  TensorFile file;
  struct Range {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  std::vector<std::pair<std::string, Tensor>> unordered;
  for (const auto& [key, entry] : header.get_object()) {
    std::string name(key);
    if (name == "__metadata__") {
      for (const auto& [k, v] : json::as_object(entry, fmt::format("{}: __metadata__", source)))
        file.metadata[std::string(k)] =
            json::as_string(v, fmt::format("{}: __metadata__ value '{}'", source, std::string_view(k)));
      continue;
    }
    std::string what = fmt::format("{}: tensor '{}'", source, name);
    if (!entry.is_object()) throw_invalid(source, "entry '{}' must be an object", name);
    const json::object& fields = entry.get_object();
    const json::value* dtype = fields.if_contains("dtype");
    const json::value* shape = fields.if_contains("shape");
    const json::value* offsets = fields.if_contains("data_offsets");
    if (!dtype || !shape || !offsets || fields.size() != 3)
      throw_invalid(source, "tensor '{}' needs exactly \"dtype\", \"shape\" and \"data_offsets\"", name);
    DType dt = dtype_from_safetensors(json::as_string(*dtype, what + " dtype"), source, name);
    Shape dims;
    for (const json::value& d : json::as_array(*shape, what + " shape")) {
      std::int64_t s = json::as_int(d, what + " shape entry");
      if (s < 0) throw_invalid(source, "tensor '{}' has a negative size in its shape", name);
      dims.push_back(s);
    }
    std::int64_t numel = 0;
    try {
      numel = shape_numel(dims, "shape");
    } catch (const std::invalid_argument&) {
      throw_invalid(source, "tensor '{}' has shape {} whose element count overflows", name, shape_str(dims));
    }
    const json::array& off = json::as_array(*offsets, what + " data_offsets");
    if (off.size() != 2) throw_invalid(source, "tensor '{}' data_offsets must be [begin, end]", name);
    std::int64_t begin = json::as_int(off[0], what + " begin"), end = json::as_int(off[1], what + " end");
    if (begin < 0 || end < begin || static_cast<std::uint64_t>(end) > data.size())
      throw_invalid(source, "tensor '{}' data_offsets [{}, {}] fall outside the {} bytes of data", name, begin, end,
                    data.size());
    if (static_cast<std::uint64_t>(numel) > std::numeric_limits<std::uint64_t>::max() / dtype_size(dt) ||
        static_cast<std::uint64_t>(end - begin) != static_cast<std::uint64_t>(numel) * dtype_size(dt))
      throw_invalid(source, "tensor '{}' is {} {} ({} bytes) but its data_offsets span {} bytes", name, dtype_name(dt),
                    shape_str(dims), static_cast<std::uint64_t>(numel) * dtype_size(dt), end - begin);
    Tensor t = empty(dims, dt);
    if (end > begin) std::memcpy(t.raw_data(), data.data() + begin, static_cast<std::size_t>(end - begin));
    if (dt == kBool)
      for (std::int64_t i = 0; i < numel; ++i)
        if (static_cast<unsigned char>(data[static_cast<std::size_t>(begin + i)]) > 1)
          throw_invalid(source, "tensor '{}' holds a BOOL byte that is neither 0 nor 1", name);
    ranges.push_back({static_cast<std::uint64_t>(begin), static_cast<std::uint64_t>(end), name});
    unordered.emplace_back(name, t);
  }
  // The data section must be covered exactly: sorted ranges, each starting where the last ended.
  std::vector<std::size_t> order(ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    return ranges[a].begin != ranges[b].begin ? ranges[a].begin < ranges[b].begin : ranges[a].end < ranges[b].end;
  });
  std::uint64_t expected = 0;
  for (std::size_t i : order) {
    if (ranges[i].begin != expected)
      throw_invalid(source, "tensor '{}' starts at byte {} but the previous tensor ends at byte {} (overlap or gap)",
                    ranges[i].name, ranges[i].begin, expected);
    expected = ranges[i].end;
    file.tensors.push_back(unordered[i]);
  }
  if (expected != data.size())
    throw_invalid(source, "{} bytes of data follow the last tensor, which ends at byte {}", data.size() - expected,
                  expected);
  return file;
}

TensorFile load_safetensors(const std::string& path) { return parse_safetensors(read_file(path), path); }

// --- .npy ----------------------------------------------------------------------------------------
// Version 1.0: "\x93NUMPY", 1, 0, a 2-byte little-endian header length, then a Python dict
// literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces and a newline so the data starts 64-byte aligned.

namespace {
const char* npy_descr(DType d) {
  switch (d) {
    case kFloat32: return "<f4";
    case kFloat64: return "<f8";
    case kInt64: return "<i8";
    case kBool: return "|b1";
  }
  return "?";
}
}  // namespace

void save_npy(const std::string& path, const Tensor& t) {
  std::string shape = fmt::format("{}", fmt::join(t.shape(), ", "));
  if (t.dim() == 1) shape += ',';  // Python's one-element tuple: (4,)
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", npy_descr(t.dtype()), shape);
  std::size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  auto len = static_cast<std::uint16_t>(dict.size());
  bytes.append(reinterpret_cast<const char*>(&len), 2);
  bytes += dict;
  bytes.append(static_cast<const char*>(t.raw_data()), nbytes(t));
  write_file_atomically(path, bytes);
}

Tensor parse_npy(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    throw_invalid(source, "not a .npy file (missing the \\x93NUMPY magic)");
  unsigned major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw_invalid(source, "truncated header");
    std::uint32_t n = 0;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_len = n;
    start = 12;
  } else {
    throw_invalid(source, "unsupported .npy version {}", major);
  }
  if (header_len > bytes.size() - start)
    throw_invalid(source, "header length {} is larger than the {} bytes that follow it", header_len,
                  bytes.size() - start);
  std::string_view dict = bytes.substr(start, header_len);
  auto field = [&](std::string_view key) {
    auto at = dict.find(fmt::format("'{}':", key));
    if (at == std::string_view::npos) throw_invalid(source, "header has no '{}' entry", key);
    std::string_view rest = dict.substr(at + key.size() + 3);
    std::size_t value = rest.find_first_not_of(' ');
    return value == std::string_view::npos ? std::string_view() : rest.substr(value);
  };
  std::string_view descr = field("descr");
  DType dtype;
  if (descr.starts_with("'<f4'"))
    dtype = kFloat32;
  else if (descr.starts_with("'<f8'"))
    dtype = kFloat64;
  else if (descr.starts_with("'<i8'"))
    dtype = kInt64;
  else if (descr.starts_with("'|b1'"))
    dtype = kBool;
  else
    throw_invalid(source, "dtype {} is not supported (<f4, <f8, <i8, |b1)", descr.substr(0, descr.find(',')));
  if (!field("fortran_order").starts_with("False")) throw_invalid(source, "Fortran-ordered arrays are not supported");
  std::string_view shape_text = field("shape");
  if (shape_text.empty() || shape_text[0] != '(' || shape_text.find(')') == std::string_view::npos)
    throw_invalid(source, "shape must be a tuple");
  shape_text = shape_text.substr(1, shape_text.find(')') - 1);
  Shape shape;
  for (std::size_t i = 0; i < shape_text.size();) {
    while (i < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i >= shape_text.size()) break;
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(shape_text.data() + i, shape_text.data() + shape_text.size(), v);
    if (ec != std::errc() || v < 0) throw_invalid(source, "shape entry is not a non-negative integer");
    shape.push_back(v);
    i = static_cast<std::size_t>(end - shape_text.data());
  }
  // The byte count is checked against the file before anything is allocated.
  std::int64_t numel = 0;
  try {
    numel = shape_numel(shape, "shape");
  } catch (const std::invalid_argument&) {
    throw_invalid(source, "shape {} has an element count that overflows", shape_str(shape));
  }
  std::string_view data = bytes.substr(start + header_len);
  auto n = static_cast<std::uint64_t>(numel), size = static_cast<std::uint64_t>(dtype_size(dtype));
  bool fits = n <= std::numeric_limits<std::uint64_t>::max() / size;
  if (!fits || n * size != data.size())
    throw_invalid(source, "shape {} of {} needs {} bytes of data, the file has {}", shape_str(shape), dtype_name(dtype),
                  fits ? fmt::format("{}", n * size) : fmt::format("{} x {}", n, size), data.size());
  if (dtype == kBool)
    for (char c : data)
      if (c != 0 && c != 1) throw_invalid(source, "a bool byte is neither 0 nor 1");
  Tensor t = empty(shape, dtype);
  if (!data.empty()) std::memcpy(t.raw_data(), data.data(), data.size());
  return t;
}

Tensor load_npy(const std::string& path) { return parse_npy(read_file(path), path); }

}  // namespace ag::io
