// libFuzzer target: the .npy reader on arbitrary bytes. It must return a tensor no larger than
// the input or throw std::invalid_argument; anything else is a finding.
#include <attograd/attograd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    ag::Tensor t = ag::io::parse_npy(bytes, "fuzz");
    if (static_cast<std::size_t>(t.numel()) * ag::dtype_size(t.dtype()) > size) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
