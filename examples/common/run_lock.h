// One training process per output directory. Two runs writing the same checkpoint, log and
// pictures would interleave them into a run that neither made; so a run holds an exclusive
// flock(2) on a lock file in its directory for as long as it lives, and a second run is refused:
//
//   minigpt train: minigpt-out is in use by another run (pid 4242), which holds minigpt-out/minigpt.lock
//
// The kernel drops the lock when the process ends, however it ends (SIGKILL included), so a lock
// file left behind never blocks the next run. The file holds the pid of the run holding it, for
// that message; it is never removed (removing it while another process waits on it would let a
// third lock a new file beside it).
#pragma once

#include <string>

namespace ag::examples {

// Refuses, as RunLock would, when a live run holds dir/name; changes nothing (a lock file that
// is not there is not created). For the checks before a run, which must leave its directory
// as it was: a run refused for another reason while a second one trains there is told of that
// one first.
void check_not_in_use(const std::string& dir, const std::string& name);

class RunLock {
 public:
  // Creates `dir` (and its parents) when missing, then takes the lock on dir/name, or throws
  // Refused (examples/common/preflight.h) naming the directory and the holder's pid, or naming
  // the lock file when it is a symbolic link or has another hard link (open_in_place).
  RunLock(const std::string& dir, const std::string& name);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ag::examples
