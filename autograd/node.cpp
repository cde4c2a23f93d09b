// Graph nodes and record(): how an op joins the graph. The backward pass over the graph is in
// engine.cpp.
#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "../runtime/error.h"
#include "../runtime/profile.h"
#include "context.h"
#include "forward.h"
#include "grad_mode.h"
#include "hooks.h"
#include "memory.h"
#include "node.h"

namespace ag {

Node::Node(OpName op, std::vector<Edge> next_edges, BackwardFn backward, std::vector<SavedVersion> saved,
           BackwardOrder order)
    : name_(std::move(op.name)),
      family_(op.family),
      next_edges_(std::move(next_edges)),
      backward_(std::move(backward)),
      saved_(std::move(saved)),
      order_(order),
      kernels_(detail::thread_context().kernels) {
  detail::node_created();  // memory_stats().live_nodes (memory.cpp)
}

// Dropping a loss frees its graph. Left to the default, each node's destructor would free the
// next node from inside itself, one stack frame per op of depth; instead the chain is taken
// apart here in a loop.
Node::~Node() {
  detail::node_destroyed();
  std::vector<std::shared_ptr<Node>> orphans;
  auto adopt_inputs = [&orphans](Node& node) {
    // The closure goes first: the inputs it keeps (as passed, for create_graph) hold their
    // nodes too, and would otherwise free them from inside this destructor.
    node.backward_ = nullptr;
    for (Edge& e : node.next_edges_)
      if (e.node && e.node.use_count() == 1) orphans.push_back(std::move(e.node));
  };
  adopt_inputs(*this);
  while (!orphans.empty()) {
    std::shared_ptr<Node> node = std::move(orphans.back());
    orphans.pop_back();
    adopt_inputs(*node);
  }  // `node` dies here with no node edges left, so its destructor does not recurse
}

namespace {

// "float32 [4, 3], a leaf" or "float32 [2, 4], computed by 'add'".
std::string describe(const TensorImpl* t) {
  if (!t) return "no longer held elsewhere";
  std::string what = fmt::format("{} {}", dtype_name(t->dtype), shape_str(t->shape));
  return t->grad_fn ? fmt::format("{}, computed by '{}'", what, t->grad_fn->name()) : what + ", a leaf";
}

std::string role_name(int role) {
  if (role == SavedVersion::kOutput) return "its output";
  if (role == SavedVersion::kOther) return "a tensor it saved";
  return fmt::format("input {}", role);
}

void check_unchanged(const std::string& op, const SavedVersion& saved) {
  std::shared_ptr<Storage> storage = saved.storage.lock();
  std::shared_ptr<TensorImpl> tensor = saved.tensor.lock();
  if (tensor && tensor->storage != storage)  // also when the old storage is gone: nothing held it but the tensor
    throw_state("backward",
                "{} of '{}' ({}) was given new data by set_data after the forward pass saved it; its gradient "
                "would be computed from data the forward never used. Run the forward again after loading",
                role_name(saved.role), op, describe(tensor.get()));
  if (!storage) return;  // nothing holds it, so the backward formula does not read it
  if (storage->version() != saved.version)
    throw_state("backward",
                "{} of '{}' ({}) was changed in place after the forward pass saved it for the gradient: it was at "
                "version {} then and is at version {} now (an optimizer step, or a write through mutable_data_ptr). "
                "The gradient would be computed from values the "
                "forward never used. Run the forward again after the change, or change a clone()",
                role_name(saved.role), op, describe(tensor.get()), saved.version, storage->version());
}

}  // namespace

namespace {

// The node whose backward formula is running on this thread, for detail::node_output.
// While a node's formula runs: it is the running node, and the kernel switch is the one its
// forward ran under, so the ops its formula calls run on the backend the forward ran on.
struct Running {
  const Node* previous = detail::thread_context().running;
  std::uint8_t previous_kernels = detail::thread_context().kernels;
  explicit Running(const Node* node) {
    detail::thread_context().running = node;
    detail::thread_context().kernels = node->kernels();
  }
  ~Running() {
    detail::thread_context().running = previous;
    detail::thread_context().kernels = previous_kernels;
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
};

}  // namespace

void detail::check_in_place_update(const char* op, const Tensor& t) {
  if (t.requires_grad() && is_grad_enabled())
    throw_state(op,
                "the {} tensor of shape {} requires grad, and backward() would not see a change made in place; "
                "make the update with grad mode off: {{ ag::NoGradGuard no_grad; w.{}(...); }}",
                dtype_name(t.dtype()), shape_str(t.shape()), op);
}

bool detail::creating_graph() {
  const ThreadContext& context = thread_context();
  return context.running && context.grad_enabled;
}

Tensor detail::node_output(const Tensor& saved) {
  if (!creating_graph()) throw std::logic_error("node_output called outside a backward pass with create_graph");
  auto output = std::make_shared<TensorImpl>(saved.impl()->storage, saved.shape(), saved.dtype());
  output->requires_grad = true;
  const Node* running = thread_context().running;
  output->grad_fn = std::const_pointer_cast<Node>(running->shared_from_this());
  Tensor result(std::move(output));
  if (running->dual_level() == live_level() && running->output_tangent().defined())
    set_tangent(result, running->output_tangent());
  return result;
}

std::vector<Tensor> Node::apply(const Tensor& grad_output) const {
  for (const SavedVersion& saved : saved_) check_unchanged(name_, saved);
  if (order_ == BackwardOrder::FirstOrder && is_grad_enabled())
    throw_state("backward",
                "'{}' has no second derivative: its backward formula computes the gradient outside the graph, so "
                "backward with create_graph cannot differentiate it again (an op defined with record() must build "
                "its gradients from ops when detail::creating_graph() is true, and declare BackwardOrder::AnyOrder)",
                name_);
  std::vector<bool> needs(next_edges_.size());
  for (std::size_t i = 0; i < needs.size(); ++i) needs[i] = next_edges_[i].needs_grad();

  Running running(this);
  profile::Scope scope(family_);
  bool dual = dual_level_ != 0 && dual_level_ == detail::live_level() && !is_grad_enabled();
  std::vector<Tensor> grads = dual ? apply_dual(grad_output, needs) : backward_(grad_output, needs);

  // A wrong shape here is a bug in the op's backward, not in the caller's input.
  if (grads.size() != next_edges_.size())
    throw std::logic_error(
        fmt::format("backward of '{}' returned {} gradients for {} inputs", name_, grads.size(), next_edges_.size()));
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    const Edge& e = next_edges_[i];
    if (!needs[i] || !g.defined()) continue;
    if (g.shape() != e.shape || g.dtype() != e.dtype)
      throw std::logic_error(
          fmt::format("backward of '{}' returned a {} gradient of shape {} for input {}, which is "
                      "{} with shape {}",
                      name_, dtype_name(g.dtype()), shape_str(g.shape()), i, dtype_name(e.dtype), shape_str(e.shape)));
  }
  return grads;
}

// Forward over reverse without a graph: each gradient leaves with its tangent.
std::vector<Tensor> Node::apply_dual(const Tensor& grad_output, const std::vector<bool>& needs) const {
  Tensor dy_tangent = detail::live_tangent(grad_output, name_);
  DualGrads dual;
  if (dual_backward_) {
    detail::ForwardRuleScope rule;  // the rule computes tangents itself; its ops need not
    dual = dual_backward_(grad_output, dy_tangent, needs);
  } else if (!values_move_) {  // the same linear map for dy and for its tangent
    detail::ForwardRuleScope rule;
    dual.grads = backward_(grad_output, needs);
    if (dy_tangent.defined()) dual.tangents = backward_(dy_tangent, needs);
  } else if (order_ == BackwardOrder::AnyOrder) {
    // The composed formula, as differentiable ops: they carry the tangents themselves. The graph
    // they record is dropped with the gradients' history.
    std::vector<Tensor> grads;
    {
      AutoGradMode composed(true);
      grads = backward_(grad_output, needs);
    }
    dual.grads.resize(grads.size());
    dual.tangents.resize(grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) {
        dual.grads[i] = grads[i].detach();
        dual.tangents[i] = detail::live_tangent(grads[i], name_);
      }
  } else {
    throw_state("backward",
                "'{}' has neither a forward-over-reverse rule nor a second derivative, and its inputs carried "
                "forward-mode tangents: its gradient's tangent cannot be computed",
                name_);
  }
  // Each gradient under a handle of its own (an add hands the same tensor to both inputs), with
  // its tangent.
  dual.tangents.resize(dual.grads.size());
  for (std::size_t i = 0; i < dual.grads.size(); ++i) {
    Tensor& g = dual.grads[i];
    if (!g.defined() || !dual.tangents[i].defined()) continue;
    g = Tensor(std::make_shared<TensorImpl>(g.impl()->storage, g.shape(), g.dtype()));
    detail::set_tangent(g, dual.tangents[i]);
  }
  return dual.grads;
}

namespace {

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const Tensor& in : inputs)
    if (in.defined() && in.requires_grad()) return true;
  return false;
}

