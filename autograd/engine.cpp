// The backward engine: order the graph's nodes so that each runs after every node that uses
// its output, then walk them once, handing each its accumulated output gradient.
//
// Both passes are loops over explicit stacks, not recursion: a graph 100,000 ops deep (an
// unrolled loop, say) must not overflow the call stack. Whoever watches the pass (anomaly mode)
// does so through the observer of hooks.h, called at two points of the loop.
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "../runtime/parallel.h"
#include "dispatch.h"
#include "error.h"
#include "grad_mode.h"
#include "hooks.h"
#include "node.h"

namespace ag {

namespace {

thread_local bool t_in_backward = false;

// acc += g, elementwise, in place; split across threads when large. A write in place, so it
// bumps acc's version like any other.
void add_into(TensorImpl& acc, const Tensor& g) {
  acc.storage->bump_version();
  dispatch_floating(acc.dtype, "backward", [&](auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(acc.storage->data());
    const T* b = g.data_ptr<T>();
    parallel_for(g.numel(), 1 << 15, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) a[i] += b[i];
    });
  });
}

// a + b, elementwise, into a new tensor.
std::shared_ptr<TensorImpl> sum_of(const TensorImpl& a, const Tensor& b) {
  Tensor out = empty(b.shape(), b.dtype());
  dispatch_floating(b.dtype(), "backward", [&](auto tag) {
    using T = decltype(tag);
    const T *pa = static_cast<const T*>(a.storage->data()), *pb = b.data_ptr<T>();
    T* po = out.data_ptr<T>();
    parallel_for(b.numel(), 1 << 15, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) po[i] = pa[i] + pb[i];
    });
  });
  return out.impl();
}

// True if `t` is the only handle on its data, so adding into it in place changes nothing else.
bool sole_owner(const std::shared_ptr<TensorImpl>& t) { return t.use_count() == 1 && t->storage.use_count() == 1; }

// A gradient we may add into later: `g` itself if nothing else can see its data, else a copy.
// (Backward closures often return the upstream gradient itself, e.g. for add.)
std::shared_ptr<TensorImpl> owned(Tensor g) {
  if (sole_owner(g.impl())) return g.impl();
  Tensor copy = empty(g.shape(), g.dtype());
  std::memcpy(copy.raw_data(), g.raw_data(), static_cast<std::size_t>(g.numel()) * dtype_size(g.dtype()));
  return copy.impl();
}

// Two backward passes on different threads may reach the same leaf (two losses over shared
// parameters); its .grad is then updated under this lock, one pass at a time.
std::mutex leaf_grad_mutex;

// Adds g into a leaf's .grad, which the caller sees and later backward calls add into: owned
// from the first gradient on.
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor g) {
  std::lock_guard lock(leaf_grad_mutex);
  if (!slot)
    slot = owned(std::move(g));
  else
    add_into(*slot, g);
}

// Adds g into the gradient waiting for a node, which nothing outside this backward pass sees.
// The first one is kept as it is, even if other tensors share it (an add's backward hands the
// same gradient to both inputs): most nodes get only one, and then nothing is copied. A second
// is added in place into a gradient nobody else holds, else summed into a new one.
void accumulate_for_node(std::shared_ptr<TensorImpl>& slot, Tensor g) {
  if (!slot)
    slot = g.impl();
  else if (sole_owner(slot))
    add_into(*slot, g);
  else
    slot = sum_of(*slot, g);
}

// The seed gradient d(root)/d(root): ones for a one-element root, else the caller's gradient.
Tensor seed_gradient(const Tensor& root, const Tensor& gradient) {
  if (!root.requires_grad())
    throw_invalid("backward",
                  "tensor with shape {} does not require grad: no input of its computation had requires_grad set "
                  "(or it was computed under NoGradGuard)",
                  shape_str(root.shape()));
  if (!gradient.defined()) {
    if (root.numel() != 1)
      throw_invalid("backward",
                    "output has shape {} ({} elements); backward() without a gradient needs a one-element tensor "
                    "such as a loss. Pass a gradient of shape {}, or reduce the output first (e.g. .sum())",
                    shape_str(root.shape()), root.numel(), shape_str(root.shape()));
    return ones_like(root);
  }
  if (gradient.shape() != root.shape() || gradient.dtype() != root.dtype())
    throw_invalid("backward", "gradient is {} with shape {}, but the output is {} with shape {}{}",
                  dtype_name(gradient.dtype()), shape_str(gradient.shape()), dtype_name(root.dtype()),
                  shape_str(root.shape()),
                  gradient.dtype() == root.dtype()
                      ? std::string()
                      : fmt::format(" (convert the gradient with .to({}))", dtype_constant(root.dtype())));
  return gradient;
}

