// Exercise 13: an RNN step, and backpropagation through time
//
// English. The model the chapter starts from: a tanh RNN reads x [T, I] one step at a time,
//   h_t = tanh(W_x x_t + W_h h_{t−1} + b),   t = 1 .. T,    W_x [H, I], W_h [H, H], b [H], h_0 [H]
// and only its last state h_T goes on (the fixed-size summary of §3.1).
//   1. rnn_last_state: h_T;
//   2. rnn_backward: given dh_T = dL/dh_T, the gradients of x, h_0, W_x, W_h and b, without
//      backward(). Walk the steps from the last to the first: at step t, da_t = dh_t ⊙ (1 − h_t²)
//      (tanh's derivative), then da_t feeds b, W_x (with x_t), W_h (with h_{t−1}), x_t and
//      h_{t−1}, and the weights' gradients add up over the steps.
// Checks: the last state against a loop; db, dW_x, dW_h, dx and dh_0 equal to autograd's through
// the unrolled loop.
// Belongs to: the chapter, §1 and §3.1 (the RNN encoder whose one vector attention replaces).
// Read: docs/recurrent.md, "Backpropagation through time".
//
// 中文。本章的出发点：一个 tanh RNN 逐步读入 x [T, I]：
//   h_t = tanh(W_x x_t + W_h h_{t−1} + b)，t = 1 .. T，   W_x [H, I]，W_h [H, H]，b [H]，h_0 [H]
// 只有最后的状态 h_T 被传下去（第 3.1 节中那个固定长度的摘要）。
//   1. rnn_last_state：返回 h_T；
//   2. rnn_backward：已知 dh_T = dL/dh_T，不调用 backward()，返回 x、h_0、W_x、W_h、b 的梯度。
//      从最后一步往前走：第 t 步 da_t = dh_t ⊙ (1 − h_t²)（tanh 的导数），然后 da_t 分别流向
//      b、W_x（配 x_t）、W_h（配 h_{t−1}）、x_t 和 h_{t−1}，权重的梯度在各步之间累加。
// 检查：最后的状态与循环计算相等；db、dW_x、dW_h、dx、dh_0 与展开后的自动微分梯度相等。
// 对应：教材第 1、3.1 节（注意力所取代的、只留一个向量的 RNN 编码器）。阅读：docs/recurrent.md 的
// “Backpropagation through time”。
#include "../workbook.h"

namespace workbook {

Tensor rnn_last_state(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b) {
  (void)x;
  (void)h0;
  (void)w_x;
  (void)w_h;
  (void)b;
  throw NotWritten("rnn_last_state");
}

RnnGrads rnn_backward(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b,
                      const Tensor& dh_last) {
  (void)x;
  (void)h0;
  (void)w_x;
  (void)w_h;
  (void)b;
  (void)dh_last;
  throw NotWritten("rnn_backward");
}

}  // namespace workbook