// The node for op `name`: one edge per input, to the input's own node or, for a leaf that
// requires grad, to the leaf itself.
// What `saved` will read, with its storage's version now; by default every input and the output.
std::vector<SavedVersion> saved_versions(const Tensor& output, const std::vector<Tensor>& inputs,
                                         const std::optional<std::vector<Tensor>>& saved) {
  std::vector<Tensor> tensors = saved ? *saved : inputs;
  if (!saved) tensors.push_back(output);
  std::vector<SavedVersion> versions;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    const Storage* s = t.impl()->storage.get();
    int role = SavedVersion::kOther;
    std::weak_ptr<TensorImpl> impl = t.impl();
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined() && inputs[i].impl()->storage.get() == s) {
        role = static_cast<int>(i);
        impl = inputs[i].impl();  // the caller's handle, not a detached copy, to name it
        break;
      }
    if (role == SavedVersion::kOther && output.impl()->storage.get() == s) role = SavedVersion::kOutput;
    versions.push_back({t.impl()->storage, impl, s->version(), role});
  }
  return versions;
}

std::shared_ptr<Node> make_node(OpName op, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward,
                                const std::optional<std::vector<Tensor>>& saved, BackwardOrder order) {
  std::vector<Edge> edges(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined()) continue;
    if (in.impl() == output.impl())
      throw std::logic_error(fmt::format("op '{}' returned one of its inputs; ops must return a new tensor", op.name));
    edges[i].shape = in.shape();
    edges[i].dtype = in.dtype();
    if (!in.requires_grad()) continue;
    if (in.impl()->grad_fn)
      edges[i].node = in.impl()->grad_fn;
    else
      edges[i].leaf = in.impl();
  }
  auto node = std::make_shared<Node>(std::move(op), std::move(edges), std::move(backward),
                                     saved_versions(output, inputs, saved), order);
  node->set_output(output.shape(), output.dtype());
  return node;
}

