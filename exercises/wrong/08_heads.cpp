// Exercise 8, wrong on purpose: reshape straight to [B, H, T, D/H], with no transpose. The shapes
// are right and merge undoes split, but a "head" now holds pieces of several tokens. Caught by
// 8.split.
#include "../workbook.h"

namespace workbook {

Tensor split_heads(const Tensor& x, std::int64_t heads) {
  return x.reshape({x.size(0), heads, x.size(1), x.size(2) / heads});
}

Tensor merge_heads(const Tensor& x) { return x.reshape({x.size(0), x.size(2), x.size(1) * x.size(3)}); }

}  // namespace workbook
