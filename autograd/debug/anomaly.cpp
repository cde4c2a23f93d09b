// Anomaly mode (anomaly.h): the checks, and the call stacks that say where an op was recorded.
#include "anomaly.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <boost/stacktrace.hpp>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "../dispatch.h"
#include "../hooks.h"
#include "../node.h"
#include "../tensor.h"

namespace ag {

namespace {

struct Scan {
  std::int64_t first_nan = -1, first_inf = -1;  // element index, -1 if none
  double sum_squares = 0.0;
};

Scan scan(const Tensor& t) {
  Scan s;
  if (!t.defined() || !is_floating(t.dtype())) return s;
  dispatch_floating(t.dtype(), "anomaly", [&](auto tag) {
    const auto* p = t.data_ptr<decltype(tag)>();
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) {
      double v = static_cast<double>(p[i]);
      if (std::isnan(v)) {
        if (s.first_nan < 0) s.first_nan = i;
      } else if (std::isinf(v)) {
        if (s.first_inf < 0) s.first_inf = i;
      } else {
        s.sum_squares += v * v;
      }
    }
  });
  return s;
}

std::string describe_tensor(const Tensor& t) {
  if (!t.defined()) return "none";
  return fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape()));
}

std::string describe_inputs(const std::vector<Tensor>& inputs) {
  std::string out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) out += ", ";
    out += describe_tensor(inputs[i]);
  }
  return out.empty() ? "none" : out;
}

// One line per frame, innermost first; frames inside this file and record() are left out. A
// function the dynamic linker cannot name (one internal to a file, or in an executable linked
// without -rdynamic) is shown as its file and offset, which addr2line -f -C -e FILE OFFSET turns
// into a function and line.
std::string format_stack(const boost::stacktrace::stacktrace& st) {
  std::ostringstream out;
  int shown = 0;
  for (const auto& frame : st) {
    std::string name = frame.name();
    if (name.find("ag::detail::capture_record_site") != std::string::npos ||
        name.find("ag::detail::check_forward") != std::string::npos ||
        name.find("AnomalyObserver") != std::string::npos || name.find("ag::record(") != std::string::npos)
      continue;
    if (name.empty()) {
      Dl_info info;
      if (!dladdr(frame.address(), &info) || !info.dli_fname) continue;
      auto offset =
          reinterpret_cast<std::uintptr_t>(frame.address()) - reinterpret_cast<std::uintptr_t>(info.dli_fbase);
      name = fmt::format("{} +{:#x}", info.dli_fname, offset);
    }
    out << "    " << name << '\n';
    if (++shown == 16) break;
  }
  return out.str();
}

}  // namespace

namespace detail {

struct RecordSite {
  boost::stacktrace::stacktrace stack;
};

std::shared_ptr<const RecordSite> capture_record_site() {
  return std::make_shared<const RecordSite>(RecordSite{boost::stacktrace::stacktrace()});
}

double norm_of(const Tensor& t) { return std::sqrt(scan(t).sum_squares); }

void check_forward(const std::string& op, const Tensor& output, const std::vector<Tensor>& inputs) {
  Scan out = scan(output);
  if (out.first_nan < 0 && out.first_inf < 0) return;
  bool inputs_had_nan = false, inputs_had_inf = false;
  for (const Tensor& in : inputs) {
    Scan s = scan(in);
    inputs_had_nan = inputs_had_nan || s.first_nan >= 0;
    inputs_had_inf = inputs_had_inf || s.first_inf >= 0;
  }
  if (out.first_nan < 0 && (inputs_had_inf || op == "masked_fill"))
    return;  // infinities passed on or written on purpose
  bool nan = out.first_nan >= 0;
  std::string source = nan ? (inputs_had_nan ? "an input already held NaN (made outside anomaly mode's view)"
                                             : "every input was free of NaN")
                           : "no input held an infinity";
  throw AnomalyError(fmt::format(
      "anomaly: {} (forward) produced {} at element {} of its output ({}); {}. Inputs: {}. Called from:\n{}", op,
      nan ? "NaN" : "an infinity", nan ? out.first_nan : out.first_inf, describe_tensor(output), source,
      describe_inputs(inputs), format_stack(boost::stacktrace::stacktrace())));
}

void check_backward(const Node& node, std::size_t input, const Tensor& grad, const Tensor& grad_output) {
  Scan s = scan(grad);
  if (s.first_nan < 0 && s.first_inf < 0) return;
  Scan up = scan(grad_output);
  bool upstream_finite = up.first_nan < 0 && up.first_inf < 0;
  std::string where = node.record_site() ? format_stack(node.record_site()->stack)
                                         : "    (not known: the op was recorded while anomaly mode was off)\n";
  std::string inputs;  // the op's inputs as recorded: dtype and shape of each
  for (std::size_t i = 0; i < node.next_edges().size(); ++i) {
    const Edge& e = node.next_edges()[i];
    inputs += fmt::format("{}{} {}", i ? ", " : "", dtype_name(e.dtype), shape_str(e.shape));
  }
  throw AnomalyError(fmt::format(
      "anomaly: {} (backward) returned {} at element {} of the gradient for its input {} ({}); the gradient of its "
      "output ({}) {}. Inputs: {}. The op was recorded at:\n{}",
      node.name(), s.first_nan >= 0 ? "NaN" : "an infinity", s.first_nan >= 0 ? s.first_nan : s.first_inf, input,
      describe_tensor(grad), describe_tensor(grad_output),
      upstream_finite ? "was finite" : "already held a NaN or an infinity", inputs, where));
}

}  // namespace detail

namespace {

// What anomaly mode does at each of the engine's hooks.
class AnomalyObserver final : public GraphObserver {
 public:
  void recorded(const std::string& op, const Tensor& output, const std::vector<Tensor>& inputs, Node* node) override {
    detail::check_forward(op, output, inputs);
    if (node) node->set_record_site(detail::capture_record_site());
  }
  void before_backward(Node& node, const Tensor& grad_output) override {
    node.set_grad_norm(detail::norm_of(grad_output));
  }
  void after_backward(const Node& node, const std::vector<Tensor>& grads, const Tensor& grad_output) override {
    for (std::size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) detail::check_backward(node, i, grads[i], grad_output);
  }
};

AnomalyObserver g_anomaly_observer;  // stateless: one serves every thread

}  // namespace

bool is_anomaly_enabled() { return graph_observer() == &g_anomaly_observer; }
void set_detect_anomaly(bool enabled) { set_graph_observer(enabled ? &g_anomaly_observer : nullptr); }

}  // namespace ag
