#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "agreement.h"
#include "dist.h"
#include "launch.h"

namespace ag::dist {

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}
}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (int n = env_int(name); n > 0) return n;
  return 1;
}

std::uint64_t detail::fnv1a(const void* data, std::size_t n, std::uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

std::string detail::describe_difference(const std::string& what, const std::vector<std::string>& texts) {
  for (std::size_t r = 1; r < texts.size(); ++r) {
    if (texts[r] == texts[0]) continue;
    std::istringstream a(texts[0]), b(texts[r]);
    std::string la, lb;
    for (int line = 1;; ++line) {
      bool more_a = static_cast<bool>(std::getline(a, la)), more_b = static_cast<bool>(std::getline(b, lb));
      if (!more_a) la = "(nothing)";
      if (!more_b) lb = "(nothing)";
      if (la != lb || !more_a || !more_b)
        return fmt::format(
            "{} differs between ranks: rank 0 has '{}', rank {} has '{}'; every process of one run "
            "must be started with the same options and data",
            what, la, r, lb);
    }
  }
  return what + " differs between ranks";
}

std::uint64_t fingerprint(const std::vector<Tensor>& tensors) {
  std::uint64_t hash = detail::fnv1a(nullptr, 0);
  for (const Tensor& t : tensors)
    hash = detail::fnv1a(t.raw_data(), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()), hash);
  return hash;
}

std::uint64_t fingerprint(const std::string& bytes) { return detail::fnv1a(bytes.data(), bytes.size()); }

}  // namespace ag::dist
