// Exercise 10, wrong on purpose: dx without the path through the spread (the −x̂ · mean(g ⊙ x̂)
// term), as if rstd were a constant. dw and db are right. Caught by 10.dx.
#include "../workbook.h"

namespace workbook {

LayerNormGrads layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& dy, double eps) {
  Tensor centred = x - x.mean(-1, true);
  Tensor rstd = (centred.pow(2.0).mean(-1, true) + eps).pow(-0.5);
  Tensor xhat = centred * rstd;
  Tensor g = dy * w;
  return {rstd * (g - g.mean(-1, true)), (dy * xhat).sum(0), dy.sum(0)};
}

}  // namespace workbook
