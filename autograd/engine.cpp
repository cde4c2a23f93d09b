// The backward engine: order the graph's nodes so that each runs after every node that uses
// its output, then walk them once, handing each its accumulated output gradient.
//
// Both passes are loops over explicit stacks, not recursion: a graph 100,000 ops deep (an
// unrolled loop, say) must not overflow the call stack. Whoever watches the pass (anomaly mode)
// does so through the observer of hooks.h, called at two points of the loop.
//
// Read from the top: run_backward, the entry point; Pass::run, the loop; the consumer count
// (count_consumers); then gradient accumulation. ag::grad runs the same loop over a planned part
// of the graph (grad.cpp); backward_by_composition is in composition.cpp. What those share with
// this file is declared in engine_internal.h.
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "../kernels/table.h"
#include "../runtime/error.h"
#include "../runtime/profile.h"
#include "context.h"
#include "dispatch.h"
#include "engine_internal.h"
#include "forward.h"
#include "grad_mode.h"
#include "hooks.h"
#include "node.h"

namespace ag {

namespace detail {
namespace {

// Defined below.
std::unordered_map<Node*, int> count_consumers(Node* root, Claims& claims,
                                               std::unordered_map<TensorImpl*, int>& leaf_pending);
void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf);

}  // namespace
}  // namespace detail

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph) {
  using namespace detail;  // the pass and its pieces: engine_internal.h and below
  profile::Scope scope(profile::Family::Engine);
  Tensor seed = seed_gradient("backward", root, gradient);
  // Backward formulas are computed with ops; they record a graph only when asked to.
  AutoGradMode grad_mode(create_graph);
  InBackward in_backward;
  Node* root_node = root.impl()->grad_fn.get();
  if (!root_node) {  // backward on a leaf: d(root)/d(root) = identity
    accumulate(root.impl()->grad, std::move(seed));
    if (!root.impl()->post_accumulate_hooks.empty()) run_post_accumulate_hooks(root.impl());
    return;
  }
  // Each node runs once all of its consumers have passed their gradient down (Kahn's order).
  Claims claims;
  Pass pass;
  pass.pending = count_consumers(root_node, claims, pass.leaf_pending);
  pass.grads[root_node] = create_graph ? seed.impl() : owned(std::move(seed));
  pass.ready.push_back(root_node);
  pass.run(retain_graph);
}

namespace detail {

// --- the pass ------------------------------------------------------------------------------

// Runs the ready nodes until none is left; each one's closure is freed after it ran unless the
// graph is retained.
void Pass::run(bool retain_graph) {
  GraphObserver* observer = graph_observer();
  while (!ready.empty()) {
    Node* node = ready.back();
    ready.pop_back();
    Tensor grad_output = take_gradient(node);
    if (targets) {  // ag::grad: an input computed by this node gets its gradient here
      if (const std::size_t* i = targets->find(node)) targets->add(*i, grad_output);
      if (!runs.count(node)) continue;  // an input with no other input behind it
    } else if (std::shared_ptr<TensorImpl> retained = node->retained_output()) {
      // retain_grad(): the gradient of the node's output is complete now; keep a copy of it
      // (accumulate copies, since grad_output is still ours to hand on).
      accumulate(retained->grad, grad_output);
    }
    if (observer) observer->before_backward(*node, grad_output);
    std::vector<Tensor> input_grads = node->apply(grad_output);
    if (observer) observer->after_backward(*node, input_grads, grad_output);
    pass_down(*node, input_grads);
    if (!retain_graph) node->release();
  }
}

// While it lives, the calling thread's kernel switch is the one node's forward ran under: the
// sums of the gradients a node hands on run on the backend its formula ran on (node.cpp), as
// the formula's own ops did, and the seed of a pass on the backend of the root's forward.
// Hooks run outside it, under the caller's switch.
class BackendOf {
 public:
  explicit BackendOf(const Node& node) : previous_(std::exchange(thread_context().kernels, node.kernels())) {}
  ~BackendOf() { thread_context().kernels = previous_; }
  BackendOf(const BackendOf&) = delete;
  BackendOf& operator=(const BackendOf&) = delete;

