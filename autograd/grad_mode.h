// Grad mode: whether ops record the graph. Evaluation, optimizer updates and finite
// differences run under NoGradGuard so they build no graph and hold no saved tensors.
#pragma once

namespace ag {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// RAII: no graph is recorded while a NoGradGuard is alive (per thread); the previous mode
// comes back when it goes out of scope.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// RAII: grad mode set to `enabled` while the guard lives (libtorch's AutoGradMode), the
// previous mode after. AutoGradMode(true) records a graph again inside a NoGradGuard.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~AutoGradMode() { set_grad_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

}  // namespace ag
