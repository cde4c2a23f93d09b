// Exercise 3: softmax's backward, derived by hand
//
// English. y = softmax(x) over the last dim. Given y and dy = dL/dy (same shape), return
// dx = dL/dx. Derive it first: dy_i/dx_j = y_i (δ_ij − y_j), so each row's dx is a product with
// that Jacobian. The answer never needs the Jacobian itself: it is one elementwise product and
// one sum per row. Use ops or loops; the checker compares with finite differences of
// ag::softmax and with autograd's gradient.
// Checks: equal to autograd's gradient; equal to central finite differences; each row of dx
// sums to 0 (adding a constant to a row's scores changes nothing).
// Belongs to: the chapter, §4.4 and §5.3. Read: docs/softmax.md, "The Jacobian" and "Backward
// without the Jacobian".
//
// 中文。y = softmax(x)（最后一维）。已知 y 和 dy = dL/dy（形状相同），返回 dx = dL/dx。
// 请先推导：dy_i/dx_j = y_i (δ_ij − y_j)，每行的 dx 就是与这个雅可比矩阵的乘积。答案并不
// 需要把雅可比矩阵写出来：每行只要一次逐元素乘法和一次求和。可以用算子也可以用循环；
// 检查程序会与 ag::softmax 的有限差分以及自动微分的梯度作比较。
// 检查：与自动微分的梯度相等；与中心差分相等；dx 每行之和为 0（给一行分数加同一个常数
// 不改变结果）。
// 对应：教材第 4.4、5.3 节。阅读：docs/softmax.md 的 “The Jacobian” 与 “Backward without the Jacobian”。
#include "../workbook.h"

namespace workbook {

Tensor softmax_backward(const Tensor& y, const Tensor& dy) {
  (void)y;
  (void)dy;
  throw NotWritten("softmax_backward");
}

}  // namespace workbook
