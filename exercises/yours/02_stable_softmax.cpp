// Exercise 2: a softmax that does not overflow
//
// English. Write softmax over the last dim of x (any shape, float32 or float64):
//   softmax(x)_i = exp(x_i) / sum_j exp(x_j)
// with attograd's ops (exp, sum, max, ... : autograd then gives its gradient for free). Taken
// literally, exp(1000) is inf and the row becomes NaN. Shifting a row by a constant does not
// change its softmax, so subtract each row's largest entry first. A −inf entry must still get
// weight exactly 0.
// Checks: equal to ag::softmax; rows sum to 1; scores near 1000 stay finite; a −inf gets 0;
// float64 gradcheck.
// Belongs to: the chapter, §4.4. Read: docs/softmax.md, "The forward pass, and why it subtracts
// the maximum".
//
// 中文。对 x 的最后一维写出 softmax（任意形状，float32 或 float64）：
//   softmax(x)_i = exp(x_i) / Σ_j exp(x_j)
// 请用 attograd 的算子（exp、sum、max 等）来写，这样梯度由自动微分给出。照公式直接算时，
// exp(1000) 为 inf，整行变成 NaN。每行同减一个常数不改变 softmax，所以先减去每行的最大值。
// 值为 −inf 的元素权重必须恰好为 0。
// 检查：与 ag::softmax 相等；每行之和为 1；接近 1000 的分数仍是有限值；−inf 得到 0；
// float64 梯度检验。
// 对应：教材第 4.4 节。阅读：docs/softmax.md 的 “The forward pass, and why it subtracts the maximum”。
#include "../workbook.h"

namespace workbook {

Tensor stable_softmax(const Tensor& x) {
  (void)x;
  throw NotWritten("stable_softmax");
}

}  // namespace workbook
