// Exercise 10: layer norm's backward
//
// English. Over each row of x [R, D]:
//   mean = (1/D) sum_j x_j,  var = (1/D) sum_j (x_j − mean)²,  rstd = 1 / sqrt(var + eps)
//   x̂ = (x − mean) · rstd,   y = x̂ ⊙ w + b                       w, b: [D]
// Given x, w, dy = dL/dy and eps, return dx [R, D], dw [D] and db [D] without backward().
// db and dw are sums over rows. For dx, moving one x_i moves x̂ three ways: directly, through the
// mean, and through the spread; each gives one term. With g = dy ⊙ w, the result has the form
//   dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))      (means over the row)
// but derive it before you trust it.
// Checks: db, dw and dx equal to autograd's gradients of ag::layer_norm on [4, 5]; the rows of
// dx sum to 0 (a row shifted by a constant normalises the same); docs/layer_norm.md's small
// example (D = 3, x = [1, 2, 6], dy = [1, 0, 0]).
// Belongs to: the Transformer block that the chapter leads to (layer norm around attention).
// Read: docs/layer_norm.md, "Backward".
//
// 中文。对 x [R, D] 的每一行：
//   mean = (1/D) Σ_j x_j，var = (1/D) Σ_j (x_j − mean)²，rstd = 1 / sqrt(var + eps)
//   x̂ = (x − mean) · rstd，y = x̂ ⊙ w + b                        w、b：[D]
// 已知 x、w、dy = dL/dy 和 eps，不调用 backward()，返回 dx [R, D]、dw [D]、db [D]。db 和 dw 是
// 对行求和。对于 dx：改变一个 x_i 会通过三条路径影响 x̂：直接影响、经过均值、经过方差；每条
// 路径给出一项。记 g = dy ⊙ w，结果的形式为
//   dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))      （均值在行内计算）
// 但请先自己推导，再相信它。
// 检查：db、dw、dx 与 ag::layer_norm 在 [4, 5] 上的自动微分梯度相等；dx 的每行之和为 0（整行
// 加上同一个常数，规范化的结果不变）；docs/layer_norm.md 中的小例子（D = 3，x = [1, 2, 6]，
// dy = [1, 0, 0]）。
// 对应：本章引出的 Transformer 块（注意力前后的层规范化）。阅读：docs/layer_norm.md 的 “Backward”。
#include "../workbook.h"

namespace workbook {

LayerNormGrads layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& dy, double eps) {
  (void)x;
  (void)w;
  (void)dy;
  (void)eps;
  throw NotWritten("layer_norm_backward");
}

}  // namespace workbook
