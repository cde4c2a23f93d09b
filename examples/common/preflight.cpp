#include "preflight.h"

#include <fcntl.h>
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

// The file `path` will be replaced atomically (written as path + ".tmp", then renamed): neither
// may be a directory or anything else that is not a regular file.
void check_replaceable(const std::string& option, const fs::path& path) {
  for (const fs::path& p : {path, fs::path(path.string() + ".tmp")}) {
    std::error_code ec;
    fs::file_status s = fs::symlink_status(p, ec);
    if (ec || s.type() == fs::file_type::not_found || s.type() == fs::file_type::regular ||
        s.type() == fs::file_type::symlink)
      continue;
    refuse("{}: '{}' is in the way: it is {}, where the run writes a file; move it away", option, p.string(),
           kind_of(s.type()));
  }
}

}  // namespace

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

void check_output_dir(const std::string& option, const std::string& dir, const std::vector<std::string>& files) {
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
