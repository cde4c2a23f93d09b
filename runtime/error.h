// Every misuse throws, never aborts: a test can catch it and a learner can read it.
// Messages start with the op's name and name the shapes or values at fault, e.g.
//   matmul: shapes [2, 3] and [4, 5]: inner dimensions 3 and 4 differ
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ag {

// Bad arguments: shapes, dims, dtypes, values.
template <class... Args>
[[noreturn]] void throw_invalid(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw std::invalid_argument(fmt::format("{}: {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

// A call that is well-formed but not possible in the current state (a released graph, say).
template <class... Args>
[[noreturn]] void throw_state(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw std::runtime_error(fmt::format("{}: {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

// A size that no machine can hold: more bytes than a pointer difference can span, or than this
// machine has memory and swap in all.
template <class... Args>
[[noreturn]] void throw_length(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw std::length_error(fmt::format("{}: {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

// The system refused memory for a size that is possible in principle. A std::bad_alloc, so code
// that handles running out of memory still catches it, but one that says what was asked for.
class OutOfMemoryError : public std::bad_alloc {
 public:
  explicit OutOfMemoryError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// a + b, or a clear error when the sum does not fit in int64.
std::int64_t checked_add(std::string_view op, std::int64_t a, std::int64_t b, std::string_view what);

}  // namespace ag
