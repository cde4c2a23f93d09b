// A one-line progress bar for training loops:
//
//   [##########..........]  512/1000  loss 1.8342  41.2k tok/s  ETA 0:48
//
// On a terminal it redraws in place; when output goes to a file or a pipe (CI logs) it prints a
// plain line at every tenth of the way instead, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ag::examples {

class ProgressBar {
 public:
  explicit ProgressBar(std::int64_t total);
  // `done` steps finished; `tokens` processed so far; `status` is shown after the counts.
  void update(std::int64_t done, std::int64_t tokens, const std::string& status);
  // Ends the bar's line so that other output can follow.
  void finish();
  // Prints a line of its own (an evaluation result, say) without breaking the bar.
  void print_line(const std::string& line);
  double elapsed_seconds() const;

 private:
  std::int64_t total_;
  std::int64_t last_reported_tenth_ = -1;
  bool terminal_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

std::string format_duration(double seconds);  // "1:05", "12:00", "1:02:03"

}  // namespace ag::examples