// The nodes one backward pass runs, claimed for it: a graph (or a part of one) cannot be
// differentiated by two threads at once, since each pass frees the closures it has run and
// hands gradients to nodes the other may be running. Two passes over separate graphs that meet
// only at leaves are fine (see leaf_grad_mutex). The claims end with the pass.
class Claims {
 public:
  Claims() = default;
  Claims(const Claims&) = delete;
  Claims& operator=(const Claims&) = delete;
  ~Claims() {
    for (Node* node : nodes_) node->end_backward();
  }
  void claim(Node* node) {
    if (!node->begin_backward())
      throw_state("backward",
                  "the graph through '{}' is being differentiated by another thread at the same time; backward "
                  "from several threads is supported only for graphs that share nothing but leaves",
                  node->name());
    nodes_.push_back(node);
  }

 private:
  std::vector<Node*> nodes_;
};

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
    if (node->released())
      throw_state("backward",
                  "the graph through '{}' was already freed by an earlier backward(); call the first backward "
                  "with retain_graph = true to run backward through it again",
                  node->name());
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

// A leaf's hooks, run when its gradient is complete (a copy of the list: a hook may remove itself).
void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  auto hooks = leaf->post_accumulate_hooks;
  Tensor t(leaf);
  for (auto& [handle, hook] : hooks) hook(t);
}

// The state of one backward pass: the gradient waiting for each node, and how many of its
// consumers have yet to pass theirs down.
struct Pass {
  std::unordered_map<Node*, int> pending;
  std::unordered_map<TensorImpl*, int> leaf_pending;  // only leaves with hooks
  std::unordered_map<Node*, std::shared_ptr<TensorImpl>> grads;
  std::vector<Node*> ready;

  Tensor take_gradient(Node* node) {
    auto slot = grads.find(node);
    Tensor g(std::move(slot->second));
    grads.erase(slot);
    return g;
  }

  // Hands each input's gradient on: into a leaf's .grad, or to the node that made the input,
  // which becomes ready once every one of its consumers has run.
  void pass_down(const Node& node, std::vector<Tensor>& input_grads) {
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      const Edge& e = node.next_edges()[i];
      // Moved, not copied: a gradient nobody else holds becomes the accumulator as it is.
      if (e.leaf && input_grads[i].defined()) accumulate(e.leaf->grad, std::move(input_grads[i]));
      if (e.leaf && !e.leaf->post_accumulate_hooks.empty() && --leaf_pending[e.leaf.get()] == 0)
        run_post_accumulate_hooks(e.leaf);
      if (!e.node) continue;
      if (input_grads[i].defined()) accumulate_for_node(grads[e.node.get()], std::move(input_grads[i]));
      if (--pending[e.node.get()] > 0) continue;
      // A node that got no gradient at all (all undefined) still has to run so its own inputs'
      // counts go down; it gets zeros.
      if (!grads.count(e.node.get())) grads[e.node.get()] = zeros(e.shape, e.dtype).impl();
      ready.push_back(e.node.get());
    }
  }
};

struct InBackward {
  bool previous = t_in_backward;
  InBackward() { t_in_backward = true; }
  ~InBackward() { t_in_backward = previous; }
};

}  // namespace

bool detail::in_backward() { return t_in_backward; }

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  Tensor seed = seed_gradient(root, gradient);
  NoGradGuard no_grad;  // backward formulas are computed with ops; they must not record a graph
  InBackward in_backward;
  Node* root_node = root.impl()->grad_fn.get();
  if (!root_node) {  // backward on a leaf: d(root)/d(root) = identity
    accumulate(root.impl()->grad, std::move(seed));
    if (!root.impl()->post_accumulate_hooks.empty()) run_post_accumulate_hooks(root.impl());
    return;
  }
  GraphObserver* observer = graph_observer();

  // Each node runs once all of its consumers have passed their gradient down (Kahn's order).
  Claims claims;
  Pass pass;
  pass.pending = count_consumers(root_node, claims, pass.leaf_pending);
  pass.grads[root_node] = owned(std::move(seed));
  pass.ready.push_back(root_node);
  while (!pass.ready.empty()) {
    Node* node = pass.ready.back();
    pass.ready.pop_back();
    Tensor grad_output = pass.take_gradient(node);
    // retain_grad(): the gradient of the node's output is complete now; keep a copy of it
    // (accumulate copies, since grad_output is still ours to hand on).
    if (std::shared_ptr<TensorImpl> retained = node->retained_output()) accumulate(retained->grad, grad_output);
    if (observer) observer->before_backward(*node, grad_output);
    std::vector<Tensor> input_grads = node->apply(grad_output);
    if (observer) observer->after_backward(*node, input_grads, grad_output);
    pass.pass_down(*node, input_grads);
    if (!retain_graph) node->release();
  }
}

}  // namespace ag
