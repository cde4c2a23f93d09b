// The backward engine: order the graph's nodes so that each runs after every node that uses
// its output, then walk them once, handing each its accumulated output gradient.
//
// Both passes are loops over explicit stacks, not recursion: a graph 100,000 ops deep (an
// unrolled loop, say) must not overflow the call stack.
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "anomaly.h"
#include "dispatch.h"
#include "error.h"
#include "grad_mode.h"
#include "node.h"
#include "parallel.h"

namespace ag {

extern std::atomic<std::int64_t> g_live_nodes;  // memory_stats(), defined in tensor.cpp

Node::Node(std::string name, std::vector<Edge> next_edges, BackwardFn backward)
    : name_(std::move(name)), next_edges_(std::move(next_edges)), backward_(std::move(backward)) {
  ++g_live_nodes;
}

// Dropping a loss frees its graph. Left to the default, each node's destructor would free the
// next node from inside itself, one stack frame per op of depth; instead the chain is taken
// apart here in a loop.
Node::~Node() {
  --g_live_nodes;
  std::vector<std::shared_ptr<Node>> orphans;
  auto adopt_inputs = [&orphans](Node& node) {
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

std::vector<Tensor> Node::apply(const Tensor& grad_output) const {
  std::vector<bool> needs(next_edges_.size());
  for (std::size_t i = 0; i < needs.size(); ++i) needs[i] = next_edges_[i].needs_grad();

  std::vector<Tensor> grads = backward_(grad_output, needs);

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

Tensor record(std::string name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  bool anomaly = is_anomaly_enabled() && !detail::in_backward();
  if (anomaly) detail::check_forward(name, output, inputs);
  if (!is_grad_enabled()) return output;
  bool any_requires_grad = false;
  for (const Tensor& in : inputs) any_requires_grad = any_requires_grad || (in.defined() && in.requires_grad());
  if (!any_requires_grad) return output;

  std::vector<Edge> edges(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined()) continue;
    if (in.impl() == output.impl())
      throw std::logic_error(fmt::format("op '{}' returned one of its inputs; ops must return a new tensor", name));
    edges[i].shape = in.shape();
    edges[i].dtype = in.dtype();
    if (!in.requires_grad()) continue;
    if (in.impl()->grad_fn)
      edges[i].node = in.impl()->grad_fn;
    else
      edges[i].leaf = in.impl();
  }
  auto node = std::make_shared<Node>(std::move(name), std::move(edges), std::move(backward));
  node->set_output(output.shape(), output.dtype());
  if (anomaly) node->set_record_site(detail::capture_record_site());
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
  return output;
}

namespace {

// acc += g, elementwise, in place; split across threads when large.
void add_into(TensorImpl& acc, const Tensor& g) {
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

// Adds g into a leaf's .grad, which the caller sees and later backward calls add into: owned
// from the first gradient on.
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor g) {
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

}  // namespace

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  if (!root.requires_grad())
    throw_invalid("backward",
                  "tensor with shape {} does not require grad: no input of its computation had requires_grad set "
                  "(or it was computed under NoGradGuard)",
                  shape_str(root.shape()));
  Tensor seed = gradient;
  if (!seed.defined()) {
    if (root.numel() != 1)
      throw_invalid("backward",
                    "output has shape {} ({} elements); backward() without a gradient needs a one-element tensor "
                    "such as a loss. Pass a gradient of shape {}, or reduce the output first (e.g. .sum())",
                    shape_str(root.shape()), root.numel(), shape_str(root.shape()));
    seed = ones_like(root);
  } else if (seed.shape() != root.shape() || seed.dtype() != root.dtype()) {
    throw_invalid("backward", "gradient is {} with shape {}, but the output is {} with shape {}",
                  dtype_name(seed.dtype()), shape_str(seed.shape()), dtype_name(root.dtype()), shape_str(root.shape()));
  }
  NoGradGuard no_grad;                // backward formulas are computed with ops; they must not record a graph
  detail::BackwardScope in_backward;  // ...nor be checked as forward ops in anomaly mode
  bool anomaly = is_anomaly_enabled();

  const std::shared_ptr<Node>& root_node = root.impl()->grad_fn;
  if (!root_node) {  // backward on a leaf: d(root)/d(root) = identity
    accumulate(root.impl()->grad, std::move(seed));
    return;
  }

  // 1. Find every node reachable from the root and count its consumers (its pending inputs).
  //    Check they are all still alive before anything accumulates.
  std::unordered_map<Node*, int> pending{{root_node.get(), 0}};
  std::vector<Node*> stack{root_node.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (node->released())
      throw_state("backward",
                  "the graph through '{}' was already freed by an earlier backward(); call the first backward "
                  "with retain_graph = true to run backward through it again",
                  node->name());
    for (const Edge& e : node->next_edges()) {
      if (!e.node) continue;
      auto [it, first_visit] = pending.try_emplace(e.node.get(), 0);
      ++it->second;
      if (first_visit) stack.push_back(e.node.get());
    }
  }

  // 2. Run each node once all of its consumers have passed their gradient down (Kahn's order).
  std::unordered_map<Node*, std::shared_ptr<TensorImpl>> grads;
  grads[root_node.get()] = owned(std::move(seed));
  std::vector<Node*> ready{root_node.get()};
  while (!ready.empty()) {
    Node* node = ready.back();
    ready.pop_back();
    auto slot = grads.find(node);
    Tensor grad_output(std::move(slot->second));
    grads.erase(slot);

    if (anomaly) node->set_grad_norm(detail::norm_of(grad_output));
    std::vector<Tensor> input_grads = node->apply(grad_output);
    if (anomaly)
      for (std::size_t i = 0; i < input_grads.size(); ++i)
        if (input_grads[i].defined()) detail::check_backward(*node, i, input_grads[i], grad_output);
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      const Edge& e = node->next_edges()[i];
      // Moved, not copied: a gradient nobody else holds becomes the accumulator as it is.
      if (e.leaf && input_grads[i].defined()) accumulate(e.leaf->grad, std::move(input_grads[i]));
      if (!e.node) continue;
      if (input_grads[i].defined()) accumulate_for_node(grads[e.node.get()], std::move(input_grads[i]));
      if (--pending[e.node.get()] == 0) {
        // Every consumer has run. A node that got no gradient at all (all undefined) still
        // has to run so its own inputs' counts go down; it gets zeros.
        if (!grads.count(e.node.get())) {
          Tensor zero = zeros(e.shape, e.dtype);
          grads[e.node.get()] = zero.impl();
        }
        ready.push_back(e.node.get());
      }
    }
    if (!retain_graph) node->release();
  }
}

}  // namespace ag