 private:
  std::uint8_t previous_;
};

// Hands each input's gradient on: to a leaf, or to the node that made the input, which
// becomes ready once every one of its consumers has run.
void Pass::pass_down(const Node& node, std::vector<Tensor>& input_grads) {
  for (std::size_t i = 0; i < input_grads.size(); ++i) {
    const Edge& e = node.next_edges()[i];
    // Moved, not copied: a gradient nobody else holds becomes the accumulator as it is.
    if (e.leaf) to_leaf(node, e.leaf, std::move(input_grads[i]));
    if (!e.node) continue;
    auto waiting = pending.find(e.node.get());
    if (waiting == pending.end()) continue;  // ag::grad: no input lies behind it
    if (input_grads[i].defined()) {
      BackendOf backend(node);
      accumulate_for_node(grads[e.node.get()], std::move(input_grads[i]));
    }
    if (--waiting->second > 0) continue;
    // A node that got no gradient at all (all undefined) still has to run so its own inputs'
    // counts go down; it gets zeros.
    if (!grads.count(e.node.get())) {
      BackendOf backend(node);
      grads[e.node.get()] = zeros(e.shape, e.dtype).impl();
    }
    ready.push_back(e.node.get());
  }
}

// The gradient `node` sends a leaf: into its .grad, or for ag::grad into the input's result.
void Pass::to_leaf(const Node& node, const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
  if (targets) {
    if (const std::size_t* i = targets->find(leaf.get())) {
      BackendOf backend(node);
      targets->add(*i, g);
    }
    return;
  }
  if (g.defined()) {
    BackendOf backend(node);
    accumulate(leaf->grad, std::move(g));
  }
  if (!leaf->post_accumulate_hooks.empty() && --leaf_pending[leaf.get()] == 0) run_post_accumulate_hooks(leaf);
}

Tensor Pass::take_gradient(Node* node) {
  auto slot = grads.find(node);
  Tensor g(std::move(slot->second));
  grads.erase(slot);
  return g;
}

namespace {

// A leaf's hooks, run when its gradient is complete (a copy of the list: a hook may remove itself).
void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  auto hooks = leaf->post_accumulate_hooks;
  Tensor t(leaf);
  for (auto& [handle, hook] : hooks) hook(t);
}

// --- the consumer count --------------------------------------------------------------------

// Every node reachable from the root, with the number of its consumers: how many gradients it
// must wait for. All must still hold their saved tensors, checked before anything accumulates,
// and each is claimed for this pass. Leaves with a post-accumulate hook are counted the same
// way, in `leaf_pending`: the hook runs when the last of their gradients has been added.
std::unordered_map<Node*, int> count_consumers(Node* root, Claims& claims,
                                               std::unordered_map<TensorImpl*, int>& leaf_pending) {
  std::unordered_map<Node*, int> pending{{root, 0}};
  std::vector<Node*> stack{root};
  claims.claim(root);
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    check_not_released(node);
    for (const Edge& e : node->next_edges()) {
      if (e.leaf && !e.leaf->post_accumulate_hooks.empty()) ++leaf_pending[e.leaf.get()];
      if (!e.node) continue;
      auto [it, first_visit] = pending.try_emplace(e.node.get(), 0);
      ++it->second;
      if (!first_visit) continue;
      claims.claim(e.node.get());
      stack.push_back(e.node.get());
    }
  }
  return pending;
}

// --- gradient accumulation -----------------------------------------------------------------

// y = a + b over n elements, by the add of the calling thread's backend (kernels/table.h), which
// may write into a itself.
void add_elements(const void* a, const Tensor& b, void* y) {
  std::int64_t n = b.numel(), stride = 1;
  backends::BroadcastSizes sizes{.rank = 1, .shape = &n, .a_strides = &stride, .b_strides = &stride};
  dispatch_floating(b.dtype(), "backward", [&](auto tag) {
    using T = decltype(tag);
    current_backend().table<T>().arithmetic(backends::Arithmetic::Add, sizes, static_cast<const T*>(a), b.data_ptr<T>(),
                                            static_cast<T*>(y));
  });
}

// acc += g, elementwise, in place. A write in place, so it bumps acc's version like any other.
void add_into(TensorImpl& acc, const Tensor& g) {
  acc.storage->bump_version();
  add_elements(acc.storage->data(), g, acc.storage->data());
}

// a + b, elementwise, into a new tensor.
std::shared_ptr<TensorImpl> sum_of(const TensorImpl& a, const Tensor& b) {
  Tensor out = empty(b.shape(), b.dtype());
  add_elements(a.storage->data(), b, out.mutable_raw_data());
  return out.impl();
}

// Sums by ops, out of place: with create_graph (the sum joins the graph), and inside a forward-mode
// level (the sum's rule adds the tangents too; forward.h).
bool by_ops() { return is_grad_enabled() || live_level() != 0; }

