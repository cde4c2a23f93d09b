// The backward engine: order the graph's nodes so that each runs after every node that uses
// its output, then walk them once, handing each its accumulated output gradient.
//
// Both passes are loops over explicit stacks, not recursion: a graph 100,000 ops deep (an
// unrolled loop, say) must not overflow the call stack. Whoever watches the pass (anomaly mode)
// does so through the observer of hooks.h, called at two points of the loop.
#include <cstring>
#include <string_view>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "../ops/binary.h"
#include "../runtime/parallel.h"
#include "dispatch.h"
#include "error.h"
#include "grad.h"
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

// Adds g into a gradient that outlives the pass (a leaf's .grad, a retained gradient, a result
// of ag::grad), which the caller sees and later passes add into: owned from the first gradient
// on. With grad mode on (create_graph) the sum is an op of the graph, out of place, and the
// first gradient is kept with its history (cloned if something else holds it).
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor g) {
  std::lock_guard lock(leaf_grad_mutex);
  if (is_grad_enabled())
    slot = !slot ? (sole_owner(g.impl()) ? g.impl() : g.clone().impl()) : add(Tensor(slot), g).impl();
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
  else if (is_grad_enabled())
    slot = add(Tensor(slot), g).impl();
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

void check_not_released(const Node* node) {
  if (node->released())
    throw_state("backward",
                "the graph through '{}' was already freed by an earlier backward(); call the first backward "
                "with retain_graph = true to run backward through it again",
                node->name());
}

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

// What ag::grad differentiates with respect to: each input is a leaf, or the node that
// computed it. Their gradients are collected here instead of accumulated into .grad.
struct Targets {
  std::unordered_map<const void*, std::size_t> index;  // leaf TensorImpl or Node -> result slot
  std::vector<std::shared_ptr<TensorImpl>> results;
  std::vector<bool> reached;
  bool through_inputs = true;  // false: an input's own history is not differentiated

  static const void* key(const Tensor& t) {
    return t.impl()->grad_fn ? static_cast<const void*>(t.impl()->grad_fn.get()) : t.impl().get();
  }
  const std::size_t* find(const void* k) const {
    auto it = index.find(k);
    return it == index.end() ? nullptr : &it->second;
  }
  void add(std::size_t i, const Tensor& g) {
    reached[i] = true;
    if (g.defined()) accumulate(results[i], g);
  }
};

// The part of the graph ag::grad runs: the nodes reachable from the roots that lead to an input
// (an input's own node runs only if another input lies behind it), each claimed, and the count
// of consumers among them for these and for the inputs' nodes. Found by one depth-first walk
// that settles a node after its inputs.
struct Plan {
  std::unordered_map<Node*, int> pending;
  std::unordered_set<Node*> runs;
};

Plan plan_for_targets(const std::vector<Node*>& roots, const Targets& targets, Claims& claims) {
  std::unordered_map<Node*, bool> leads;  // seen nodes: whether an input lies behind them
  auto edge_leads = [&](const Edge& e) {
    if (e.leaf) return targets.find(e.leaf.get()) != nullptr;
    return e.node && (targets.find(e.node.get()) || leads.at(e.node.get()));
  };
  std::vector<std::pair<Node*, std::size_t>> stack;  // node, next edge to look at
  for (Node* root : roots) {
    if (!leads.try_emplace(root, false).second) continue;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto [node, next] = stack.back();
      bool expand = targets.through_inputs || !targets.find(node);
      if (expand && next < node->next_edges().size()) {
        ++stack.back().second;
        const Edge& e = node->next_edges()[next];
        if (e.node && leads.try_emplace(e.node.get(), false).second) stack.emplace_back(e.node.get(), 0);
        continue;
      }
      stack.pop_back();
      if (expand)
        for (const Edge& e : node->next_edges()) leads[node] = leads[node] || edge_leads(e);
    }
  }
  Plan plan;
  for (Node* root : roots)
    if (leads[root] || targets.find(root)) plan.pending.try_emplace(root, 0);
  for (const auto& [node, runs] : leads) {
    if (!runs) continue;
    check_not_released(node);
    claims.claim(node);
    plan.runs.insert(node);
    plan.pending.try_emplace(node, 0);
    for (const Edge& e : node->next_edges())
      if (e.node && (leads.at(e.node.get()) || targets.find(e.node.get()))) ++plan.pending[e.node.get()];
  }
  return plan;
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
  Targets* targets = nullptr;  // ag::grad's inputs; null for backward(), which fills .grad
  std::unordered_set<Node*> runs;  // ag::grad: the nodes to run (an input lies behind each)

  Tensor take_gradient(Node* node) {
    auto slot = grads.find(node);
    Tensor g(std::move(slot->second));
    grads.erase(slot);
    return g;
  }

  // The gradient reaching a leaf: into its .grad, or for ag::grad into the input's result.
  void to_leaf(const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    if (targets) {
      if (const std::size_t* i = targets->find(leaf.get())) targets->add(*i, g);
      return;
    }
    if (g.defined()) accumulate(leaf->grad, std::move(g));
    if (!leaf->post_accumulate_hooks.empty() && --leaf_pending[leaf.get()] == 0) run_post_accumulate_hooks(leaf);
  }

  // Hands each input's gradient on: to a leaf, or to the node that made the input, which
  // becomes ready once every one of its consumers has run.
  void pass_down(const Node& node, std::vector<Tensor>& input_grads) {
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      const Edge& e = node.next_edges()[i];
      // Moved, not copied: a gradient nobody else holds becomes the accumulator as it is.
      if (e.leaf) to_leaf(e.leaf, std::move(input_grads[i]));
      if (!e.node) continue;
      auto waiting = pending.find(e.node.get());
      if (waiting == pending.end()) continue;  // ag::grad: no input lies behind it
      if (input_grads[i].defined()) accumulate_for_node(grads[e.node.get()], std::move(input_grads[i]));
      if (--waiting->second > 0) continue;
      // A node that got no gradient at all (all undefined) still has to run so its own inputs'
      // counts go down; it gets zeros.
      if (!grads.count(e.node.get())) grads[e.node.get()] = zeros(e.shape, e.dtype).impl();
      ready.push_back(e.node.get());
    }
  }

  // Runs the ready nodes until none is left; each one's closure is freed after it ran unless the
  // graph is retained.
  void run(bool retain_graph) {
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
};

