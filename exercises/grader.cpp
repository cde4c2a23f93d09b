// The grader: runs one exercise's checks, or every exercise's, against the answers this program
// was built with (WORKBOOK_ANSWERS: yours, solutions or wrong), and says how far each got.
//
//   workbook N [--lang en|zh]      exercise N: each check in order, up to the first that fails
//   workbook all [--lang en|zh]    every exercise, then a table of progress
//   workbook --list                the exercises and their checks
//
// Exit status: 0 every check run passed; 1 a check failed; 3 none failed, but an answer is not
// written yet (its stub still throws NotWritten); 2 the command line was refused.
#include <attograd/attograd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "checks.h"
#include "workbook.h"

namespace {

using workbook::Exercise;
using workbook::Lang;
using workbook::Text;

enum class Outcome { Passed, Failed, NotAttempted };

constexpr int kUsage = 2, kNotAttempted = 3;

const char* kUsageText =
    "usage: workbook N|all [--lang en|zh]   (N from 1 to {}), or workbook --list\n"
    "用法：workbook N|all [--lang en|zh]   （N 为 1 到 {}），或 workbook --list\n";

std::string answer_path(const Exercise& e) { return fmt::format("exercises/{}/{}", WORKBOOK_ANSWERS, e.file); }

// Runs e's checks in order and prints each, stopping at the first that fails.
Outcome grade(const Exercise& e, Lang lang) {
  const bool zh = lang == Lang::Zh;
  fmt::print(fmt::runtime(zh ? "练习 {}：{}   （{}）\n" : "Exercise {}: {}   ({})\n"), e.number, e.title.in(lang),
             answer_path(e));
  for (const workbook::Check& check : e.checks) {
    std::optional<Text> failure;
    try {
      failure = check.run();
    } catch (const workbook::NotWritten& unwritten) {
      fmt::print(fmt::runtime(zh ? "  未作答：{}（它仍抛出 NotWritten）；请编辑 {}\n"
                                 : "  not attempted: {} (its stub still throws NotWritten); edit {}\n"),
                 unwritten.what(), answer_path(e));
      return Outcome::NotAttempted;
    } catch (const std::exception& error) {
      failure = Text{fmt::format("your function threw: {}", error.what()),
                     fmt::format("你的函数抛出了异常：{}", error.what())};
    }
    if (!failure) {
      fmt::print("  {}  {}\n", zh ? "通过" : "ok  ", check.name.in(lang));
      continue;
    }
    fmt::print("  {}  {} [{}]\n", zh ? "失败" : "FAIL", check.name.in(lang), check.id);
    fmt::print("        {}\n", failure->in(lang));
    fmt::print("        {}{}\n", zh ? "提示：" : "hint: ", check.hint.in(lang));
    return Outcome::Failed;
  }
  return Outcome::Passed;
}

const char* outcome_name(Outcome o, Lang lang) {
  const bool zh = lang == Lang::Zh;
  switch (o) {
    case Outcome::Passed: return zh ? "通过" : "passed";
    case Outcome::Failed: return zh ? "未通过" : "failed";
    case Outcome::NotAttempted: return zh ? "未作答" : "not attempted";
  }
  return "";
}

int refuse(const std::string& why) {
  std::size_t n = workbook::exercises().size();
  fmt::print(stderr, "workbook: {}\n", why);
  fmt::print(stderr, fmt::runtime(kUsageText), n, n);
  return kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Exercise>& all = workbook::exercises();
  Lang lang = Lang::En;
  std::string which;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--lang") {
      if (i + 1 == argc) return refuse("--lang needs a value: en or zh");
      std::string value = argv[++i];
      if (value != "en" && value != "zh") return refuse(fmt::format("--lang {}: expected en or zh", value));
      lang = value == "zh" ? Lang::Zh : Lang::En;
    } else if (word == "--list") {
      list = true;
    } else if (word == "-h" || word == "--help") {
      fmt::print(fmt::runtime(kUsageText), all.size(), all.size());
      return 0;
    } else if (word.starts_with("-")) {
      return refuse(fmt::format("unknown option '{}'", word));
    } else if (!which.empty()) {
      return refuse(fmt::format("one exercise at a time: got '{}' and '{}'", which, word));
    } else {
      which = word;
    }
  }
  if (list) {
    if (!which.empty()) return refuse(fmt::format("--list takes no exercise, got '{}'", which));
    for (const Exercise& e : all) {
      fmt::print("{:>2}  {}  ({})\n", e.number, e.title.in(lang), answer_path(e));
      for (const workbook::Check& c : e.checks) fmt::print("      {:<22} {}\n", c.id, c.name.in(lang));
    }
    return 0;
  }
  if (which.empty()) return refuse("name an exercise, or all");
  std::vector<const Exercise*> chosen;
  if (which == "all") {
    for (const Exercise& e : all) chosen.push_back(&e);
  } else {
    int n = 0;
    std::size_t used = 0;
    try {
      n = std::stoi(which, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != which.size() || n < 1 || n > static_cast<int>(all.size()))
      return refuse(fmt::format("'{}' is not an exercise: expected a number from 1 to {}, or all", which, all.size()));
    chosen.push_back(&all[static_cast<std::size_t>(n - 1)]);
  }

  std::vector<Outcome> outcomes;
  for (const Exercise* e : chosen) {
    outcomes.push_back(grade(*e, lang));
    if (chosen.size() > 1) fmt::print("\n");
  }
  if (chosen.size() > 1) {
    fmt::print("{}\n", lang == Lang::Zh ? "进度" : "progress");
    for (std::size_t i = 0; i < chosen.size(); ++i)
      fmt::print("  {:>2}  {:<14} {}\n", chosen[i]->number, outcome_name(outcomes[i], lang), chosen[i]->title.in(lang));
  }
  bool failed = false, unwritten = false;
  for (Outcome o : outcomes) {
    failed = failed || o == Outcome::Failed;
    unwritten = unwritten || o == Outcome::NotAttempted;
  }
  return failed ? 1 : unwritten ? kNotAttempted : 0;
}
