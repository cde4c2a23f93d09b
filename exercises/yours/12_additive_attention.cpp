// Exercise 12: additive (Bahdanau) attention
//
// English. Before dot products, attention scored a query against a key with a small network:
//   score(q_i, k_j) = a · tanh(W_q q_i + W_k k_j)        W_q [H, dq], W_k [H, dk], a [H]
// then, as in scaled dot-product attention, softmax over the keys and a weighted sum of the values.
// q [Tq, dq], k [Tk, dk], v [Tk, dv]; return [Tq, dv]. Queries and keys may have different sizes,
// which a dot product does not allow. (Hint: W_q q_i + W_k k_j for every pair (i, j) is one
// broadcast sum of a [Tq, 1, H] and a [1, Tk, H] tensor.)
// Checks: the shape; the values against a loop over every (i, j); float64 gradcheck in all six
// inputs.
// Belongs to: the chapter, §3.1 (the encoder-decoder that attention was first added to). Read:
// docs/experiments.md, "The bottleneck with a recurrent encoder".
//
// 中文。在点积之前，注意力用一个小网络给查询和键打分：
//   score(q_i, k_j) = a · tanh(W_q q_i + W_k k_j)        W_q [H, dq]，W_k [H, dk]，a [H]
// 然后和缩放点积注意力一样，对键做 softmax，再对值加权求和。q [Tq, dq]，k [Tk, dk]，v [Tk, dv]；
// 返回 [Tq, dv]。查询和键的维数可以不同，点积则不允许这样。（提示：对所有 (i, j) 计算
// W_q q_i + W_k k_j，就是 [Tq, 1, H] 与 [1, Tk, H] 两个张量的一次广播加法。）
// 检查：形状；与逐个 (i, j) 循环计算的结果相等；对全部六个输入的 float64 梯度检验。
// 对应：教材第 3.1 节（注意力最初被加入的编码器-解码器）。阅读：docs/experiments.md 的
// “The bottleneck with a recurrent encoder”。
#include "../workbook.h"

namespace workbook {

Tensor additive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w_q, const Tensor& w_k,
                          const Tensor& a) {
  (void)q;
  (void)k;
  (void)v;
  (void)w_q;
  (void)w_k;
  (void)a;
  throw NotWritten("additive_attention");
}

}  // namespace workbook