// a + b for two gradients of one shape and dtype, as an op of the graph: the sum by ops above.
// It is ag::add without broadcasting, defined here because the engine sits below ops/ (the
// linker holds it to that, docs/architecture.md). Both inputs get dy; the tangent is the sum of
// the tangents, itself summed by this op so that it too can join a graph.
Tensor sum_in_graph(const Tensor& a, const Tensor& b) {
  return record(
      {"add", profile::Family::Elementwise}, Tensor(sum_of(*a.impl(), b)), {a, b},
      [](const Tensor& dy, const std::vector<bool>& need) {
        return std::vector<Tensor>{need[0] ? dy : Tensor(), need[1] ? dy : Tensor()};
      },
      Saved{}, BackwardOrder::AnyOrder,
      [](const std::vector<Tensor>& t) {
        return !t[0].defined() ? t[1] : !t[1].defined() ? t[0] : sum_in_graph(t[0], t[1]);
      });
}

// True if `t` is the only handle on its data, so adding into it in place changes nothing else.
bool sole_owner(const std::shared_ptr<TensorImpl>& t) { return t.use_count() == 1 && t->storage.use_count() == 1; }

// Two backward passes on different threads may reach the same leaf (two losses over shared
// parameters); its .grad is then updated under this lock, one pass at a time.
std::mutex leaf_grad_mutex;

}  // namespace

// A gradient we may add into later: `g` itself if nothing else can see its data, else a copy.
// (Backward closures often return the upstream gradient itself, e.g. for add.)
std::shared_ptr<TensorImpl> owned(Tensor g) {
  if (sole_owner(g.impl())) return g.impl();
  Tensor copy = empty(g.shape(), g.dtype());
  std::memcpy(copy.mutable_raw_data(), g.mutable_raw_data(),
              static_cast<std::size_t>(g.numel()) * dtype_size(g.dtype()));
  return copy.impl();
}

// Adds g into a gradient that outlives the pass (a leaf's .grad, a retained gradient, a result
// of ag::grad), which the caller sees and later passes add into: owned from the first gradient
// on. With grad mode on (create_graph) the sum is an op of the graph, out of place, and the
// first gradient is kept with its history (cloned if something else holds it).
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor g) {
  std::lock_guard lock(leaf_grad_mutex);
  if (by_ops())
    slot = !slot ? (sole_owner(g.impl()) ? g.impl() : g.clone().impl()) : sum_in_graph(Tensor(slot), g).impl();
  else if (!slot)
    slot = owned(std::move(g));
  else
    add_into(*slot, g);
}

// Adds g into the gradient waiting for a node, which nothing outside this backward pass sees.
// The first one is kept as it is, even if other tensors share it (an add's backward hands the
// same gradient to both inputs): most nodes get only one, and then nothing is copied. A second
// is added in place into a gradient nobody else holds, else summed into a new one (by an op of
// the graph, with create_graph).
void accumulate_for_node(std::shared_ptr<TensorImpl>& slot, Tensor g) {
  if (!slot)
    slot = g.impl();
  else if (by_ops())
    slot = sum_in_graph(Tensor(slot), g).impl();
  else if (sole_owner(slot))
    add_into(*slot, g);
  else
    slot = sum_of(*slot, g);
}

// The seed gradient d(root)/d(root): ones for a one-element root, else the caller's gradient.
Tensor seed_gradient(const char* op, const Tensor& root, const Tensor& gradient) {
  if (!root.requires_grad())
    throw_invalid(op,
                  "tensor with shape {} does not require grad: no input of its computation had requires_grad set "
                  "(or it was computed under NoGradGuard)",
                  shape_str(root.shape()));
  if (!gradient.defined()) {
    if (root.numel() != 1)
      throw_invalid(op,
                    "output has shape {} ({} elements); {} without a gradient needs a one-element tensor such as a "
                    "loss. Pass a gradient of shape {}, or reduce the output first (e.g. .sum())",
                    shape_str(root.shape()), root.numel(), op == std::string_view("grad") ? "grad()" : "backward()",
                    shape_str(root.shape()));
    // made on the backend the root's forward ran on, like every gradient the pass computes
    if (const Node* node = root.impl()->grad_fn.get()) {
      BackendOf backend(*node);
      return ones_like(root);
    }
    return ones_like(root);
  }
  if (gradient.shape() != root.shape() || gradient.dtype() != root.dtype())
    throw_invalid(op, "gradient is {} with shape {}, but the output is {} with shape {}{}",
                  dtype_name(gradient.dtype()), shape_str(gradient.shape()), dtype_name(root.dtype()),
                  shape_str(root.shape()),
                  gradient.dtype() == root.dtype()
                      ? std::string()
                      : fmt::format(" (convert the gradient with .to({}))", dtype_constant(root.dtype())));
  return gradient;
}

// --- which thread is in a backward pass ----------------------------------------------------

InBackward::InBackward() : previous(thread_context().in_backward) { thread_context().in_backward = true; }
InBackward::~InBackward() { thread_context().in_backward = previous; }

bool in_backward() { return thread_context().in_backward; }

}  // namespace detail

}  // namespace ag
