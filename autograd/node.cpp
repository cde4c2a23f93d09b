// Graph nodes and record(): how an op joins the graph. The backward pass over the graph is in
// engine.cpp.
#include <fmt/format.h>

#include <atomic>
#include <stdexcept>
#include <utility>

#include "grad_mode.h"
#include "hooks.h"
#include "node.h"

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

namespace {

thread_local GraphObserver* t_observer = nullptr;

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const Tensor& in : inputs)
    if (in.defined() && in.requires_grad()) return true;
  return false;
}

// The node for op `name`: one edge per input, to the input's own node or, for a leaf that
// requires grad, to the leaf itself.
std::shared_ptr<Node> make_node(std::string name, const Tensor& output, const std::vector<Tensor>& inputs,
                                BackwardFn backward) {
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
  return node;
}

}  // namespace

GraphObserver* graph_observer() { return t_observer; }
void set_graph_observer(GraphObserver* observer) { t_observer = observer; }

Tensor record(std::string name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  std::shared_ptr<Node> node;
  if (is_grad_enabled() && any_requires_grad(inputs)) node = make_node(name, output, inputs, std::move(backward));
  if (t_observer && !detail::in_backward()) t_observer->recorded(name, output, inputs, node.get());
  if (node) {
    output.impl()->grad_fn = std::move(node);
    output.impl()->requires_grad = true;
  }
  return output;
}

}  // namespace ag
