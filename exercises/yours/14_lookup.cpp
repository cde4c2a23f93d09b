// Exercise 14: an attention layer as a module, trained to look a word up
//
// English. Attention read as a soft dictionary: the query is compared with every key, and the
// values are summed with the weights the comparison gives. Build it as a module and let the
// grader train it. Each example holds n pairs (key_j, value_j) of symbols and a query equal to
// one of its keys; the right answer is that key's value.
//   1. The constructor makes the six parts declared in workbook.h and registers each
//      (register_module("w_q", std::make_shared<ag::nn::Linear>(d, d, true, generator)), ...):
//      key_embedding [key_symbols, d], value_embedding [value_symbols, d], w_q, w_k, w_v (d -> d),
//      w_o (d -> value_symbols).
//   2. forward(keys [B, n], values [B, n], query [B]) -> logits [B, value_symbols]:
//        q = W_q e(query),  k_j = W_k e(key_j),  v_j = W_v e(value_j)       (e: the embeddings)
//        p = softmax_j(q · k_j / √d),  o = Σ_j p_j v_j,  logits = W_o o
// Checks: the shape; no order: shuffling the pairs changes no logit (nothing here says where a
// pair stands); every part gets a gradient; and trained by the grader (AdamW, 400 steps of 64
// examples, 16 key symbols, 16 value symbols, n = 4, d = 32), at least 95% of 1,000 new
// examples answered right.
// Belongs to: the chapter, §4.1 (Q, K and V as three linear maps; V is what is summed) and §9
// (attention is a soft selection, not a discrete retrieval). Read: docs/attention.md, "Queries,
// keys and values".
//
// 中文。把注意力看作一本“软”字典：查询与每个键比较，按比较得到的权重对值加权求和。把它写成一个
// 模块，由评分程序来训练。每个样本含 n 对符号 (key_j, value_j) 和一个查询，查询等于其中某个键；
// 正确答案是该键对应的值。
//   1. 构造函数创建 workbook.h 中声明的六个部件并逐一注册（register_module("w_q",
//      std::make_shared<ag::nn::Linear>(d, d, true, generator))，……）：key_embedding
//      [key_symbols, d]、value_embedding [value_symbols, d]、w_q、w_k、w_v（d -> d）、
//      w_o（d -> value_symbols）。
//   2. forward(keys [B, n], values [B, n], query [B]) -> logits [B, value_symbols]：
//        q = W_q e(query)，k_j = W_k e(key_j)，v_j = W_v e(value_j)      （e 为嵌入）
//        p = softmax_j(q · k_j / √d)，o = Σ_j p_j v_j，logits = W_o o
// 检查：输出形状；与顺序无关：打乱各对的顺序不改变任何 logit（这里没有任何信息表明一对处在哪个
// 位置）；每个部件都得到梯度；由评分程序训练（AdamW，400 步，每步 64 个样本，16 个键符号、
// 16 个值符号，n = 4，d = 32）之后，在 1000 个新样本上至少答对 95%。
// 对应：教材第 4.1 节（Q、K、V 来自三个线性映射，被加权求和的是 V）和第 9 节（注意力是软选择，
// 不是离散检索）。阅读：docs/attention.md 的 “Queries, keys and values”。
#include "../workbook.h"

namespace workbook {

Lookup::Lookup(std::int64_t key_symbols, std::int64_t value_symbols, std::int64_t d, ag::Generator& generator) {
  (void)key_symbols;
  (void)value_symbols;
  (void)d;
  (void)generator;
  throw NotWritten("Lookup::Lookup");
}

Tensor Lookup::forward(const Tensor& keys, const Tensor& values, const Tensor& query) const {
  (void)keys;
  (void)values;
  (void)query;
  throw NotWritten("Lookup::forward");
}

}  // namespace workbook
