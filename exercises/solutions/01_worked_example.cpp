// Exercise 1, a reference answer. By hand: q = (1, 0, 1, 0) against
//   k_The = (1, 1, 0, 0): 1 + 0 + 0 + 0 = 1
//   k_cat = (1, 0, 1, 0): 1 + 0 + 1 + 0 = 2
//   k_sat = (0, 1, 1, 0): 0 + 0 + 1 + 0 = 1
// divided by sqrt(4) = 2: 0.5, 1, 0.5. Then with Z = e^0.5 + e^1 + e^0.5 = 2 (1.64872) + 2.71828
// = 6.01572: e^0.5 / Z = 0.27407 and e / Z = 0.45186.
#include "../workbook.h"

namespace workbook {

WorkedExample worked_example() {
  return {.scores = {1, 2, 1}, .scaled = {0.5, 1, 0.5}, .weights = {0.2741, 0.4519, 0.2741}};
}

}  // namespace workbook