struct InBackward {
  bool previous = t_in_backward;
  InBackward() { t_in_backward = true; }
  ~InBackward() { t_in_backward = previous; }
};

}  // namespace

bool detail::in_backward() { return t_in_backward; }

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph) {
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

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, const GradOptions& options) {
  return detail::grad_of(outputs, inputs, grad_outputs, options, /*through_inputs=*/true);
}

std::vector<Tensor> detail::grad_of(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& grad_outputs, const GradOptions& options,
                                    bool through_inputs) {
  if (outputs.empty()) throw_invalid("grad", "no outputs to differentiate");
  if (inputs.empty()) throw_invalid("grad", "no inputs to differentiate with respect to");
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    throw_invalid("grad", "{} grad_outputs for {} outputs: give one per output (undefined for a one-element output)",
                  grad_outputs.size(), outputs.size());
  Targets targets;
  targets.through_inputs = through_inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined()) throw_invalid("grad", "input {} is undefined", i);
    if (!in.requires_grad())
      throw_invalid("grad", "input {} ({} {}) does not require grad, so nothing can be differentiated with respect to it",
                    i, dtype_name(in.dtype()), shape_str(in.shape()));
    targets.index.try_emplace(Targets::key(in), i);  // a repeated input shares the first one's result
  }
  targets.results.resize(inputs.size());
  targets.reached.resize(inputs.size());
  std::vector<Tensor> seeds;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].defined()) throw_invalid("grad", "output {} is undefined", k);
    seeds.push_back(seed_gradient("grad", outputs[k], grad_outputs.empty() ? Tensor() : grad_outputs[k]));
  }

  bool create_graph = options.create_graph;
  AutoGradMode grad_mode(create_graph);
  InBackward in_backward;
  Claims claims;
  Pass pass;
  pass.targets = &targets;
  std::vector<Node*> roots;
  for (const Tensor& out : outputs)
    if (out.impl()->grad_fn) roots.push_back(out.impl()->grad_fn.get());
  Plan plan = plan_for_targets(roots, targets, claims);
  pass.pending = std::move(plan.pending);
  pass.runs = std::move(plan.runs);
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& out = outputs[k];
    Node* node = out.impl()->grad_fn.get();
    Tensor seed = create_graph ? seeds[k] : Tensor(owned(seeds[k]));
    if (!node) {  // a leaf output: d(out)/d(out), for an input that is the output itself
      if (const std::size_t* i = targets.find(out.impl().get())) targets.add(*i, seed);
      continue;
    }
    if (pass.pending.count(node)) accumulate_for_node(pass.grads[node], seed);  // else no input lies behind it
  }
  std::unordered_set<Node*> queued;
  for (Node* root : roots)
    if (pass.pending.count(root) && pass.pending[root] == 0 && queued.insert(root).second) pass.ready.push_back(root);
  pass.run(options.retain_graph.value_or(create_graph));

  std::vector<Tensor> result(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::size_t first = *targets.find(Targets::key(inputs[i]));
    if (!targets.reached[first]) {
      if (!options.allow_unused)
        throw_invalid("grad",
                      "input {} ({} {}) was not used to compute the outputs, so it has no gradient; pass "
                      "GradOptions{{.allow_unused = true}} to get an undefined tensor for it instead",
                      i, dtype_name(inputs[i].dtype()), shape_str(inputs[i].shape()));
      continue;
    }
    result[i] = targets.results[first] ? Tensor(targets.results[first]) : zeros_like(inputs[i]);
  }
  return result;
}

std::vector<Tensor> detail::backward_by_composition(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                                   const std::vector<Tensor>& inputs, const Tensor& grad_output,
                                                   const std::vector<bool>& needs) {
  // A tensor passed twice (attention(x, x, x)) needs one partial derivative per position: each
  // repeat is handed to f as a reshape of itself, a tensor of its own whose history leads back
  // to the original, so that the walk below stops there.
  std::vector<Tensor> args = inputs;
  for (std::size_t i = 0; i < args.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (needs[i] && args[i].defined() && args[i].impl() == inputs[j].impl()) {
        args[i] = args[i].reshape(args[i].shape());
        break;
      }
  Tensor output = f(args);
  std::vector<Tensor> wanted;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (needs[i]) wanted.push_back(args[i]);
  std::vector<Tensor> grads(inputs.size());
  if (!output.requires_grad()) {  // no input that needs a gradient is used: zeros
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (needs[i]) grads[i] = zeros_like(inputs[i]);
    return grads;
  }
  std::vector<Tensor> found = grad_of({output}, wanted, {grad_output},
                                      {.retain_graph = true, .create_graph = true, .allow_unused = true},
                                      /*through_inputs=*/false);
  for (std::size_t i = 0, k = 0; i < inputs.size(); ++i)
    if (needs[i]) {
      grads[i] = found[k].defined() ? found[k] : zeros_like(inputs[i]);
      ++k;
    }
  return grads;
}

}  // namespace ag
