// Exercise 11: cross-entropy's backward
//
// English. logits x [R, C], one target class per row (targets [R], int64); a row whose target is
// −100 is ignored. The loss is the mean over the N counted rows of
//   ℓ_r = −log softmax(x_r)[t_r] = log sum_c exp(x_rc) − x_{r, t_r}
// Given x, the targets and dloss = dL/dloss (a number), return dL/dx [R, C] without backward().
// Differentiate ℓ_r by x_rc: the log-sum-exp gives the softmax, the second term a one-hot. Then
// mind the mean (which N?) and the ignored rows. Compute the softmax the stable way (exercise 2).
// Checks: equal to autograd's gradient of ag::cross_entropy, with an ignored row; each counted
// row sums to 0; ignored rows get exactly 0; logits near 1000 stay finite.
// Belongs to: the Mini-GPT's training loss (the chapter's next-token prediction). Read:
// docs/cross_entropy.md, "The gradient: softmax minus one-hot" and "ignore_index, and the mean
// over counted rows".
//
// 中文。logits x [R, C]，每行一个目标类别（targets [R]，int64）；目标为 −100 的行被忽略。损失是
// 对 N 个参与计算的行取平均：
//   ℓ_r = −log softmax(x_r)[t_r] = log Σ_c exp(x_rc) − x_{r, t_r}
// 已知 x、targets 和 dloss = dL/dloss（一个数），不调用 backward()，返回 dL/dx [R, C]。对 x_rc
// 求 ℓ_r 的导数：log-sum-exp 一项给出 softmax，第二项给出独热向量。再注意平均（N 是哪些行？）
// 与被忽略的行。softmax 要用稳定的算法（练习 2）。
// 检查：与 ag::cross_entropy 的自动微分梯度相等（含一个被忽略的行）；每个参与计算的行之和为 0；
// 被忽略的行恰好为 0；接近 1000 的 logits 仍为有限值。
// 对应：Mini-GPT 的训练损失（本章的下一个词元预测）。阅读：docs/cross_entropy.md 的
// “The gradient: softmax minus one-hot” 与 “ignore_index, and the mean over counted rows”。
#include "../workbook.h"

namespace workbook {

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss) {
  (void)logits;
  (void)targets;
  (void)dloss;
  throw NotWritten("cross_entropy_backward");
}

}  // namespace workbook
