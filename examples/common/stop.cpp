#include "stop.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace ag::examples {

namespace {

std::atomic<int> g_signal{0};  // the first signal received, 0 before
static_assert(std::atomic<int>::is_always_lock_free, "the handler may only touch lock-free atomics");

struct sigaction g_previous_int, g_previous_term;

void on_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) return;
  // The second one: no waiting for a stop point. Only async-signal-safe calls here.
  const char message[] = "\nsecond signal: stopping now; the files last written are complete\n";
  ssize_t ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
  (void)ignored;
  ::_exit(130);
}

}  // namespace

StopOnSignal::StopOnSignal() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in progress carry on; the flag is checked after
  ::sigaction(SIGINT, &action, &g_previous_int);
  ::sigaction(SIGTERM, &action, &g_previous_term);
}

StopOnSignal::~StopOnSignal() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool StopOnSignal::requested() { return g_signal.load(std::memory_order_relaxed) != 0; }

const char* StopOnSignal::signal_name() {
  int s = g_signal.load();
  return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : "no signal";
}

void stop_point() {
  if (StopOnSignal::requested()) throw Interrupted();
}

StopBetweenOps::StopBetweenOps() : previous_(graph_observer()) { set_graph_observer(this); }
StopBetweenOps::~StopBetweenOps() { set_graph_observer(previous_); }

void StopBetweenOps::recorded(const std::string& op, const Tensor& output, const std::vector<Tensor>& inputs,
                              Node* node) {
  if (previous_) previous_->recorded(op, output, inputs, node);
  stop_point();
}

void StopBetweenOps::before_backward(Node& node, const Tensor& grad_output) {
  if (previous_) previous_->before_backward(node, grad_output);
  stop_point();
}

void StopBetweenOps::after_backward(const Node& node, const std::vector<Tensor>& grads, const Tensor& grad_output) {
  if (previous_) previous_->after_backward(node, grads, grad_output);
}

}  // namespace ag::examples
