// Exercise 9: sinusoidal positions
//
// English. Attention alone is blind to order: permute the tokens and its outputs permute the same
// way. The Transformer adds to token t a fixed vector PE[t] of D numbers (D even):
//   PE[t, 2i] = sin(t / 10000^(2i/D)),   PE[t, 2i+1] = cos(t / 10000^(2i/D)),   i = 0 .. D/2 − 1
// Write sinusoidal_positions(T, D), the [T, D] table in float64.
// Checks: the shape; the formula at every entry; equal to nn::SinusoidalPositionalEncoding's
// table; each (sin, cos) pair has length 1; with the table added, self-attention is no longer
// blind to order (permuting the tokens changes more than the order of the outputs).
// Belongs to: the notes' misconception on positional encoding; the chapter's self-attention
// sections. Read: docs/attention.md, "Positions".
//
// 中文。注意力本身不区分顺序：把词元换个顺序，输出也只是同样地换个顺序。Transformer 给第 t
// 个词元加上一个固定的 D 维向量 PE[t]（D 为偶数）：
//   PE[t, 2i] = sin(t / 10000^(2i/D))，PE[t, 2i+1] = cos(t / 10000^(2i/D))，i = 0 .. D/2 − 1
// 写出 sinusoidal_positions(T, D)，返回 float64 的 [T, D] 表。
// 检查：形状；每个元素符合公式；与 nn::SinusoidalPositionalEncoding 的表相等；每对 (sin, cos)
// 的长度为 1；加上位置表之后，自注意力不再对顺序无感（打乱词元后，输出的变化不只是顺序）。
// 对应：笔记中关于位置编码的误区；教材中自注意力的各节。阅读：docs/attention.md 的 “Positions”。
#include "../workbook.h"

namespace workbook {

Tensor sinusoidal_positions(std::int64_t t, std::int64_t d) {
  (void)t;
  (void)d;
  throw NotWritten("sinusoidal_positions");
}

}  // namespace workbook
