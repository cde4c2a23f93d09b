// The pieces of the backward pass that ag::grad (grad.cpp) shares with backward() (engine.cpp):
// the pass and its loop, the claims on the nodes it runs, and the gradient sums. Internal: it is
// not installed, and only those two files include it. The functions are defined in engine.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../runtime/error.h"
#include "node.h"
#include "tensor.h"

namespace ag::detail {

// --- gradient accumulation (engine.cpp) ----------------------------------------------------
// A gradient we may add into later: `g` itself if nothing else can see its data, else a copy.
std::shared_ptr<TensorImpl> owned(Tensor g);
// Adds g into a gradient that outlives the pass (a leaf's .grad, a retained gradient, a result
// of ag::grad).
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor g);
// Adds g into the gradient waiting for a node, which nothing outside this backward pass sees.
void accumulate_for_node(std::shared_ptr<TensorImpl>& slot, Tensor g);

// The seed gradient d(root)/d(root): ones for a one-element root, else the caller's gradient.
Tensor seed_gradient(const char* op, const Tensor& root, const Tensor& gradient);

// --- the nodes a pass runs -----------------------------------------------------------------
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

inline void check_not_released(const Node* node) {
  if (node->released())
    throw_state("backward",
                "the graph through '{}' was already freed by an earlier backward(); call the first backward "
                "with retain_graph = true to run backward through it again",
                node->name());
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

// --- the pass (engine.cpp) -----------------------------------------------------------------
// The state of one backward pass: the gradient waiting for each node, and how many of its
// consumers have yet to pass theirs down. run() is the loop.
struct Pass {
  std::unordered_map<Node*, int> pending;
  std::unordered_map<TensorImpl*, int> leaf_pending;  // only leaves with hooks
  std::unordered_map<Node*, std::shared_ptr<TensorImpl>> grads;
  std::vector<Node*> ready;
  Targets* targets = nullptr;      // ag::grad's inputs; null for backward(), which fills .grad
  std::unordered_set<Node*> runs;  // ag::grad: the nodes to run (an input lies behind each)

  void run(bool retain_graph);
  void pass_down(const Node& node, std::vector<Tensor>& input_grads);
  void to_leaf(const Node& node, const std::shared_ptr<TensorImpl>& leaf, Tensor g);
  Tensor take_gradient(Node* node);
};

// Marks this thread as running a backward pass (detail::in_backward() in node.h) while it lives.
struct InBackward {
  InBackward();
  ~InBackward();
  bool previous;
};

}  // namespace ag::detail
