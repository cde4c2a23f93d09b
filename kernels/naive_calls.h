// The naive backend's call count, for tests: how many kernels of kernels/naive/ have run, which
// tells a test that the naive route really ran the naive loops. Tests turn it on, zero it and
// read it through ag::testing::CountCalls (ops/call_counts.h); it sits here, and not in naive/,
// because that hook lives in ops/, which reaches the naive backend through its table only.
//
// Off unless a test turns it on. Off, a naive kernel's count_call() is one relaxed load of a flag
// and a branch not taken; on, one relaxed atomic increment. The count is the whole process's,
// whatever thread a kernel runs on. Defined in naive/table.cpp. Internal: not installed.
#pragma once

#include <atomic>
#include <cstdint>

namespace ag::backends::naive {

// Whether calls are counted now, and the count.
extern std::atomic<bool> g_counting;
extern std::atomic<std::int64_t> g_calls;

// Every naive kernel calls it once, on entry.
inline void count_call() {
  if (g_counting.load(std::memory_order_relaxed)) g_calls.fetch_add(1, std::memory_order_relaxed);
}

// Counting on or off; the count since the last reset_calls().
void set_counting(bool on);
std::int64_t calls();
void reset_calls();

}  // namespace ag::backends::naive
