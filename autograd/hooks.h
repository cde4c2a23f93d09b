// Watching the graph without the engine knowing who watches. record() and the backward loop call
// the observer installed for the calling thread, if there is one, at three points; anomaly mode
// (debug/anomaly.cpp) is the observer that ships. With none installed each point costs one
// thread-local read.
#pragma once

#include <string>
#include <vector>

namespace ag {

class Node;
class Tensor;

class GraphObserver {
 public:
  virtual ~GraphObserver() = default;
  // An op ran: `output` from `inputs`, recorded as `node` (null when grad mode is off or no input
  // requires grad). Not called for the ops that backward formulas run.
  virtual void recorded(const std::string& op, const Tensor& output, const std::vector<Tensor>& inputs, Node* node) = 0;
  // The backward pass is about to run node's formula on the gradient of its output...
  virtual void before_backward(Node& node, const Tensor& grad_output) = 0;
  // ...and the formula returned `grads`, one per input (undefined where there is none).
  virtual void after_backward(const Node& node, const std::vector<Tensor>& grads, const Tensor& grad_output) = 0;
};

// This thread's observer, or null.
GraphObserver* graph_observer();
void set_graph_observer(GraphObserver* observer);

}  // namespace ag
