// Exercise 7: from averaging the past to a masked softmax
//
// English. The simplest way for token t to use its context is the plain mean of tokens 0..t.
// Written as one product, O = W X with W a lower-triangular [T, T] matrix whose row t holds
// 1/(t+1) at columns 0..t and 0 after. The same W comes out of a softmax: scores of 0 everywhere,
// −inf above the diagonal, softmax over each row. Attention replaces those zero scores by
// learned ones, Q Kᵀ / sqrt(d_k), and keeps the rest.
//   1. causal_average_weights(T): W, built as softmax over −inf-masked zero scores;
//   2. average_the_past(x): for x [T, C], the [T, C] means O = W x.
// Checks: W is lower triangular with exact zeros above the diagonal; W's rows sum to 1 and hold
// 1/(t+1); the means equal a loop over the past; causality (changing the last token changes no
// earlier mean).
// Belongs to: the chapter, §3.2, §5.3 and §6.3 (the causal mask as a weight matrix). Read:
// docs/attention.md, "Causal mask".
//
// 中文。让第 t 个词元利用上下文，最简单的办法是对第 0..t 个词元取平均。写成一次矩阵乘法：
// O = W X，其中 W 是 [T, T] 的下三角矩阵，第 t 行在第 0..t 列为 1/(t+1)，之后为 0。同一个 W
// 也可以由 softmax 得到：分数全为 0，对角线以上设为 −inf，再逐行做 softmax。注意力把这些为 0
// 的分数换成学习得到的 Q Kᵀ / sqrt(d_k)，其余不变。
//   1. causal_average_weights(T)：用 softmax 作用于遮住后的全 0 分数，得到 W；
//   2. average_the_past(x)：对 x [T, C]，返回 [T, C] 的平均值 O = W x。
// 检查：W 是下三角矩阵，对角线以上恰好为 0；W 的每行之和为 1，且元素为 1/(t+1)；平均值与逐个
// 累加的结果相等；因果性（改变最后一个词元不改变更早位置的平均值）。
// 对应：教材第 3.2、5.3、6.3 节（把因果掩码看成一个权重矩阵）。阅读：docs/attention.md 的
// “Causal mask”。
#include "../workbook.h"

namespace workbook {

Tensor causal_average_weights(std::int64_t t) {
  (void)t;
  throw NotWritten("causal_average_weights");
}

Tensor average_the_past(const Tensor& x) {
  (void)x;
  throw NotWritten("average_the_past");
}

}  // namespace workbook
