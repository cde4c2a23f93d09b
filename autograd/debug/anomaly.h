// Anomaly mode: stop at the first op that makes a NaN or an infinity, and say which op it was.
//
// A NaN in a loss is found long after it was made: by then it has spread through every
// activation and gradient. With anomaly mode on, each op checks what it produces as it runs:
//
//   {
//     ag::DetectAnomalyGuard anomaly;  // on for this thread until the end of the block
//     Tensor loss = model.loss(ids, targets);
//     loss.backward();
//   }
//
// - forward: an op whose output holds a NaN, or an infinity that none of its inputs held,
//   throws AnomalyError naming the op, its input shapes and the call stack. The one exception is
//   masked_fill, whose job can be to write -inf.
// - backward: a gradient holding a NaN or an infinity throws AnomalyError naming the op whose
//   backward returned it, which of its inputs it was for, the shapes, and the call stack where
//   that op was recorded in the forward pass.
//
// It also keeps the norm of the gradient reaching each op's output, which ag::to_dot shows.
// It watches through the graph observer of ../hooks.h: turning it on installs the observer for
// the calling thread, and the engine knows nothing else of it.
// Every check is a pass over the data, so it is off by default; a debugging tool, as in PyTorch
// (torch.autograd.detect_anomaly).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ag {

class Tensor;
class Node;

bool is_anomaly_enabled();
void set_detect_anomaly(bool enabled);  // for the calling thread

class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true) : previous_(is_anomaly_enabled()) { set_detect_anomaly(enabled); }
  ~DetectAnomalyGuard() { set_detect_anomaly(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// What anomaly mode throws.
class AnomalyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Where an op was recorded: the call stack at that moment (captured in anomaly mode only).
struct RecordSite;
// The 2-norm of a floating tensor, for Node::grad_norm.
double norm_of(const Tensor& t);
}  // namespace detail

}  // namespace ag
