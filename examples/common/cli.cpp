#include "cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <vector>

namespace po = boost::program_options;

namespace ag::examples {

namespace {

// The number of single-character insertions, deletions and substitutions from a to b.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The long options `typed` may have meant: those it abbreviates, else those at most two edits
// away (one for a name of up to four letters).
std::vector<std::string> near_names(std::string typed, const po::options_description& options) {
  while (!typed.empty() && typed.front() == '-') typed.erase(0, 1);
  if (auto eq = typed.find('='); eq != std::string::npos) typed.resize(eq);
  std::vector<std::string> prefixed, close;
  for (const auto& option : options.options()) {
    const std::string& name = option->long_name();
    if (name.empty() || typed.empty() || option->description().empty()) continue;
    if (name.starts_with(typed))
      prefixed.push_back("--" + name);
    else if (edit_distance(typed, name) <= (typed.size() <= 4 ? 1u : 2u))
      close.push_back("--" + name);
  }
  return prefixed.empty() ? close : prefixed;
}

// A bare word no option takes: Boost keeps it as a positional token, and a program that declares
// none would drop it without a word (`--prompt You are` sampling from "You"). Where it follows an
// option's value, the likely cause is a value with spaces: the refusal shows it quoted.
void refuse_stray_words(const po::parsed_options& parsed) {
  const std::vector<po::option>& all = parsed.options;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].position_key < 0) continue;
    std::vector<std::string> words;
    for (std::size_t j = i; j < all.size() && all[j].position_key >= 0; ++j)
      words.insert(words.end(), all[j].value.begin(), all[j].value.end());
    std::string first = words.empty() ? std::string() : words.front();
    std::string message = fmt::format(
        "unexpected word '{}' on the command line: every word must be an option "
        "(--name) or the value that follows one",
        first);
    // (A number before it, as in --steps 3 stray, is no text cut at a space.)
    auto is_number = [](const std::string& v) {
      double x = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      return ec == std::errc() && end == v.data() + v.size();
    };
    if (i > 0 && all[i - 1].position_key < 0 && all[i - 1].value.size() == 1 && !all[i - 1].string_key.empty() &&
        !is_number(all[i - 1].value.front())) {
      const po::option& before = all[i - 1];
      message += fmt::format("; a value with spaces needs quotes: --{} \"{} {}\"", before.string_key,
                             before.value.front(), fmt::join(words, " "));
    }
    throw po::error(message);
  }
}

}  // namespace

void store_command_line(int argc, const char* const* argv, const po::options_description& options,
                        po::variables_map& vm, const po::positional_options_description* positional) {
  po::command_line_parser parser(argc, argv);
  parser.options(options).style(kCommandLineStyle);
  if (positional) parser.positional(*positional);
  try {
    po::parsed_options parsed = parser.run();
    if (!positional) refuse_stray_words(parsed);
    po::store(parsed, vm);
  } catch (const po::unknown_option& e) {
    std::vector<std::string> names = near_names(e.get_option_name(), options);
    if (names.empty()) throw;
    std::string list = names.size() == 1
                           ? names[0]
                           : fmt::format("{} or {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
    throw po::error(fmt::format("{}; did you mean {}? (options are not abbreviated)", e.what(), list));
  }
}

std::string as_typed(double value) { return fmt::format("{}", value); }

std::string as_typed(const std::string& value) {
  bool plain = !value.empty() && std::none_of(value.begin(), value.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f || c == '"' || c == '\\';
  });
  if (plain) return value;
  std::string out = "\"";
  for (char c : value) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (auto u = static_cast<unsigned char>(c); u < 0x20 || u == 0x7f)
          out += fmt::format("\\x{:02x}", u);
        else
          out += c;
    }
  }
  return out + "\"";
}

std::string plural(std::int64_t n, std::string_view singular, std::string_view plural_form) {
  if (n == 1) return fmt::format("1 {}", singular);
  if (plural_form.empty()) return fmt::format("{} {}s", n, singular);
  return fmt::format("{} {}", n, plural_form);
}

}  // namespace ag::examples
