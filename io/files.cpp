// Whole files in and out: read one into a string, write one so that a crash leaves the old file
// or the new one and never half of one (io/checkpoint.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "../runtime/error.h"
#include "checkpoint.h"

namespace ag::io {

// POSIX calls rather than an ifstream: a stream opens a directory without complaint and reads
// it as an empty file, and it keeps no errno to say why a read failed.
std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot open '{}' for reading: {}", path, std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd);
    throw std::runtime_error(fmt::format("cannot read '{}': it is a directory, not a file", path));
  }
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw std::runtime_error(fmt::format("error reading '{}': {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

std::string read_text_file(const std::string& path) {
  std::string text = read_file(path);
  if (text.empty())
    throw std::invalid_argument(fmt::format("{}: the file is empty; a text needs at least one character", path));
  try {
    data::decode_utf8(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{} is not valid UTF-8: {}", path, e.what()));
  }
  return text;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot create '{}': {}", tmp, std::strerror(errno)));
  std::size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(err)));
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot flush '{}' to disk: {}", tmp, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err)));
  }
  // The new name is an entry in the directory: flush the directory too, so that after a power
  // cut the name points at the new file. (Best effort: the file is already complete either way.)
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace ag::io
