// The graph: one Node per op call that involved a tensor requiring grad.
//
// A Node knows where its inputs came from (next_edges) and how to turn the gradient of its
// output into gradients of its inputs (backward). It is the micrograd idea: the backward
// closure is written right next to the forward, in the op's own function, and captures
// exactly the tensors it needs (its "saved tensors").
//
//        x (leaf) ─┐
//                  ├─ mul ── y ── sum ── loss
//        w (leaf) ─┘
//
// loss.grad_fn() is the `sum` node; its edge leads to the `mul` node, whose two edges lead to
// the leaves x and w, where gradients accumulate into .grad().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../runtime/profile.h"
#include "tensor.h"

namespace ag {

namespace detail {
struct RecordSite;  // a call stack, captured by anomaly mode (debug/anomaly.h)
}

// Where one input's gradient goes: to the node that produced the input, or, for a leaf that
// requires grad, straight into that leaf's .grad(). Both empty: no gradient needed.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  Shape shape;  // the input's shape and dtype, to check what backward returns
  DType dtype = kFloat32;

  bool needs_grad() const { return node || leaf; }
};

// A tensor a backward formula will read, and its storage's version when the op ran. Should
// the storage be written in place before backward (an optimizer step between two backward
// calls, a write through data_ptr), the formula would read values the forward never saw:
// Node::apply then throws instead.
struct SavedVersion {
  std::weak_ptr<Storage> storage;  // not kept alive here: the backward formula holds what it reads
  std::weak_ptr<TensorImpl> tensor;
  std::uint64_t version = 0;
  // Which it is, for the error: input `role` for role >= 0, else kOutput or kOther.
  static constexpr int kOutput = -1, kOther = -2;
  int role = kOther;
};

// backward(grad_output, needs_input_grad) returns one gradient per input, in input order.
// A gradient may be left undefined when needs_input_grad[i] is false (saves the work) or when
// the input is not differentiable (an index or a mask).
using BackwardFn =
    std::function<std::vector<Tensor>(const Tensor& grad_output, const std::vector<bool>& needs_input_grad)>;

// forward(input_tangents) returns the output's tangent (forward mode, forward.h) from one
// tangent per input, in input order, each undefined where that input has none (its tangent is
// zero). It is called only when some input has one; it computes outside the graph and must not
// change its inputs. An op recorded without one refuses when a tangent reaches it.
using ForwardFn = std::function<Tensor(const std::vector<Tensor>& input_tangents)>;

// Forward over reverse (forward.h): a backward pass inside a DualLevel, without create_graph,
// carries tangents from each gradient to the next. dual_backward(dy, dy_tangent, need) returns
// the input gradients and their tangents (dy_tangent undefined: zero; a tangent undefined:
// zero): d/de of the backward formula when every tensor it reads moves along its tangent. An op
// may give one with Node::set_dual_backward; without it the node runs its formula twice when
// nothing it reads moves (the formula is then the same linear map for dy and its tangent), and
// otherwise its composed form, whose ops carry the tangents (docs/forward_mode.md).
struct DualGrads {
  std::vector<Tensor> grads, tangents;
};
using DualBackwardFn =
    std::function<DualGrads(const Tensor& dy, const Tensor& dy_tangent, const std::vector<bool>& needs_input_grad)>;

// Whether an op's backward formula can itself be differentiated (a backward pass with
// create_graph: ag::grad, docs/higher_order.md). Such a pass runs the formulas with grad mode
// on, and a formula declared AnyOrder then computes its gradients with differentiable ops, so
// that they join the graph; detail::creating_graph() tells it which case it is in. A formula
// declared FirstOrder computes them outside the graph (a hand loop), so a pass with
// create_graph refuses to run it, naming the op, rather than return a second derivative of zero.
enum class BackwardOrder { FirstOrder, AnyOrder };

