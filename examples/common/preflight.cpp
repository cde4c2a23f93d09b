#include "preflight.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace ag::examples {

namespace {

std::string kind_of(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::fifo: return "a pipe";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::block:
    case fs::file_type::character: return "a device";
    default: return "not a regular file";
  }
}

// access() answers for this process's user (root passes almost everything, but not a read-only
// file system); the lock file is the real test of a directory (examples/common/run_lock.h).
void check_writable_dir(const std::string& option, const std::string& value, const fs::path& dir,
                        const std::string& role) {
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    refuse("{} {}: cannot write in {} '{}': {}", option, value, role, dir.string(), std::strerror(errno));
}

// The kind of file a stat(2) mode names, in std::filesystem's terms (for kind_of).
fs::file_type type_of(mode_t mode) {
  if (S_ISREG(mode)) return fs::file_type::regular;
  if (S_ISDIR(mode)) return fs::file_type::directory;
  if (S_ISLNK(mode)) return fs::file_type::symlink;
  if (S_ISFIFO(mode)) return fs::file_type::fifo;
  if (S_ISSOCK(mode)) return fs::file_type::socket;
  if (S_ISBLK(mode)) return fs::file_type::block;
  if (S_ISCHR(mode)) return fs::file_type::character;
  return fs::file_type::unknown;
}

// The file `path` will be replaced atomically (written to a temporary file of its own, then
// renamed over it): it may not be a directory or anything else that is not a regular file; a
// symbolic link is replaced itself.
void check_replaceable(const std::string& option, const fs::path& path) {
  std::error_code ec;
  fs::file_status s = fs::symlink_status(path, ec);
  if (ec || s.type() == fs::file_type::not_found || s.type() == fs::file_type::regular ||
      s.type() == fs::file_type::symlink)
    return;
  refuse("{}: '{}' is in the way: it is {}, where the run writes a file; move it away", option, path.string(),
         kind_of(s.type()));
}

// What is wrong with `path` as a file the run writes in place, from lstat(2) (or fstat(2) of it
// opened); empty when nothing is.
std::string in_place_problem(const std::string& path, const struct stat& info) {
  if (S_ISLNK(info.st_mode)) {
    std::error_code ec;
    fs::path target = fs::read_symlink(path, ec);
    return fmt::format(
        "'{}' is a symbolic link{}: the run writes into this file where it is, and would write into the file the "
        "link points to; remove the link",
        path, ec ? "" : fmt::format(" to '{}'", target.string()));
  }
  if (!S_ISREG(info.st_mode))
    return fmt::format("'{}' is in the way: it is {}, where the run writes a file; move it away", path,
                       kind_of(type_of(info.st_mode)));
  if (info.st_nlink > 1)
    return fmt::format(
        "'{}' has {} hard links: the run writes into this file where it is, and would change it under its other "
        "names too; remove this name (or replace it by a copy)",
        path, info.st_nlink);
  return "";
}

}  // namespace

void check_in_place_file(const std::string& option, const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return;  // missing: created by the run itself
  if (std::string problem = in_place_problem(path, info); !problem.empty()) refuse("{}: {}", option, problem);
}

int open_in_place(const std::string& path, int flags) {
  // O_NONBLOCK: opening a pipe planted there must not wait for a reader; it is refused below.
  int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    struct stat info {};
    if (err == ELOOP && ::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode))
      refuse("{}", in_place_problem(path, info));
    errno = err;
    return -1;
  }
  struct stat info {};
  std::string problem = ::fstat(fd, &info) != 0 ? fmt::format("cannot look at '{}': {}", path, std::strerror(errno))
                                                : in_place_problem(path, info);
  if (!problem.empty()) {
    ::close(fd);
    refuse("{}", problem);
  }
  return fd;
}

std::int64_t check_input_file(const std::string& option, const std::string& path) {
  if (path.empty()) refuse("{}: the file name is empty", option);
  std::error_code ec;
  fs::file_status s = fs::status(path, ec);
  if (s.type() == fs::file_type::not_found) refuse("{} {}: no such file", option, path);
  if (ec) refuse("{} {}: cannot look at it: {}", option, path, ec.message());
  if (s.type() != fs::file_type::regular)
    refuse("{} {}: it is {}; give a regular file", option, path, kind_of(s.type()));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) refuse("{} {}: cannot open it for reading: {}", option, path, std::strerror(errno));
  ::close(fd);
  return static_cast<std::int64_t>(fs::file_size(path));
}

void check_output_dir(const std::string& option, const std::string& dir, const std::vector<std::string>& files,
                      const std::vector<std::string>& written_in_place) {
  if (dir.empty()) refuse("{}: the directory name is empty", option);
  std::error_code ec;
  fs::file_status s = fs::status(dir, ec);
  if (s.type() == fs::file_type::not_found) {
    // Created at the start of the run: its nearest existing parent must take a new directory.
    fs::path parent = fs::absolute(dir).parent_path();
    while (fs::status(parent, ec).type() == fs::file_type::not_found && parent.has_relative_path())
      parent = parent.parent_path();
    if (!fs::is_directory(parent, ec))
      refuse("{} {}: '{}' is {}, so the directory cannot be created", option, dir, parent.string(),
             kind_of(fs::status(parent, ec).type()));
    check_writable_dir(option, dir, parent, "its parent");
    return;
  }
  if (ec) refuse("{} {}: cannot look at it: {}", option, dir, ec.message());
  if (s.type() != fs::file_type::directory)
    refuse("{} {}: it exists and is {}, not a directory", option, dir, kind_of(s.type()));
  check_writable_dir(option, dir, dir, "the directory");
  for (const std::string& name : files) check_replaceable(option, fs::path(dir) / name);
  for (const std::string& name : written_in_place) check_in_place_file(option, (fs::path(dir) / name).string());
}

boost::program_options::typed_value<std::string>* seed_value(std::uint64_t* seed) {
  namespace po = boost::program_options;
  return po::value<std::string>()->default_value(std::to_string(*seed))->notifier([seed](const std::string& text) {
    std::uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size())
      throw po::error("--seed must be an integer from 0 to 18446744073709551615, got '" + text + "'");
    *seed = value;
  });
}

}  // namespace ag::examples
