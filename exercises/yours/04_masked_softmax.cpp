// Exercise 4: masks, −inf against 0
//
// English. scores has shape [..., Tq, Tk]; keep is a bool tensor that broadcasts to it, true
// where a query may attend to a key (ag::causal_mask and ag::key_padding_mask build such masks).
// Return the softmax over the last dim in which a masked key gets weight exactly 0. Setting its
// score to 0 is not enough: exp(0) = 1 still takes a share. Set it to −inf (ag::masked_fill) so
// that exp gives 0. A query whose keys are all masked must get a row of zeros, not NaN (−inf
// minus −inf is NaN: handle that row on its own).
// Checks: equal to ag::softmax where a row keeps a key; masked keys get exactly 0; causality
// (changing a future score changes no weight of an earlier query); a fully masked row gives
// zeros; float64 gradcheck.
// Belongs to: the chapter, §5.3 and §6.3; the notes' misconception about −inf and 0.
// Read: docs/attention.md, "Why −inf, and not 0" and "Fully masked rows".
//
// 中文。scores 的形状为 [..., Tq, Tk]；keep 是可以广播到该形状的布尔张量，true 表示该查询
// 可以关注该键（ag::causal_mask 与 ag::key_padding_mask 可以生成这样的掩码）。返回最后一维
// 上的 softmax，其中被遮住的键的权重必须恰好为 0。把它的分数设为 0 并不够：exp(0) = 1 仍会
// 分走一份权重。要设为 −inf（ag::masked_fill），这样 exp 才得到 0。若某个查询的所有键都被
// 遮住，它应得到全 0 的一行，而不是 NaN（−inf 减 −inf 是 NaN，这一行要单独处理）。
// 检查：在保留了键的行上与 ag::softmax 相等；被遮住的键恰好为 0；因果性（改变未来位置的
// 分数不改变更早查询的任何权重）；全部被遮住的行为 0；float64 梯度检验。
// 对应：教材第 5.3、6.3 节；笔记中关于 −inf 与 0 的误区。
// 阅读：docs/attention.md 的 “Why −inf, and not 0” 与 “Fully masked rows”。
#include "../workbook.h"

namespace workbook {

Tensor masked_softmax(const Tensor& scores, const Tensor& keep) {
  (void)scores;
  (void)keep;
  throw NotWritten("masked_softmax");
}

}  // namespace workbook
