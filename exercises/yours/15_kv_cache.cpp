// Exercise 15: a KV cache that decodes equal to the full forward
//
// English. A GPT writes one token at a time. Run over the whole text again at every new token and
// the keys and values of the earlier tokens are computed again, each time the same: a causal
// mask never lets an earlier row see a later token, so nothing it depends on has changed. A KV
// cache keeps them. Write KvCache::step for one causal head, W_q, W_k [dk, d] and W_v [dv, d]:
//   1. from the new token x_t [d]: q_t = W_q x_t, k_t = W_k x_t, v_t = W_v x_t;
//   2. append k_t as a new row of `keys` [t+1, dk] and v_t of `values` [t+1, dv] (both are
//      undefined before the first step: the first row starts them);
//   3. return o_t = Σ_{j ≤ t} p_j v_j with p = softmax_j(q_t · k_j / √dk) [dv].
// No mask is needed: the cache holds exactly the keys a causal mask would leave row t.
// Checks: the first step returns W_v x_0; after six steps the cache holds the six keys and
// values; the six outputs equal the library's causal attention over the whole sequence, 1e-12
// in float64.
// Belongs to: the chapter, §6.3 (the causal mask, and why it keeps a GPT honest) and the generation
// of the Mini-GPT chapter. Read: docs/training.md, "Sampling: `minigpt sample`" (the paragraph
// on the KV cache).
//
// 中文。GPT 每次写出一个词元。若每来一个新词元就把整段文本重新算一遍，前面各词元的键和值会被
// 一再重复计算，而每次结果都一样：因果掩码从不让前面的行看到后面的词元，它所依赖的东西都没有变。
// KV 缓存把它们留下来。为一个因果注意力头写出 KvCache::step，W_q、W_k [dk, d]，W_v [dv, d]：
//   1. 由新词元 x_t [d] 算出 q_t = W_q x_t、k_t = W_k x_t、v_t = W_v x_t；
//   2. 把 k_t 作为新的一行追加到 keys [t+1, dk]，把 v_t 追加到 values [t+1, dv]（第一步之前两者
//      都未定义：由第一行开始）；
//   3. 返回 o_t = Σ_{j ≤ t} p_j v_j，其中 p = softmax_j(q_t · k_j / √dk)，形状 [dv]。
// 不需要掩码：缓存里恰好是因果掩码允许第 t 行看到的那些键。
// 检查：第一步返回 W_v x_0；六步之后缓存中有六个键和值；六步的输出与库中对整段序列的因果注意力
// 相等（float64，误差 1e-12）。
// 对应：教材第 6.3 节（因果掩码，以及它为何让 GPT 的训练不作弊），以及 Mini-GPT 一章的生成。
// 阅读：docs/training.md 的 “Sampling: `minigpt sample`”（关于 KV cache 的一段）。
#include "../workbook.h"

namespace workbook {

Tensor KvCache::step(const Tensor& x_t) {
  (void)x_t;
  throw NotWritten("KvCache::step");
}

}  // namespace workbook
