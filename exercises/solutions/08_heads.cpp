// Exercise 8, a reference answer: cut the last dim into [H, D/H], then move the head dim in front
// of the tokens; merging undoes both, in the other order.
#include "../workbook.h"

namespace workbook {

Tensor split_heads(const Tensor& x, std::int64_t heads) {
  std::int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  return x.reshape({b, t, heads, d / heads}).transpose(1, 2);  // [B, T, H, D/H] -> [B, H, T, D/H]
}

Tensor merge_heads(const Tensor& x) {
  std::int64_t b = x.size(0), h = x.size(1), t = x.size(2), dh = x.size(3);
  return x.transpose(1, 2).reshape({b, t, h * dh});
}

}  // namespace workbook
