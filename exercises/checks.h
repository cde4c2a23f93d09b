// The grader's checks: for each exercise, the checks its statement names, in order. A check
// returns nothing when it passes, and otherwise what went wrong in both languages: which input,
// which element, the value expected and the value got.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace workbook {

enum class Lang { En, Zh };

// A sentence in both languages.
struct Text {
  std::string en, zh;
  const std::string& in(Lang lang) const { return lang == Lang::Zh ? zh : en; }
};

struct Check {
  std::string id;  // "2.large-scores": the exercise's number and a name that stays put
  Text name;       // what it checks
  Text hint;       // where the formula is, for a learner whose answer fails it
  std::function<std::optional<Text>()> run;
};

struct Exercise {
  int number;
  Text title;
  std::string file;  // the answer's file name, the same in yours/, solutions/ and wrong/
  std::vector<Check> checks;
};

// Every exercise, in the chapter's order.
const std::vector<Exercise>& exercises();

}  // namespace workbook
