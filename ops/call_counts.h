// Counting kernel calls, for tests only: which reference kernels ran (ops/reference/), and how
// many kernels of the naive backend (kernels/naive/). What a test reads to see that a route
// really ran the code it names, and that the other routes ran none of it.
//
//   ag::testing::CountCalls counting;                  // counts from zero, from here
//   ag::Tensor y = ag::linear(x, w, b);                // under Kernels::Reference, say
//   EXPECT_EQ(counting.reference()["linear"], 1);
//   EXPECT_EQ(counting.naive(), 0);
//
// Counting is off unless a CountCalls is alive, and costs the library nothing measurable then:
// each counted kernel reads a flag (one relaxed load) and skips the count. While one is alive,
// each call is one relaxed atomic increment.
//
// The counts are the whole process's, not the calling thread's: a kernel run on any thread
// counts (the pool's, or one a test starts itself), and any thread may read them. So one
// CountCalls at a time: a second one while another is alive is refused (std::logic_error), since
// each would see, and zero, the other's counts.
//
// Internal: the tests build from the source tree; this header is not installed. The counters are
// defined beside the code that counts (ops/kernels.cpp, kernels/naive/table.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ag::testing {

class CountCalls {
 public:
  // Zeroes every count and turns counting on.
  CountCalls();
  // Turns counting off.
  ~CountCalls();
  CountCalls(const CountCalls&) = delete;
  CountCalls& operator=(const CountCalls&) = delete;

  // How many times each reference kernel has run since the counter was made or last reset, by op
  // name as set_reference_ops spells it ("linear", "scaled_dot_product_attention", ...), for the
  // ops that ran at least once.
  std::map<std::string, std::int64_t> reference() const;
  // How many kernels of the naive backend have run, all entries together, over the same span.
  std::int64_t naive() const;
  // Zeroes every count; counting stays on.
  void reset();
};

}  // namespace ag::testing
