// Every misuse throws, never aborts: a test can catch it and a learner can read it.
// Messages start with the op's name and name the shapes or values at fault, e.g.
//   matmul: shapes [2, 3] and [4, 5]: inner dimensions 3 and 4 differ
#pragma once

#include <fmt/format.h>

#include <stdexcept>
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

}  // namespace ag
