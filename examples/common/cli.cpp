#include "cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
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

// Boost's option errors fill the placeholders of their message ("%canonical_option%", "%value%")
// by searching the whole message again after each replacement, so a word of the command line
// that holds a placeholder (--steps '%value%') makes what() loop forever. This reads the same
// parts and fills each placeholder of the template once, left to right: a word is shown as it
// was typed, whatever it holds. (A derived class may name the base's protected members to form
// pointers to them; it is never made.)
struct OptionErrorParts : po::error_with_option_name {
  static std::string message(const po::error_with_option_name& e) {
    std::map<std::string, std::string> parts = e.*(&OptionErrorParts::m_substitutions);
    parts["canonical_option"] = (e.*(&OptionErrorParts::get_canonical_option_name))();
    parts["prefix"] = (e.*(&OptionErrorParts::get_canonical_option_prefix))();
    std::string text = e.m_error_template;
    // A part left empty has a wording of its own ("option '%canonical_option%'" becomes "option").
    for (const auto& [name, wording] : e.*(&OptionErrorParts::m_substitution_defaults))
      if (parts[name].empty())
        for (std::size_t at = text.find(wording.first); at != std::string::npos;
             at = text.find(wording.first, at + wording.second.size()))
          text.replace(at, wording.first.size(), wording.second);
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
      std::size_t end = text[i] == '%' ? text.find('%', i + 1) : std::string::npos;
      auto part = end == std::string::npos ? parts.end() : parts.find(text.substr(i + 1, end - i - 1));
      if (part == parts.end()) {
        out += text[i++];
      } else {
        out += part->second;
        i = end + 1;
      }
    }
    return out;
  }
};

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
    std::string message = OptionErrorParts::message(e);
    std::vector<std::string> names = near_names(e.get_option_name(), options);
    if (names.empty()) throw po::error(message);
    std::string list = names.size() == 1
                           ? names[0]
                           : fmt::format("{} or {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
    throw po::error(fmt::format("{}; did you mean {}? (options are not abbreviated)", message, list));
  } catch (const po::error_with_option_name& e) {
    throw po::error(OptionErrorParts::message(e));  // never e.what(): see OptionErrorParts
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

std::size_t display_width(std::string_view s) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (std::size_t k = 1; k < n && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
                (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x20000 && cp <= 0x3FFFD);
    width += wide ? 2 : 1;
    i += n;
  }
  return width;
}

}  // namespace ag::examples
