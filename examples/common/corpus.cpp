#include "corpus.h"

#include <attograd/attograd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "cli.h"
#include "memory_budget.h"
#include "preflight.h"

namespace ag::examples {

namespace {
constexpr const char* kFortunes = "/usr/share/games/fortunes";
// fortunes-zh's poems carry terminal colour codes (ESC [ ... m); they are not text.
std::string without_ansi_colors(const std::string& line) {
  std::string out;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      std::size_t end = line.find('m', i);
      if (end != std::string::npos) {
        i = end;
        continue;
      }
    }
    out += line[i];
  }
  return out;
}

}  // namespace

std::vector<std::string> default_corpus() {
  std::vector<std::string> files;
  if (!std::filesystem::is_directory(kFortunes))
    refuse("{} does not exist: install Debian's `fortunes` package, or pass --corpus FILE", kFortunes);
  for (const auto& entry : std::filesystem::directory_iterator(kFortunes)) {
    std::string name = entry.path().filename().string();
    // Skip the index files (.dat), the .u8 links, and fortunes-zh's Chinese collections.
    if (!entry.is_regular_file() || name.find('.') != std::string::npos || name == "chinese" || name == "tang300" ||
        name == "song100")
      continue;
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) refuse("no fortune files found in {}; pass --corpus FILE", kFortunes);
  return files;
}

std::string read_corpus(const std::vector<std::string>& files) {
  if (files.empty()) refuse("--corpus: no file given");
  Size bytes = 0;
  for (const std::string& path : files) {
    std::int64_t size = check_input_file("--corpus", path);
    if (size == 0) refuse("--corpus {}: the file is empty", path);
    bytes = bytes + size;
  }
  // The text, its code points (4 bytes each) twice over while it is tokenized, and its ids
  // (8 bytes each) twice, in the dataset and on the way there.
  check_fits_in_memory(fmt::format("the corpus ({} in {})", format_bytes(bytes), plural(std::ssize(files), "file")),
                       bytes * 26);
  std::string text;
  for (const std::string& path : files) {
    std::string content = ag::io::read_file(path);
    try {
      ag::data::decode_utf8(content);
    } catch (const std::invalid_argument& e) {
      refuse("--corpus {}: not valid UTF-8: {}", path, e.what());
    }
    // A fortune file separates its entries with lines holding a single '%': keep a blank line.
    std::istringstream lines(content);
    for (std::string line; std::getline(lines, line);) text += line == "%" ? "\n" : without_ansi_colors(line) + "\n";
  }
  return text;
}

}  // namespace ag::examples
