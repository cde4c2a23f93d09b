// libFuzzer target: the safetensors reader on arbitrary bytes. Any input must either parse into
// tensors that match the header's promises or be refused with std::invalid_argument; a crash,
// a leak, another exception or an allocation larger than the input is a finding.
#include <attograd/attograd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    ag::io::TensorFile file = ag::io::parse_safetensors(bytes, "fuzz");
    std::size_t total = 0;
    for (const auto& [name, t] : file.tensors) total += static_cast<std::size_t>(t.numel()) * ag::dtype_size(t.dtype());
    if (total > size) std::abort();  // more tensor bytes than the file holds
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
