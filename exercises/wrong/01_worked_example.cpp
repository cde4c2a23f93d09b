// Exercise 1, wrong on purpose: divided by d_k = 4 instead of sqrt(d_k) = 2. Caught by 1.scaled.
#include "../workbook.h"

namespace workbook {

WorkedExample worked_example() {
  return {.scores = {1, 2, 1}, .scaled = {0.25, 0.5, 0.25}, .weights = {0.3045, 0.3910, 0.3045}};
}

}  // namespace workbook
