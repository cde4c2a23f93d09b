// The graph behind a tensor, drawn by Graphviz.
//
//   Tensor loss = ...;
//   loss.backward();
//   std::ofstream("graph.dot") << ag::to_dot(loss, model.named_parameters());
//   // then: dot -Tsvg graph.dot -o graph.svg
//
// One box per op: its name, the shape and dtype it produced and, when the backward pass ran with
// anomaly mode on (anomaly.h), the norm of the gradient that reached it. One ellipse per leaf
// that requires grad: its name when given, its shape, and the norm of its .grad() once a
// backward pass has reached it. An arrow runs from each input to the op that used it, so the
// picture reads in the direction of the forward pass. Inputs that need no gradient (data, ids,
// masks) are not part of the graph and are not drawn.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../tensor.h"

namespace ag {

std::string to_dot(const Tensor& output);
// Leaves found in `names` are labelled with their names (e.g. model.named_parameters()).
std::string to_dot(const Tensor& output, const std::vector<std::pair<std::string, Tensor>>& names);

}  // namespace ag
