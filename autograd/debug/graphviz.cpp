#include "graphviz.h"

#include <fmt/format.h>

#include <cmath>
#include <unordered_map>

#include "anomaly.h"
#include "../node.h"

namespace ag {

namespace {

std::string grad_norm_line(double norm) { return std::isnan(norm) ? "" : fmt::format("\n|grad| = {:.4g}", norm); }

// A DOT string literal: quotes and backslashes escaped, line breaks as \n.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

}  // namespace

std::string to_dot(const Tensor& output) { return to_dot(output, {}); }

std::string to_dot(const Tensor& output, const std::vector<std::pair<std::string, Tensor>>& names) {
  std::unordered_map<const TensorImpl*, std::string> leaf_names;
  for (const auto& [name, t] : names)
    if (t.defined()) leaf_names.emplace(t.impl().get(), name);

  std::string out =
      "digraph autograd {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  std::unordered_map<const Node*, int> node_ids;
  std::unordered_map<const TensorImpl*, int> leaf_ids;

  auto leaf_id = [&](const std::shared_ptr<TensorImpl>& leaf) {
    auto [it, added] = leaf_ids.try_emplace(leaf.get(), static_cast<int>(leaf_ids.size()));
    if (added) {
      Tensor t(leaf);
      auto named = leaf_names.find(leaf.get());
      std::string label = named != leaf_names.end() ? named->second + "\n" : "";
      label += fmt::format("{} {}", shape_str(t.shape()), dtype_name(t.dtype()));
      Tensor g = t.grad();
      if (g.defined()) label += grad_norm_line(detail::norm_of(g));
      out += fmt::format("  l{} [shape=ellipse, style=filled, fillcolor=\"#dbe9f6\", label={}];\n", it->second,
                         quoted(label));
    }
    return it->second;
  };

  const std::shared_ptr<Node>& root = output.defined() ? output.impl()->grad_fn : nullptr;
  if (!root) {
    if (output.defined() && output.requires_grad()) leaf_id(output.impl());
    return out + "}\n";
  }

  // Depth-first with an explicit stack (graphs can be deep); each node is written once.
  std::vector<const Node*> stack{root.get()};
  node_ids.emplace(root.get(), 0);
  std::string edges;
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    int id = node_ids.at(node);
    std::string label = fmt::format("{}\n{} {}{}", node->name(), shape_str(node->output_shape()),
                                    dtype_name(node->output_dtype()), grad_norm_line(node->grad_norm()));
    out += fmt::format("  n{} [shape=box, style=\"rounded,filled\", fillcolor=\"{}\", label={}];\n", id,
                       node == root.get() ? "#f6d8b8" : "#eeeeee", quoted(label));
    for (std::size_t i = 0; i < node->next_edges().size(); ++i) {
      const Edge& e = node->next_edges()[i];
      if (e.node) {
        auto [it, added] = node_ids.try_emplace(e.node.get(), static_cast<int>(node_ids.size()));
        if (added) stack.push_back(e.node.get());
        edges += fmt::format("  n{} -> n{} [label=\"{}\"];\n", it->second, id, i);
      } else if (e.leaf) {
        edges += fmt::format("  l{} -> n{} [label=\"{}\"];\n", leaf_id(e.leaf), id, i);
      }
    }
  }
  return out + edges + "}\n";
}

}  // namespace ag
