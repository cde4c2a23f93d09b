// What the example programs check before they start work: every option (range, finiteness,
// combinations), every file they will read, and every place they will write. A run that cannot
// succeed for a reason known at the start is refused then, with a message naming the option or
// the path, before anything is allocated or written; it never fails an hour later, and a refused
// run leaves its output directory exactly as it was.
//
// The programs exit with status 2 for a refusal (Refused), 1 for a failure during the run, and
// 130 when a signal stopped them (examples/common/stop.h).
#pragma once

#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ag::examples {

// A run refused before it started.
struct Refused : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

template <typename... Args>
[[noreturn]] void refuse(fmt::format_string<Args...> format, Args&&... args) {
  throw Refused(fmt::format(format, std::forward<Args>(args)...));
}

// A file the run will read: it exists, is a regular file (not a directory, nor a device or a
// pipe, which could be endless) and can be opened. Returns its size in bytes.
std::int64_t check_input_file(const std::string& option, const std::string& path);

// A directory the run will write `files` into (names relative to it, e.g. "train_log.csv"):
// not empty, not an existing non-directory; if it does not exist yet, its nearest existing
// parent is a directory this process may write in; if it does, this process may write in it, and
// none of the files is a directory or anything else that is not a regular file. A symbolic link
// among them is fine: a file the run replaces (io::write_file_atomically) replaces the link, and
// never follows it. Not so for `written_in_place`, the files the run writes into where they are
// (appends to, or rewrites): each is refused, naming it and the problem, if it is a symbolic
// link or has another hard link (check_in_place_file). Changes nothing.
void check_output_dir(const std::string& option, const std::string& dir, const std::vector<std::string>& files,
                      const std::vector<std::string>& written_in_place = {});

// A file the run writes into where it is (a log it appends to, a lock it writes its pid into),
// which therefore must be its own: if it exists, a regular file with no other name. Through a
// symbolic link the run would write into whatever the link points to, and through a second hard
// link into a file that also lives elsewhere; both are refused, naming the file and the problem,
// with the option. Changes nothing.
void check_in_place_file(const std::string& option, const std::string& path);
// Opens such a file with open(2)'s `flags` (with O_CREAT: mode 0644), never through a symbolic
// link, and refuses the file it opened as check_in_place_file does, before anything is written.
// Returns the descriptor, or -1 with errno set when the open itself fails.
int open_in_place(const std::string& path, int flags);

// A --seed option: an unsigned 64-bit integer in plain decimal. (program_options alone would
// read "-1" as 18446744073709551615.)
boost::program_options::typed_value<std::string>* seed_value(std::uint64_t* seed);

}  // namespace ag::examples