// Who an op is: the name its node carries (in errors, ag::to_dot, anomaly mode's report) and the
// family of work (runtime/profile.h) its forward and its backward are charged to. Each of the
// library's ops gives both where it is defined; a name alone, as an op of one's own defined with
// record() may give it, is charged to Family::Reduction, with whatever else is not named.
struct OpName {
  OpName(std::string op, profile::Family f = profile::Family::Reduction) : name(std::move(op)), family(f) {}
  OpName(const char* op, profile::Family f = profile::Family::Reduction) : name(op), family(f) {}
  std::string name;
  profile::Family family;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node(OpName op, std::vector<Edge> next_edges, BackwardFn backward, std::vector<SavedVersion> saved = {},
       BackwardOrder order = BackwardOrder::FirstOrder);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  profile::Family family() const { return family_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  bool released() const { return !backward_; }
  BackwardOrder order() const { return order_; }

  // Checks that no saved tensor was changed in place, runs the op's backward, and checks each
  // returned gradient's shape and dtype. With grad mode on (a pass with create_graph) a
  // FirstOrder backward throws instead.
  std::vector<Tensor> apply(const Tensor& grad_output) const;
  // Frees the saved tensors (the closure); a later backward through this node is an error.
  void release() {
    backward_ = nullptr;
    dual_backward_ = nullptr;
    output_tangent_ = Tensor();
    saved_.clear();
  }

  // Marks the node as part of a running backward pass: false if another pass already has it.
  bool begin_backward() { return !in_backward_.exchange(true, std::memory_order_acq_rel); }
  void end_backward() { in_backward_.store(false, std::memory_order_release); }

  // What the op produced, for ag::to_dot; set by record().
  const Shape& output_shape() const { return output_shape_; }
  DType output_dtype() const { return output_dtype_; }
  void set_output(Shape shape, DType dtype) {
    output_shape_ = std::move(shape);
    output_dtype_ = dtype;
  }
  // Where the op was recorded: captured only in anomaly mode (debug/anomaly.h), else null.
  const detail::RecordSite* record_site() const { return site_.get(); }
  void set_record_site(std::shared_ptr<const detail::RecordSite> site) { site_ = std::move(site); }
  // The 2-norm of the gradient that reached this op's output in the latest backward run with
  // anomaly mode on; NaN if there was none.
  double grad_norm() const { return grad_norm_; }
  void set_grad_norm(double norm) { grad_norm_ = norm; }
  // The output tensor whose gradient backward keeps (Tensor::retain_grad), or null. Weak: the
  // tensor owns this node through its grad_fn, so a strong pointer back would be a cycle.
  std::shared_ptr<TensorImpl> retained_output() const { return retained_.lock(); }
  void retain_output(const std::shared_ptr<TensorImpl>& output) { retained_ = output; }
  // The forward-mode level whose tangents reached this op's inputs (forward.h), 0 if none: a
  // backward through it while that level lives must build a graph, so that its gradients carry
  // their tangents.
  std::uint64_t dual_level() const { return dual_level_; }
  // The output's tangent at that level, for detail::node_output: a formula that reads the output
  // must see it move too. Kept only by an op whose saved tensors include its output.
  const Tensor& output_tangent() const { return output_tangent_; }
  // `values_move`: some tensor the backward formula reads (a saved tensor, or the output) has a
  // tangent, so the formula's tangent has a second term beside the formula applied to dy's.
  void set_dual(std::uint64_t level, Tensor output_tangent, bool values_move) {
    dual_level_ = level;
    output_tangent_ = std::move(output_tangent);
    values_move_ = values_move;
  }
  void set_dual_backward(DualBackwardFn dual_backward) { dual_backward_ = std::move(dual_backward); }
  // The kernel switch (ag::Kernels) its forward ran under: its formula runs under it too.
  std::uint8_t kernels() const { return kernels_; }

 private:
  std::string name_;
  profile::Family family_;
  std::vector<Edge> next_edges_;
  BackwardFn backward_;
  std::vector<SavedVersion> saved_;
  BackwardOrder order_;
  std::atomic<bool> in_backward_{false};
  Shape output_shape_;
  DType output_dtype_ = kFloat32;
  std::shared_ptr<const detail::RecordSite> site_;
  double grad_norm_ = std::numeric_limits<double>::quiet_NaN();
  std::weak_ptr<TensorImpl> retained_;
  std::uint64_t dual_level_ = 0;
  Tensor output_tangent_;
  bool values_move_ = false;
  DualBackwardFn dual_backward_;
  std::uint8_t kernels_ = 0;  // set from the thread's switch when the node is made
  // Forward over reverse: the formula's tangent as well as its result (apply's dual case).
  std::vector<Tensor> apply_dual(const Tensor& grad_output, const std::vector<bool>& needs) const;
};

// Makes `output` the result of op `op` (its name, and the family its time is charged to) on
// `inputs`. When grad mode is on and some input requires grad, attaches a Node holding
// `backward`; otherwise returns `output` untouched and `backward` (with whatever it captured) is
// dropped at once. Every op ends with this call, and user code can call it too to define a new
// differentiable op.
//
// `saved` lists the tensors `backward` reads (inputs, the output, or anything else it
// captured, such as a mask); their versions are checked before it runs. Left out, every input
// and the output count as saved: never too few, sometimes more than needed. `{}` says the
// formula reads no tensor at all (add's gradient is dy itself).
//
// `order` says whether `backward` can be differentiated again (BackwardOrder above). An op whose
// formula is a hand loop leaves it at FirstOrder; one that builds its gradients from ops when
// detail::creating_graph() is true declares AnyOrder.
//
// `forward` is the op's forward-mode rule (ForwardFn above). While a forward-mode level lives
// and some input has a tangent, record() runs it and gives the output its result as tangent
// (the node keeps it too, for detail::node_output); without a rule it throws, naming the op.
using Saved = std::vector<Tensor>;
Tensor record(OpName op, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward,
              std::optional<Saved> saved = std::nullopt, BackwardOrder order = BackwardOrder::FirstOrder,
              ForwardFn forward = {});

// Runs reverse-mode differentiation from `root` (see Tensor::backward). engine.cpp.
void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph);

namespace detail {
// Refuses a write in place into `t` that backward could not see: t requires grad and grad mode is
// on (an optimizer's update runs under NoGradGuard). The error names `op` and t's dtype and shape.
void check_in_place_update(const char* op, const Tensor& t);
// True on a thread while a backward pass is running backward formulas there; their ops are not
// reported to the graph observer (hooks.h).
bool in_backward();
// True inside a backward formula that must build a graph (a pass with create_graph): its
// gradients must then be computed with differentiable ops, reading the tensors it saved with
// their history (inputs as they were passed, the output through node_output below).
bool creating_graph();
// Inside a backward formula run by a pass with create_graph: the op's output, sharing the data
// of `saved` (the output the op saved, detached), as the tensor computed by the running node.
// A formula that reads its output (exp's y, softmax's p) uses this to differentiate through it
// without holding the output in the node, which would be a cycle.
Tensor node_output(const Tensor& saved);
}  // namespace detail

}  // namespace ag
