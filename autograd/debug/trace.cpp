// Op traces (trace.h): the observer that writes them and the comparison that reads two.
//
// The file: the line "attograd-op-trace 1", then one entry after another, each a line of
// numbers and words,
//   entry STEP MICRO_BATCH PHASE CALL INPUT DTYPE NDIM DIM... OP_BYTES INPUTS_BYTES
// (MICRO_BATCH -1 for an update entry, INPUT -1 unless the entry is a gradient for that input)
// followed by the op's name, the text of its input shapes, and the value's bytes.
#include "trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "../node.h"
#include "../tensor.h"

namespace ag::debug {

namespace {

constexpr std::string_view kMagic = "attograd-op-trace 1";

std::string shapes_text(const std::vector<Tensor>& tensors) {
  std::vector<std::string> parts;
  for (const Tensor& t : tensors) parts.push_back(t.defined() ? shape_str(t.shape()) : "none");
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

OpTrace::OpTrace(const std::string& path) : path_(path), previous_(graph_observer()) {
  out_.open(path, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error(fmt::format("OpTrace: cannot write {}", path));
  out_ << kMagic << '\n';
  set_graph_observer(this);
}

OpTrace::~OpTrace() { set_graph_observer(previous_); }

void OpTrace::set_place(std::int64_t step, std::int64_t micro_batch) {
  step_ = step;
  micro_batch_ = micro_batch;
  calls_.clear();
  active_ = true;
}

void OpTrace::pause() { active_ = false; }

std::int64_t OpTrace::call_index(const std::string& phase, const std::string& op) {
  std::string key = phase + '\n' + op;
  for (auto& [name, calls] : calls_)
    if (name == key) return ++calls;
  calls_.emplace_back(key, 1);
  return 1;
}

void OpTrace::add(std::int64_t step, const std::string& name, const Tensor& value) {
  if (update_step_ != step) {
    update_step_ = step;
    calls_.clear();
  }
  write("update", name, call_index("update", name), -1, "", value, -1, step);
}

void OpTrace::recorded(const std::string& op, const Tensor& output, const std::vector<Tensor>& inputs, Node* node) {
  if (previous_) previous_->recorded(op, output, inputs, node);
  if (active_) write("forward", op, call_index("forward", op), -1, shapes_text(inputs), output, micro_batch_, step_);
}

void OpTrace::before_backward(Node& node, const Tensor& grad_output) {
  if (previous_) previous_->before_backward(node, grad_output);
}

void OpTrace::after_backward(const Node& node, const std::vector<Tensor>& grads, const Tensor& grad_output) {
  if (previous_) previous_->after_backward(node, grads, grad_output);
  if (!active_) return;
  std::string from = "from " + (grad_output.defined() ? shape_str(grad_output.shape()) : std::string("none"));
  std::int64_t call = call_index("backward", node.name());  // each input's gradient of one call shares it
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined())
      write("backward", node.name(), call, static_cast<std::int64_t>(i), from, grads[i], micro_batch_, step_);
}

void OpTrace::write(const std::string& phase, const std::string& op, std::int64_t call, std::int64_t input,
                    const std::string& inputs, const Tensor& value, std::int64_t micro_batch, std::int64_t step) {
  const Shape& shape = value.shape();
  out_ << fmt::format("entry {} {} {} {} {} {} {}", step, micro_batch, phase, call, input, dtype_name(value.dtype()),
                      shape.size());
  for (std::int64_t d : shape) out_ << ' ' << d;
  out_ << ' ' << op.size() << ' ' << inputs.size() << '\n' << op << inputs;
  out_.write(static_cast<const char*>(value.raw_data()),
             static_cast<std::streamsize>(static_cast<std::size_t>(value.numel()) * dtype_size(value.dtype())));
  if (!out_) throw std::runtime_error(fmt::format("OpTrace: writing {} failed", path_));
  ++entries_;
}

// --- Reading and comparing ----------------------------------------------------------------

namespace {

struct Entry {
  std::int64_t step = 0, micro_batch = 0, call = 0, input = -1;
  std::string phase, dtype, op, inputs;
  Shape shape;
  std::string data;

  // Where it sorts: a step's micro-batches in order, then its update entries.
  std::pair<std::int64_t, std::int64_t> place() const {
    return {step, micro_batch < 0 ? std::numeric_limits<std::int64_t>::max() : micro_batch};
  }
  bool same_kind(const Entry& o) const {
    return step == o.step && micro_batch == o.micro_batch && phase == o.phase && op == o.op && call == o.call &&
           input == o.input && dtype == o.dtype && shape == o.shape;
  }
};

std::size_t element_size(std::string_view dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "bool") return 1;
  return 0;
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw std::invalid_argument(fmt::format("{}: cannot be read", path));
    std::string magic;
    std::getline(in_, magic);
    if (magic != kMagic) throw std::invalid_argument(fmt::format("{}: not an op trace (no \"{}\" line)", path, kMagic));
    in_.seekg(0, std::ios::end);
    size_ = static_cast<std::uint64_t>(in_.tellg());
    in_.seekg(static_cast<std::streamoff>(kMagic.size() + 1));
  }

  // The next entry, or none at the end of the file.
  std::optional<Entry> next() {
    std::string line;
    if (!std::getline(in_, line)) {
      if (in_.eof() && line.empty()) return std::nullopt;
      bad("a line cut short");
    }
    ++index_;
    if (in_.eof()) bad("the file ends inside it");  // an entry's line is followed by its bytes
    Entry e;
    std::vector<std::string_view> words;
    std::string_view rest = line;
    while (!rest.empty()) {
      std::size_t space = rest.find(' ');
      words.push_back(rest.substr(0, space));
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    }
    if (words.size() < 10 || words[0] != "entry") bad("not an entry line");
    std::size_t at = 1;
    auto number = [&](std::int64_t lo, std::int64_t hi) {
      std::string_view w = words.at(at++);
      std::int64_t v = 0;
      auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
      if (ec != std::errc() || end != w.data() + w.size() || v < lo || v > hi)
        bad(fmt::format("'{}' is not a number from {} to {}", w, lo, hi));
      return v;
    };
    const std::int64_t big = std::int64_t{1} << 40;
    e.step = number(0, big);
    e.micro_batch = number(-1, big);
    e.phase = std::string(words[at++]);
    if (e.phase != "forward" && e.phase != "backward" && e.phase != "update") bad(fmt::format("phase '{}'", e.phase));
    e.call = number(0, big);
    e.input = number(-1, big);
    e.dtype = std::string(words[at++]);
    std::size_t width = element_size(e.dtype);
    if (width == 0) bad(fmt::format("dtype '{}'", e.dtype));
    std::int64_t ndim = number(0, 16);
    if (words.size() != 10 + static_cast<std::size_t>(ndim)) bad("its word count does not match its dimensions");
    std::streamoff position = in_.tellg();
    if (position < 0 || static_cast<std::uint64_t>(position) > size_) bad("the file ends inside it");
    std::uint64_t remaining = size_ - static_cast<std::uint64_t>(position);
    std::uint64_t bytes = width;
    for (std::int64_t d = 0; d < ndim; ++d) {
      std::int64_t n = number(0, big);
      e.shape.push_back(n);
      if (n != 0 && bytes > remaining / static_cast<std::uint64_t>(n))
        bytes = remaining + 1;  // too large: refused below
      else
        bytes *= static_cast<std::uint64_t>(n);
    }
    std::int64_t op_bytes = number(0, 4096), inputs_bytes = number(0, 1 << 20);
    if (bytes + static_cast<std::uint64_t>(op_bytes + inputs_bytes) > remaining) bad("the file ends inside it");
    e.op.resize(static_cast<std::size_t>(op_bytes));
    e.inputs.resize(static_cast<std::size_t>(inputs_bytes));
    e.data.resize(bytes);
    in_.read(e.op.data(), op_bytes);
    in_.read(e.inputs.data(), inputs_bytes);
    in_.read(e.data.data(), static_cast<std::streamsize>(bytes));
    if (!in_) bad("the file ends inside it");
    return e;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    throw std::invalid_argument(fmt::format("{}: entry {} is not readable: {}", path_, index_, what));
  }
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
  std::int64_t index_ = 0;
};

// The entries of several files as one trace, in the order of their places.
class MergedTrace {
 public:
  explicit MergedTrace(const std::vector<std::string>& paths) {
    if (paths.empty()) throw std::invalid_argument("compare_traces: a trace needs at least one file");
    for (const std::string& p : paths) {
      readers_.push_back(std::make_unique<Reader>(p));
      heads_.push_back(readers_.back()->next());
    }
  }
  std::optional<Entry> next() {
    std::size_t best = heads_.size();
    for (std::size_t i = 0; i < heads_.size(); ++i)
      if (heads_[i] && (best == heads_.size() || heads_[i]->place() < heads_[best]->place())) best = i;
    if (best == heads_.size()) return std::nullopt;
    std::optional<Entry> e = std::move(heads_[best]);
    heads_[best] = readers_[best]->next();
    return e;
  }

