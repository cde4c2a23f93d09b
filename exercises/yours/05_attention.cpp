// Exercise 5: scaled dot-product attention, forward
//
// English. q [B, Tq, d], k [B, Tk, d], v [B, Tk, dv]. Return
//   O = softmax(Q Kᵀ / sqrt(d) + mask) V        shape [B, Tq, dv]
// step by step: the scores S = Q Kᵀ (one row per query, one column per key), the scale
// 1/sqrt(d), with `causal` the mask (query i may see keys j <= i), the softmax over keys, and the
// weighted sum of the values. Exercises 2 and 4 may be reused here.
// Checks: the shape; equal to ag::scaled_dot_product_attention, with and without the causal
// mask; causality (changing a later token's key or value changes no earlier output); each output
// row lies within the values' range (a weighted mean); float64 gradcheck.
// Belongs to: the chapter, §4 and §5.1-5.4; the minimal implementation. Read: docs/attention.md,
// "Scaled dot-product attention" and "The chapter's minimal implementation".
//
// 中文。q [B, Tq, d]，k [B, Tk, d]，v [B, Tk, dv]。返回
//   O = softmax(Q Kᵀ / sqrt(d) + mask) V        形状 [B, Tq, dv]
// 按步骤来：分数 S = Q Kᵀ（每个查询一行，每个键一列），乘以缩放因子 1/sqrt(d)，若 causal
// 则加掩码（查询 i 只能看到 j <= i 的键），对键做 softmax，最后对值加权求和。可以复用
// 练习 2 和 4 的函数。
// 检查：形状；与 ag::scaled_dot_product_attention 相等（有无因果掩码两种情况）；因果性（改变
// 后面词元的键或值不改变前面的任何输出）；每个输出都在值的范围之内（加权平均）；float64
// 梯度检验。
// 对应：教材第 4 节与第 5.1–5.4 节；最小实现。阅读：docs/attention.md 的 “Scaled dot-product
// attention” 与 “The chapter's minimal implementation”。
#include "../workbook.h"

namespace workbook {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  (void)q;
  (void)k;
  (void)v;
  (void)causal;
  throw NotWritten("attention");
}

}  // namespace workbook
