// Where a step's time goes, by family of work: matrix products, elementwise ops, normalisation,
// softmax and attention outside their products, bf16 rounding, the optimizer, the engine, the
// allocator and the thread pool's hand-over. For benchmarks (bench/gpt_train_step --profile):
//
//   ag::profile::start();                 // on the thread that runs the model
//   ... steps ...
//   ag::profile::Totals t = ag::profile::stop();
//   t.seconds[int(ag::profile::Family::Products)]
//
// Each family's time is exclusive: a product inside attention counts as a product, not as
// attention, and the engine's time is what its own bookkeeping takes between the ops' backward
// formulas. So the families partition the wall time the probes cover. Only the thread that
// called start() records, on its own clock: when a loop is split across the pool, that thread
// runs its share of the chunks (whose products it records as products) and then waits for the
// others (the pool's hand-over), so its timeline is the wall time of the step.
//
// Off by default. Off, a probe is one relaxed atomic load and a branch: the probes stay in the
// library and cost nothing a benchmark can see.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace ag::profile {

enum class Family : int {
  Products,       // OpenBLAS and oneDNN matrix products
  Elementwise,    // unary and binary ops, GELU, dropout, masked_fill
  Normalisation,  // layer norm and RMSNorm, forward and backward
  Softmax,        // softmax, log-softmax, cross-entropy, and attention outside its products
  Rounding,       // float32 to bf16 and back
  Reduction,      // sums, means, max; reshapes that copy (permute, cat, slice), embedding; an op
                  // defined with record() that names no family
  Optimizer,      // the update and gradient clipping
  Engine,         // the backward pass's own bookkeeping: ordering, accumulating, checks
  Allocation,     // the allocator's own calls (not the page faults of first touch)
  Pool,           // waiting for the pool's other threads to finish their chunks
};
inline constexpr int kFamilies = 10;

// Each op names its family where it is defined (autograd/node.h, OpName): its forward and its
// node's backward are charged to it.
std::string_view name(Family f);

struct Totals {
  std::array<double, kFamilies> seconds{};       // exclusive time in each family
  std::array<std::int64_t, kFamilies> entries{};  // how many times each was entered
  double wall = 0.0;                             // from start() to stop()
};

// Starts recording on the calling thread (clearing what was recorded); stop() ends it and
// returns the totals. Calling start() again before stop() restarts.
void start();
Totals stop();

namespace detail {
extern std::atomic<bool> g_on;
void enter(Family f);
void leave();
}  // namespace detail

// Charges the time until it ends to `f` (minus the time of the scopes opened inside it).
class Scope {
 public:
  explicit Scope(Family f) : on_(detail::g_on.load(std::memory_order_relaxed)) {
    if (on_) detail::enter(f);
  }
  ~Scope() {
    if (on_) detail::leave();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_;
};

}  // namespace ag::profile