 private:
  std::vector<std::unique_ptr<Reader>> readers_;
  std::vector<std::optional<Entry>> heads_;
};

std::string describe(const Entry& e) {
  std::string value = fmt::format("{} {}", shape_str(e.shape), e.dtype);
  if (e.phase == "update") return fmt::format("after step {}'s update: {} {}", e.step + 1, e.op, value);
  std::string where = fmt::format("step {}, micro-batch {}, {}", e.step + 1, e.micro_batch, e.phase);
  if (e.phase == "forward")
    return fmt::format("{}: {} (call {} in this pass) of {} -> {}", where, e.op, e.call, e.inputs, value);
  return fmt::format("{}: the gradient {}'s backward (call {}) returned for its input {} ({}), {}", where, e.op, e.call,
                     e.input, e.inputs, value);
}

double element(const Entry& e, std::size_t i) {
  if (e.dtype == "float32") {
    float v;
    std::memcpy(&v, e.data.data() + 4 * i, 4);
    return v;
  }
  if (e.dtype == "float64") {
    double v;
    std::memcpy(&v, e.data.data() + 8 * i, 8);
    return v;
  }
  if (e.dtype == "int64") {
    std::int64_t v;
    std::memcpy(&v, e.data.data() + 8 * i, 8);
    return static_cast<double>(v);
  }
  return e.data[i] != 0 ? 1.0 : 0.0;
}

std::string index_text(const Shape& shape, std::size_t flat) {
  std::vector<std::int64_t> at(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    at[d] = static_cast<std::int64_t>(flat) % shape[d];
    flat /= static_cast<std::size_t>(shape[d]);
  }
  return fmt::format("[{}]", fmt::join(at, ", "));
}

// The values of two entries of the same kind whose bytes differ: how many elements, the largest
// difference and where.
std::string value_difference(const Entry& a, const Entry& b) {
  std::size_t width = element_size(a.dtype), n = a.data.size() / width, differ = 0, worst = 0;
  double largest = -1;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(a.data.data() + i * width, b.data.data() + i * width, width) == 0) continue;
    ++differ;
    double d = std::fabs(element(a, i) - element(b, i));
    if (std::isnan(d)) d = std::numeric_limits<double>::infinity();  // a NaN on one side only
    if (d > largest) largest = d, worst = i;
  }
  double scale = std::fabs(element(a, worst));
  return fmt::format("{} of {} elements differ; the largest difference is {:.3g} at {} (A {:.9g}, B {:.9g}{})", differ,
                     n, largest, index_text(a.shape, worst), element(a, worst), element(b, worst),
                     scale > 0 ? fmt::format(", relative {:.3g}", largest / scale) : std::string());
}

