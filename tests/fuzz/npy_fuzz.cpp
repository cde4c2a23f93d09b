// libFuzzer target: the .npy reader on arbitrary bytes. It must return a tensor no larger than
// the input or throw std::invalid_argument; and whatever it accepts must survive the writer:
// npy_bytes of the tensor, read again, gives the same dtype, shape and bytes. Anything else is
// a finding.
#include <attograd/attograd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ag::Tensor t;
  try {
    t = ag::io::parse_npy(bytes, "fuzz");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  std::size_t n = static_cast<std::size_t>(t.numel()) * ag::dtype_size(t.dtype());
  if (n > size) std::abort();
  std::string written = ag::io::npy_bytes(t);
  ag::Tensor back = ag::io::parse_npy(written, "fuzz (written again)");  // throwing here is a finding too
  if (back.dtype() != t.dtype() || back.shape() != t.shape()) std::abort();
  if (n > 0 && std::memcmp(back.raw_data(), t.raw_data(), n) != 0) std::abort();
  if ((written.size() - n) % 64 != 0) std::abort();  // the data starts 64-byte aligned
  return 0;
}
