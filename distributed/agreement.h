// How the ranks check that they agree: the helpers behind check_same and fingerprint (dist.h),
// shared by both builds of distributed/ (internal to it, not installed). Defined in common.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ag::dist::detail {

// The 64-bit FNV-1a hash of n bytes, continuing from `hash` (so several buffers can be hashed
// as one).
std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t hash = 14695981039346656037ull);
// "`what` differs between ranks: rank 0 has 'a', rank r has 'b'; ...", naming the first rank
// that differs from rank 0 and the first line where it does, from every rank's text in rank
// order.
std::string describe_difference(const std::string& what, const std::vector<std::string>& texts);

}  // namespace ag::dist::detail