// Runs that took different ops (two kernel routes, say) can still be compared where they meet
// again: the weights after each update. The first update entry that differs, or that they agree.
std::string updates_after_parting(MergedTrace& a, MergedTrace& b, Entry ea, Entry eb) {
  auto next_update = [](MergedTrace& t, std::optional<Entry> e) {
    while (e && e->phase != "update") e = t.next();
    return e;
  };
  std::optional<Entry> ua = next_update(a, std::move(ea)), ub = next_update(b, std::move(eb));
  std::int64_t compared = 0;
  for (; ua && ub; ua = next_update(a, a.next()), ub = next_update(b, b.next()), ++compared) {
    if (!ua->same_kind(*ub))
      return fmt::format("\nthe weights after the updates cannot be compared either:\n  A: {}\n  B: {}", describe(*ua),
                         describe(*ub));
    if (ua->data != ub->data)
      return fmt::format("\nthe weights after the updates first differ: {}\n  {}\n({} weights before it are equal)",
                         describe(*ua), value_difference(*ua, *ub), compared);
  }
  if (ua || ub) return fmt::format("\n{} has more updates than {}", ua ? "A" : "B", ua ? "B" : "A");
  return fmt::format("\nthe weights after every update are identical, byte for byte ({} tensors)", compared);
}

}  // namespace

TraceComparison compare_traces(const std::vector<std::string>& a_paths, const std::vector<std::string>& b_paths) {
  MergedTrace a(a_paths), b(b_paths);
  TraceComparison result;
  for (;;) {
    std::optional<Entry> ea = a.next(), eb = b.next();
    if (!ea && !eb) {
      result.identical = true;
      result.report = fmt::format("identical: {} entries, byte for byte", result.same);
      return result;
    }
    std::string before = fmt::format("the {} entries before it are identical", result.same);
    if (!ea || !eb) {
      result.report = fmt::format("{} ends after {} entries; {} goes on with {} ({})", ea ? "B" : "A", result.same,
                                  ea ? "A" : "B", describe(ea ? *ea : *eb), before);
      return result;
    }
    if (!ea->same_kind(*eb)) {
      result.report = fmt::format("the runs part at entry {}:\n  A: {}\n  B: {}\n({})", result.same + 1, describe(*ea),
                                  describe(*eb), before);
      result.report += updates_after_parting(a, b, std::move(*ea), std::move(*eb));
      return result;
    }
    if (ea->data != eb->data) {
      result.report = fmt::format("first difference, entry {}: {}\n  {}\n({})", result.same + 1, describe(*ea),
                                  value_difference(*ea, *eb), before);
      return result;
    }
    ++result.same;
  }
}

}  // namespace ag::debug
