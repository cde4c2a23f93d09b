// SIGINT and SIGTERM as a request to stop, answered between two ops.
//
// While a StopOnSignal lives, the first SIGINT or SIGTERM only sets a flag. Code that can stop
// safely checks it: a training loop between steps, and, inside the long stretches (a step's
// forward and backward pass, an evaluation, sampling), a StopBetweenOps in scope makes every op
// the thread runs, and every node the backward pass runs, throw Interrupted once the flag is set.
// So a stop request is answered within one op, not one step: the program then saves what it
// can save consistently and exits with status 130.
//
// A second signal ends the process at once (status 130), keeping whatever was last written
// completely: every file the programs write is written atomically.
//
// Not in a StopBetweenOps: an optimizer update and a checkpoint, which must not stop half-way.
#pragma once

#include <attograd/attograd.h>  // with autograd/hooks.h, whose GraphObserver StopBetweenOps is

#include <stdexcept>

namespace ag::examples {

class StopOnSignal {
 public:
  StopOnSignal();   // installs the handlers for SIGINT and SIGTERM
  ~StopOnSignal();  // puts the previous ones back
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  static bool requested();
  static const char* signal_name();  // "SIGINT" or "SIGTERM" once requested
};

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted by a signal") {}
};

// Throws Interrupted if a stop was requested.
void stop_point();

// While alive, this thread's ops and backward nodes are stop points. Nests, and passes every
// event on to the observer it replaced (anomaly mode keeps working).
class StopBetweenOps : public GraphObserver {
 public:
  StopBetweenOps();
  ~StopBetweenOps() override;
  StopBetweenOps(const StopBetweenOps&) = delete;
  StopBetweenOps& operator=(const StopBetweenOps&) = delete;

  void recorded(const std::string& op, const Tensor& output, const std::vector<Tensor>& inputs, Node* node) override;
  void before_backward(Node& node, const Tensor& grad_output) override;
  void after_backward(const Node& node, const std::vector<Tensor>& grads, const Tensor& grad_output) override;

 private:
  GraphObserver* previous_;
};

}  // namespace ag::examples