// Forward mode: the output's tangent from the inputs' tangents by the op's rule, or nothing when
// no input has one. Returns whether some input had one.
bool propagate_tangent(const std::string& name, const Tensor& output, const std::vector<Tensor>& inputs,
                       const ForwardFn& forward) {
  if (!detail::propagating_tangents()) return false;
  std::vector<Tensor> tangents(inputs.size());
  bool any = false;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && (tangents[i] = detail::live_tangent(inputs[i], name)).defined()) any = true;
  if (!any) return false;
  if (!forward)
    throw_state(name,
                "has no forward-mode rule, and a tangent reached it (an op defined with record() needs a forward "
                "rule, and one defined with ag::Function a static jvp, to be used inside an ag::fwad::DualLevel)");
  Tensor tangent;
  {
    detail::ForwardRuleScope rule;
    NoGradGuard no_grad;
    tangent = forward(tangents);
  }
  if (!tangent.defined()) return true;  // the rule says the derivative is zero
  if (tangent.shape() != output.shape() || tangent.dtype() != output.dtype())
    throw std::logic_error(
        fmt::format("forward rule of '{}' returned a {} tangent of shape {} for a {} output of shape {}", name,
                    dtype_name(tangent.dtype()), shape_str(tangent.shape()), dtype_name(output.dtype()),
                    shape_str(output.shape())));
  detail::set_tangent(output, tangent);
  return true;
}

// Whether the backward formula reads the op's output: some saved tensor holds the output's data
// and is not an input (a reshape's input shares its output's storage). Only such a node keeps
// its output's tangent, for detail::node_output; the others let it go with the output.
bool reads_output(const Tensor& output, const std::vector<Tensor>& inputs, const std::optional<Saved>& saved) {
  if (!saved) return true;  // left out: every input and the output count as saved
  for (const Tensor& s : *saved) {
    if (!s.defined() || s.impl()->storage != output.impl()->storage) continue;
    bool is_input = false;
    for (const Tensor& in : inputs) is_input = is_input || (in.defined() && in.impl() == s.impl());
    if (!is_input) return true;
  }
  return false;
}

// Whether some tensor the backward formula reads carries a tangent (left out, `saved` is every
// input).
bool reads_a_tangent(const std::vector<Tensor>& inputs, const std::optional<Saved>& saved) {
  for (const Tensor& s : saved ? *saved : inputs)
    if (s.defined() && detail::live_tangent(s).defined()) return true;
  return false;
}

}  // namespace

GraphObserver* graph_observer() { return detail::thread_context().observer; }
void set_graph_observer(GraphObserver* observer) { detail::thread_context().observer = observer; }

Tensor record(OpName op, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward,
              std::optional<std::vector<Tensor>> saved, BackwardOrder order, ForwardFn forward) {
  bool dual = propagate_tangent(op.name, output, inputs, forward);
  std::shared_ptr<Node> node;
  if (is_grad_enabled() && any_requires_grad(inputs)) {
    // A node here replaces what the output already has, and the graph behind it is lost without
    // a word: the forward was computed with grad mode on, or an input was passed as the output.
    if (output.impl()->grad_fn)
      throw_invalid(op.name,
                    "record: the output already has a history (it was computed by '{}' with grad mode on), which "
                    "the new node would replace; compute the forward under ag::NoGradGuard, or define the op "
                    "with ag::Function, whose forward runs so",
                    output.impl()->grad_fn->name());
    if (output.requires_grad())
      throw_invalid(op.name,
                    "record: the output is a leaf that requires grad (an input or a parameter itself); return a "
                    "new tensor, such as x.clone() computed under ag::NoGradGuard");
    node = make_node(std::move(op), output, inputs, std::move(backward), saved, order);  // the node keeps the name
    if (dual) {
      bool reads = reads_output(output, inputs, saved);
      node->set_dual(detail::live_level(), reads ? detail::live_tangent(output) : Tensor(),
                     reads || reads_a_tangent(inputs, saved));
    }
  }
  if (GraphObserver* observer = detail::thread_context().observer; observer && !detail::in_backward())
    observer->recorded(node ? node->name() : op.name, output, inputs, node.get());
  if (node) {
    output.impl()->grad_fn = std::move(node);
    output.impl()->requires_grad = true;
  }
  return output;
}

}  // namespace ag
