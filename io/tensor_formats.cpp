// The safetensors format (io/checkpoint.h), written whole and read with every byte of the header
// checked before any tensor is built. NumPy's .npy is in io/npy.cpp.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <set>

#include "../runtime/error.h"
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

namespace {

// What the reader (and Hugging Face's) refuses, the writer refuses too, naming the entry:
// strings that are not UTF-8 (JSON holds only UTF-8) and a header over kMaxHeaderBytes.
void check_utf8(const std::string& text, std::string_view what) {
  try {
    data::decode_utf8(text);
  } catch (const std::invalid_argument& e) {
    throw_invalid("save_safetensors", "{} is not valid UTF-8, which a safetensors header cannot hold: {}", what,
                  e.what());
  }
}

}  // namespace

std::string safetensors_bytes(const std::vector<nn::NamedTensor>& tensors, const Metadata& metadata) {
  json::object header;  // written in insertion order: the metadata, then the tensors in data order
  if (!metadata.empty()) {
    json::object meta;
    for (const auto& [k, v] : metadata) {
      check_utf8(k, fmt::format("metadata key '{}'", k));
      check_utf8(v, fmt::format("the value of metadata key '{}'", k));
      meta.emplace(k, v);
    }
    header.emplace("__metadata__", std::move(meta));
  }
  std::set<std::string> names;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      throw_invalid("save_safetensors", "tensor name '{}' is reserved or repeated", name);
    check_utf8(name, fmt::format("tensor name '{}'", name));
    std::size_t end = offset + nbytes(t);
    header.emplace(name, json::object{{"dtype", safetensors_dtype(t.dtype())},
                                      {"shape", json::array(t.shape().begin(), t.shape().end())},
                                      {"data_offsets", {offset, end}}});
    offset = end;
  }
  std::string text = json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  if (text.size() > kMaxHeaderBytes) {
    // Name the largest metadata entry: that is almost always the one to blame.
    auto largest = std::max_element(metadata.begin(), metadata.end(), [](const auto& a, const auto& b) {
      return a.first.size() + a.second.size() < b.first.size() + b.second.size();
    });
    throw_invalid("save_safetensors", "the header would be {} bytes, over the {} that readers accept{}", text.size(),
                  kMaxHeaderBytes,
                  largest == metadata.end()
                      ? std::string()
                      : fmt::format("; the largest metadata entry is '{}' ({} bytes)", largest->first,
                                    largest->first.size() + largest->second.size()));
  }
  std::string bytes(8, '\0');
  std::uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += text;
  for (const auto& [_, t] : tensors) bytes.append(static_cast<const char*>(t.raw_data()), nbytes(t));
  return bytes;
}

void save_safetensors(const std::string& path, const std::vector<nn::NamedTensor>& tensors, const Metadata& metadata) {
  write_file_atomically(path, safetensors_bytes(tensors, metadata));
}

TensorFile parse_safetensors(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 8)
    throw_invalid(source, "file has {} bytes, too short for the 8-byte header length", bytes.size());
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len == 0) throw_invalid(source, "header length is 0");
  if (header_len > bytes.size() - 8)
    throw_invalid(source, "header length {} is larger than the {} bytes that follow it", header_len, bytes.size() - 8);
  if (header_len > kMaxHeaderBytes)
    throw_invalid(source, "header length {} is over the {}-byte limit of the format's readers", header_len,
                  kMaxHeaderBytes);
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
    // A shape whose byte count passes 2^64 is said so, not printed as its product wrapped around.
    const bool too_many_bytes =
        static_cast<std::uint64_t>(numel) > std::numeric_limits<std::uint64_t>::max() / dtype_size(dt);
    if (too_many_bytes || static_cast<std::uint64_t>(end - begin) != static_cast<std::uint64_t>(numel) * dtype_size(dt))
      throw_invalid(source, "tensor '{}' is {} {} ({}) but its data_offsets span {} bytes", name, dtype_name(dt),
                    shape_str(dims),
                    too_many_bytes ? fmt::format("{} elements of {} bytes, more than 2^64 bytes", numel, dtype_size(dt))
                                   : fmt::format("{} bytes", static_cast<std::uint64_t>(numel) * dtype_size(dt)),
                    end - begin);
    Tensor t = empty(dims, dt);
    if (end > begin) std::memcpy(t.mutable_raw_data(), data.data() + begin, static_cast<std::size_t>(end - begin));
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

}  // namespace ag::io
