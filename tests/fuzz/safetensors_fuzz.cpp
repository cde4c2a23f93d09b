// libFuzzer target: the safetensors reader on arbitrary bytes. Any input must either parse into
// tensors that match the header's promises or be refused with std::invalid_argument; and what
// it accepts the writer must take and write back to the same tensors and metadata. A crash, a
// leak, another exception or an allocation larger than the input is a finding.
#include <attograd/attograd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ag::io::TensorFile file;
  try {
    file = ag::io::parse_safetensors(bytes, "fuzz");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  std::size_t total = 0;
  for (const auto& [name, t] : file.tensors) total += static_cast<std::size_t>(t.numel()) * ag::dtype_size(t.dtype());
  if (total > size) std::abort();  // more tensor bytes than the file holds
  // Everything the reader accepts, the writer takes (it refuses only what the reader would).
  ag::io::TensorFile back =
      ag::io::parse_safetensors(ag::io::safetensors_bytes(file.tensors, file.metadata), "fuzz (written again)");
  if (back.metadata != file.metadata || back.tensors.size() != file.tensors.size()) std::abort();
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    const ag::Tensor &a = file.tensors[i].second, &b = back.tensors[i].second;
    if (back.tensors[i].first != file.tensors[i].first || a.dtype() != b.dtype() || a.shape() != b.shape())
      std::abort();
    std::size_t n = static_cast<std::size_t>(a.numel()) * ag::dtype_size(a.dtype());
    if (n > 0 && std::memcmp(a.raw_data(), b.raw_data(), n) != 0) std::abort();
  }
  return 0;
}
