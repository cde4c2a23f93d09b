// Exercise 6: attention's backward, dQ, dK and dV
//
// English. One head, no batch: q [Tq, d], k [Tk, d], v [Tk, dv], and dout = dL/dO [Tq, dv] for
// O = softmax(S) V with S = Q Kᵀ / sqrt(d) (no mask). Return dQ, dK and dV without calling
// backward(): recompute P = softmax(S), then go back through the three steps, each a rule you
// already have:
//   through O = P V            (the matmul rule)       dV = ?,  dP = ?
//   through P = softmax(S)     (exercise 3, row by row) dS = ?
//   through S = Q Kᵀ / sqrt(d) (the matmul rule again)  dQ = ?,  dK = ?
// Check each shape against the tensor it is the gradient of.
// Checks: dV, dQ and dK each equal to autograd's gradients of ag::scaled_dot_product_attention;
// the rows of dK sum to 0 (moving every key by the same vector adds the same number to a whole
// row of scores, which softmax ignores).
// Belongs to: the chapter, §4 and §5 (the computation the backward pass reverses). Read:
// docs/attention.md, "The backward pass of the fused op", and docs/autograd.md, section (c).
//
// 中文。单头、无批量：q [Tq, d]，k [Tk, d]，v [Tk, dv]，以及 dout = dL/dO [Tq, dv]，其中
// O = softmax(S) V，S = Q Kᵀ / sqrt(d)（无掩码）。不调用 backward()，返回 dQ、dK、dV：先重新
// 算出 P = softmax(S)，再依次反向经过三步，每一步都是已经学过的规则：
//   经过 O = P V             （矩阵乘法的规则）      dV = ?，dP = ?
//   经过 P = softmax(S)      （练习 3，逐行）         dS = ?
//   经过 S = Q Kᵀ / sqrt(d)  （再次用矩阵乘法的规则） dQ = ?，dK = ?
// 每个梯度的形状都应与对应的张量相同。
// 检查：dV、dQ、dK 分别与 ag::scaled_dot_product_attention 的自动微分梯度相等；dK 的各行之和
// 为 0（所有键同时加上同一个向量，只会给一整行分数加上同一个数，softmax 对此不敏感）。
// 对应：教材第 4、5 节（反向传播逆着走的计算）。阅读：docs/attention.md 的 “The backward pass
// of the fused op”，以及 docs/autograd.md 的 (c) 节。
#include "../workbook.h"

namespace workbook {

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout) {
  (void)q;
  (void)k;
  (void)v;
  (void)dout;
  throw NotWritten("attention_backward");
}

}  // namespace workbook
