// Exercise 8: multi-head attention's split and merge
//
// English. Multi-head attention cuts the model dimension D into H heads of D/H channels, lets
// each head attend on its own, and joins the heads again before the output projection.
//   1. split_heads(x, H): x [B, T, D] -> [B, H, T, D/H], where head h of token t holds channels
//      h·D/H .. (h+1)·D/H − 1 of x[b, t];
//   2. merge_heads(x): the inverse, [B, H, T, D/H] -> [B, T, D].
// A reshape alone puts the right numbers in the right shape only if the dims are in the right
// order: which dim has to move, and where?
// Checks: the shapes; split puts element x[b, t, h·D/H + c] at [b, h, t, c]; merge(split(x)) = x;
// attention on the split heads, merged, equals attention run on each head's channels apart and
// concatenated; float64 gradcheck.
// Belongs to: the chapter, §7 (multi-head: split, attend, concatenate, project). Read:
// docs/attention.md, "Heads: split and merge".
//
// 中文。多头注意力把模型维度 D 切成 H 个头，每个头 D/H 个通道，各自做注意力，再在输出投影
// 之前拼回去。
//   1. split_heads(x, H)：x [B, T, D] -> [B, H, T, D/H]，词元 t 的第 h 个头是 x[b, t] 的第
//      h·D/H .. (h+1)·D/H − 1 个通道；
//   2. merge_heads(x)：反过来，[B, H, T, D/H] -> [B, T, D]。
// 只用 reshape，只有维度顺序对了，数才会落在正确的位置：哪一维需要移动，移到哪里？
// 检查：形状；split 把 x[b, t, h·D/H + c] 放到 [b, h, t, c]；merge(split(x)) = x；在拆开的头上做
// 注意力再合并，等于对每个头的通道分别做注意力再拼接；float64 梯度检验。
// 对应：教材第 7 节（多头：拆分、各自注意、拼接、投影）。阅读：docs/attention.md 的
// “Heads: split and merge”。
#include "../workbook.h"

namespace workbook {

Tensor split_heads(const Tensor& x, std::int64_t heads) {
  (void)x;
  (void)heads;
  throw NotWritten("split_heads");
}

Tensor merge_heads(const Tensor& x) {
  (void)x;
  throw NotWritten("merge_heads");
}

}  // namespace workbook
