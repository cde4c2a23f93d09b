// Whole files in and out: read one into a string, write one so that a crash leaves the old file
// or the new one and never half of one, and so that nobody who can write in its directory can
// turn the write against another file (io/checkpoint.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

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

namespace {

// A temporary file is named ".<target's name>.tmp-" and six random letters or digits, in the
// target's directory: hidden from a plain `ls`, on the target's file system (a rename is atomic
// only within one), and recognisable, so that remove_stale_temporaries knows what a killed run
// left. A fixed name would not do: whoever can write in the directory could plant a symbolic
// link under it, and the writer would follow it and overwrite the file it points to.
constexpr std::string_view kTemporaryMark = ".tmp-";
constexpr std::string_view kTemporaryLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::size_t kTemporaryRandomLetters = 6;

bool is_temporary_name(std::string_view name) {
  const std::size_t tail = kTemporaryMark.size() + kTemporaryRandomLetters;
  if (name.size() < 1 + 1 + tail || name.front() != '.') return false;  // "." + at least one character + tail
  std::string_view random = name.substr(name.size() - kTemporaryRandomLetters);
  return name.substr(name.size() - tail, kTemporaryMark.size()) == kTemporaryMark &&
         random.find_first_not_of(kTemporaryLetters) == std::string_view::npos;
}

struct Temporary {
  int fd;
  std::string path;
};

// Creates a new, empty temporary file for `target`. O_EXCL makes the open fail on any name that
// exists, a symbolic link included (O_NOFOLLOW says so once more), so the descriptor is always of
// a file this call made; a name taken is tried again with other letters.
Temporary create_temporary(const std::filesystem::path& target) {
  std::random_device random;
  std::uniform_int_distribution<std::size_t> letter(0, kTemporaryLetters.size() - 1);
  std::string prefix = target.filename().string();
  prefix.insert(prefix.begin(), '.');
  prefix += kTemporaryMark;
  int err = EEXIST;
  for (int attempt = 0; attempt < 100 && err == EEXIST; ++attempt) {
    std::string name = prefix;
    for (std::size_t i = 0; i < kTemporaryRandomLetters; ++i) name += kTemporaryLetters[letter(random)];
    std::string path = (target.parent_path() / name).string();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return {fd, path};
    err = errno;
  }
  throw std::runtime_error(fmt::format("cannot write '{}': cannot create a temporary file beside it: {}",
                                       target.string(), std::strerror(err)));
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  Temporary tmp = create_temporary(path);
  auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.path.c_str());
    throw std::runtime_error(fmt::format("cannot {} '{}': {}", what, path, std::strerror(err)));
  };
  std::size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(tmp.fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(tmp.fd);
      fail("write", err);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(tmp.fd) != 0) {
    int err = errno;
    ::close(tmp.fd);
    fail("flush to disk", err);
  }
  if (::close(tmp.fd) != 0) fail("flush to disk", errno);
  // rename(2) replaces the directory entry `path`, whatever it is: a symbolic link there is
  // replaced by the new file, not followed, and another hard link to the old file keeps the old
  // bytes.
  if (std::rename(tmp.path.c_str(), path.c_str()) != 0) fail("replace", errno);
  // The new name is an entry in the directory: flush the directory too, so that after a power
  // cut the name points at the new file. (Best effort: the file is already complete either way.)
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  DIR* entries = ::opendir(dir.c_str());
  if (entries == nullptr) return removed;
  const int dfd = ::dirfd(entries);
  while (const dirent* entry = ::readdir(entries)) {
    std::string_view name = entry->d_name;
    if (!is_temporary_name(name)) continue;
    // Looked at and removed by name in this directory, never through a link: a symbolic link is
    // removed itself, and a directory of that name is left alone.
    struct stat info {};
    if (::fstatat(dfd, entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(info.st_mode) && !S_ISLNK(info.st_mode)) continue;
    if (::unlinkat(dfd, entry->d_name, 0) == 0) removed.emplace_back(name);
  }
  ::closedir(entries);
  std::sort(removed.begin(), removed.end());
  return removed;
}

}  // namespace ag::io
