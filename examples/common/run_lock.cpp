#include "run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "preflight.h"

namespace ag::examples {

namespace {

// `fd` is open on `path`, whose lock another process holds: the pid it wrote there, for the message.
[[noreturn]] void refuse_in_use(int fd, const std::string& dir, const std::string& path) {
  char pid[32] = {};
  ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
  ::close(fd);
  std::string holder = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  refuse("{} is in use by another run{}, which holds {}; wait for it to finish or use another directory", dir,
         holder.empty() ? "" : fmt::format(" (pid {})", holder), path);
}

}  // namespace

void check_not_in_use(const std::string& dir, const std::string& name) {
  std::string path = (std::filesystem::path(dir) / name).string();
  // Never through a symbolic link (check_output_dir refuses one first): its target is not a lock.
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;  // no lock file, or none this process can read: RunLock answers for it
  // A shared lock is refused while a run holds its exclusive one; it is dropped at once.
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) refuse_in_use(fd, dir, path);
  ::close(fd);
}

RunLock::RunLock(const std::string& dir, const std::string& name) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) refuse("cannot create the directory '{}': {}", dir, ec.message());
  std::string path = (std::filesystem::path(dir) / name).string();
  // No O_TRUNC: while another run holds the lock, its pid in the file must survive this open.
  // The pid is written into the file where it is, so it must be the run's own: open_in_place
  // refuses a symbolic link there, or a file with another hard link, before writing anything.
  fd_ = open_in_place(path, O_RDWR | O_CREAT);
  if (fd_ < 0) refuse("cannot write in '{}': creating its lock file {} failed: {}", dir, path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno, fd = fd_;
    fd_ = -1;
    if (err == EWOULDBLOCK) refuse_in_use(fd, dir, path);
    ::close(fd);
    refuse("cannot lock {}: {}", path, std::strerror(err));
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(err)));
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

}  // namespace ag::examples
