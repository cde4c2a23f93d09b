#include "format.h"

#include <algorithm>
#include <cmath>

#include "dispatch.h"
#include "node.h"

namespace ag {

namespace {

// The element offsets to show along one dim of size n: all of them, or the first and last
// `edge` with a gap (-1) between, NumPy-style.
std::vector<std::int64_t> shown_indices(std::int64_t n, bool summarize, std::int64_t edge) {
  std::vector<std::int64_t> idx;
  if (!summarize || n <= 2 * edge) {
    for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (std::int64_t i = 0; i < edge; ++i) idx.push_back(i);
  idx.push_back(-1);
  for (std::int64_t i = n - edge; i < n; ++i) idx.push_back(i);
  return idx;
}

struct Printer {
  const Tensor& t;
  const PrintOptions& options;
  bool summarize;
  std::vector<std::string> cells;  // every element as text, by flat offset (only those shown)
  std::size_t width = 0;
  std::string out;

  // Visits the offsets that will be printed (in any order).
  template <class F>
  void for_each_shown(std::int64_t dim, std::int64_t offset, F&& f) const {
    const Shape& s = t.shape();
    if (dim == t.dim()) {
      f(offset);
      return;
    }
    for (auto i : shown_indices(s[static_cast<std::size_t>(dim)], summarize, options.edge_items))
      if (i >= 0) for_each_shown(dim + 1, offset * s[static_cast<std::size_t>(dim)] + i, f);
  }

  void make_cells() {
    cells.assign(static_cast<std::size_t>(t.numel()), "");
    dispatch_all(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* p = t.data_ptr<T>();
      if constexpr (std::is_same_v<T, bool>) {
        for_each_shown(0, 0, [&](std::int64_t o) { cells[static_cast<std::size_t>(o)] = p[o] ? "true" : "false"; });
      } else if constexpr (std::is_integral_v<T>) {
        for_each_shown(0, 0, [&](std::int64_t o) { cells[static_cast<std::size_t>(o)] = fmt::format("{}", p[o]); });
      } else {
        // Scientific notation when fixed-point would hide the values (NumPy's rule of thumb).
        double max_abs = 0.0, min_abs = INFINITY;
        for_each_shown(0, 0, [&](std::int64_t o) {
          double a = std::fabs(static_cast<double>(p[o]));
          if (!std::isfinite(a) || a == 0.0) return;
          max_abs = std::max(max_abs, a);
          min_abs = std::min(min_abs, a);
        });
        bool scientific = max_abs >= 1e8 || (min_abs < 1e-4 && max_abs / min_abs > 1e3);
        for_each_shown(0, 0, [&](std::int64_t o) {
          double v = static_cast<double>(p[o]);
          std::string& c = cells[static_cast<std::size_t>(o)];
          if (std::isnan(v))
            c = "nan";
          else if (std::isinf(v))
            c = v > 0 ? "inf" : "-inf";
          else
            c = scientific ? fmt::format("{:.{}e}", v, options.precision)
                           : fmt::format("{:.{}f}", v, options.precision);
        });
      }
    });
    for_each_shown(0, 0, [&](std::int64_t o) { width = std::max(width, cells[static_cast<std::size_t>(o)].size()); });
  }

  // Nested brackets; `indent` is the column where this dim's "[" stands.
  void print(std::int64_t dim, std::int64_t offset, std::size_t indent) {
    const Shape& s = t.shape();
    if (dim == t.dim()) {
      out += fmt::format("{:>{}}", cells[static_cast<std::size_t>(offset)], width);
      return;
    }
    auto n = s[static_cast<std::size_t>(dim)];
    bool innermost = dim + 1 == t.dim();
    // Between rows: a newline (two between 3-D blocks, as NumPy does) and the indent.
    std::string separator =
        innermost ? ", "
                  : "," + std::string(static_cast<std::size_t>(t.dim() - dim - 1), '\n') + std::string(indent + 1, ' ');
    out += '[';
    bool first = true;
    for (auto i : shown_indices(n, summarize, options.edge_items)) {
      if (!first) out += separator;
      first = false;
      if (i < 0)
        out += "...";
      else
        print(dim + 1, offset * n + i, indent + 1);
    }
    out += ']';
  }
};

}  // namespace

std::string to_string(const Tensor& t, const PrintOptions& options) {
  if (!t.defined()) return "tensor(undefined)";
  Printer p{t, options, t.numel() > options.threshold, {}, 0, "tensor("};
  p.make_cells();
  p.print(0, 0, std::string("tensor(").size());
  p.out += fmt::format(", shape={}, dtype={}", shape_str(t.shape()), dtype_name(t.dtype()));
  if (t.grad_fn())
    p.out += fmt::format(", grad_fn={}", t.grad_fn()->name());
  else if (t.requires_grad())
    p.out += ", requires_grad=true";
  p.out += ')';
  return p.out;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }

}  // namespace ag
