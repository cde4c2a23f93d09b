// Precompiled once for the library's own sources (meson.build's cpp_pch): the standard headers
// and fmt, which most of them include and which take about a third of their compile time.
// Nothing here is part of the installed headers.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
