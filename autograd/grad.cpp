// ag::grad: the backward pass of engine.cpp, run over only the part of the graph that leads to
// the inputs, with their gradients collected instead of accumulated into .grad. First the plan
// (plan_for_targets): which nodes to run, and how many gradients each waits for; then the same
// loop as backward(), Pass::run. docs/higher_order.md explains the design.
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../runtime/error.h"
#include "../runtime/profile.h"
#include "engine_internal.h"
#include "grad.h"
#include "grad_mode.h"
#include "node.h"

namespace ag {

namespace detail {
namespace {

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

}  // namespace
}  // namespace detail

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, const GradOptions& options) {
  return detail::grad_of(outputs, inputs, grad_outputs, options, /*through_inputs=*/true);
}

std::vector<Tensor> detail::grad_of(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& grad_outputs, const GradOptions& options,
                                    bool through_inputs) {
  profile::Scope scope(profile::Family::Engine);
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
      throw_invalid("grad",
                    "input {} ({} {}) does not require grad, so nothing can be differentiated with respect to it", i,
                    dtype_name(in.dtype()), shape_str(in.shape()));
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

}  // namespace ag
