#include "progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace ag::examples {

namespace {
// mpirun hands every process a pseudo-terminal for its output, whatever its own output is (a
// file, a pipe): under it the bar cannot tell, and prints a line per tenth instead of redrawing.
bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }
}  // namespace

std::string format_duration(double seconds) {
  auto s = static_cast<std::int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

ProgressBar::ProgressBar(std::int64_t total)
    : total_(total), terminal_(isatty(STDOUT_FILENO) != 0 && !launched_by_mpirun()),
      start_(std::chrono::steady_clock::now()) {}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::update(std::int64_t done, std::int64_t tokens, const std::string& status) {
  double elapsed = elapsed_seconds();
  double rate = elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0;
  double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / static_cast<double>(done) : 0;
  std::string speed = rate >= 1000 ? fmt::format("{:.1f}k tok/s", rate / 1000) : fmt::format("{:.0f} tok/s", rate);
  constexpr int kWidth = 24;
  int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar =
      std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(kWidth - filled), '.');
  std::string line = fmt::format("[{}] {:>{}}/{}  {}  {}  ETA {}", bar, done, fmt::formatted_size("{}", total_), total_,
                                 status, speed, format_duration(eta));
  if (terminal_) {
    fmt::print("\r{}\x1b[K", line);  // \x1b[K clears what a longer previous line left behind
    std::fflush(stdout);
    drawn_ = true;
    return;
  }
  std::int64_t tenth = total_ > 0 ? 10 * done / total_ : 10;
  if (tenth != last_reported_tenth_) {
    last_reported_tenth_ = tenth;
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }
}

void ProgressBar::print_line(const std::string& line) {
  if (terminal_ && drawn_) fmt::print("\r\x1b[K");
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

void ProgressBar::finish() {
  if (terminal_ && drawn_) fmt::print("\n");
  drawn_ = false;
}

}  // namespace ag::examples
