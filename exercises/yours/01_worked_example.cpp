// Exercise 1: the notes' worked example, by hand
//
// English. The study notes score the query of "cat", q = (1, 0, 1, 0), against three keys with
// d_k = 4:  k_The = (1, 1, 0, 0),  k_cat = (1, 0, 1, 0),  k_sat = (0, 1, 1, 0).
// With pencil and paper (or a calculator, not attograd), work out
//   1. the three scores s_j = q . k_j,
//   2. the scores divided by sqrt(d_k),
//   3. the weights softmax(s / sqrt(d_k)), to 4 decimals,
// and type the numbers in below. The weights are checked to 5e-4, the rest exactly.
// Belongs to: the notes' hand-computed example; the chapter, §4.2-4.4.
// Read: docs/attention.md, "A worked example, and two figures checked".
//
// 中文。学习笔记里，“cat”的查询向量 q = (1, 0, 1, 0) 与三个键做打分，d_k = 4：
//   k_The = (1, 1, 0, 0)，k_cat = (1, 0, 1, 0)，k_sat = (0, 1, 1, 0)。
// 请用纸笔（或计算器，不用 attograd）算出：
//   1. 三个分数 s_j = q · k_j；
//   2. 分数除以 sqrt(d_k) 的结果；
//   3. 权重 softmax(s / sqrt(d_k))，保留 4 位小数；
// 然后把数字填到下面。权重允许 5e-4 的误差，其余必须精确。
// 对应：笔记中的手算例子；教材第 4.2–4.4 节。
// 阅读：docs/attention.md 的 “A worked example, and two figures checked”。
#include "../workbook.h"

namespace workbook {

WorkedExample worked_example() {
  // Replace this line with: return {.scores = {...}, .scaled = {...}, .weights = {...}};
  throw NotWritten("worked_example");
}

}  // namespace workbook
