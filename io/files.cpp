// Whole files in and out: read one into a string, write one so that a crash leaves the old file
// or the new one and never half of one (io/checkpoint.h).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../autograd/error.h"
#include "checkpoint.h"

namespace ag::io {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open '{}' for reading: {}", path, std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(fmt::format("error reading '{}'", path));
  return bytes;
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
