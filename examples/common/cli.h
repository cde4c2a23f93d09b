// What every example program does with its command line, in one place:
//
//   - options are matched by their whole name: Boost's default style guesses an abbreviation
//     (--step for --steps), and a guess that picks the wrong option changes a run without a
//     word, so here an abbreviation is an unknown option, answered with the names it is close to;
//   - --help shows each default as a person would type it (0.0002, not 0.00020000000000000001),
//     and a control character in one escaped ("\n"), not printed raw;
//   - counts are printed with the right plural ("1 file", "2 files").
#pragma once

#include <boost/program_options.hpp>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

namespace ag::examples {

// Boost's default command-line style without allow_guessing.
inline constexpr int kCommandLineStyle = boost::program_options::command_line_style::default_style &
                                         ~boost::program_options::command_line_style::allow_guessing;

// Parses argv[1:] against `options` (and `positional`, when given) in kCommandLineStyle and
// stores the result in `vm`; the caller notifies after handling --help. Throws
// boost::program_options::error; for an unknown option the message names the options it
// may have meant ("unrecognised option '--step'; did you mean --steps?"), among those with a
// description (one without is hidden, such as a positional argument's). Without `positional`,
// a bare word (one no option takes as its value) is refused, naming it, and shown quoted with
// the value before it when it follows one (`--prompt You are`: --prompt "You are").
// Every error is a plain boost::program_options::error whose message shows the words as typed
// (Boost's own what() loops forever on a word holding one of its placeholders, as '%value%').
void store_command_line(int argc, const char* const* argv, const boost::program_options::options_description& options,
                        boost::program_options::variables_map& vm,
                        const boost::program_options::positional_options_description* positional = nullptr);

// A value as it would be typed: the shortest decimal that reads back as the same double; a
// string as it is, unless it is empty or holds a control character or a quote or backslash,
// then in double quotes with C escapes ("\n", "\x1b").
std::string as_typed(double value);
std::string as_typed(const std::string& value);
template <std::integral T>
std::string as_typed(T value) {
  return std::to_string(value);
}

// po::value(target) with *target as its default, shown in --help as as_typed shows it.
template <typename T>
boost::program_options::typed_value<T>* with_default(T* target) {
  return boost::program_options::value(target)->default_value(*target, as_typed(*target));
}

// "1 file", "2 files", "0 files"; `plural_form` for a word that does not just add an s.
std::string plural(std::int64_t n, std::string_view singular, std::string_view plural_form = {});

// The columns `s` (UTF-8) takes in a terminal, as fmt pads it: 2 for a wide East Asian
// character, 1 for any other; for lining up tables with Chinese labels.
std::size_t display_width(std::string_view s);

}  // namespace ag::examples
