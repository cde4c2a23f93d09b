// SwiGLU, the MLP of LLaMA-style models, composed from primitive ops.
//
//   h1 = x W1^T,   h3 = x W3^T,   a = silu(h1) h3,   y = a W2^T,      silu(v) = v sigmoid(v)
//   x: [..., in]   W1, W3: [hidden, in]   W2: [out, hidden]   y: [..., out]
//
// W1 (the gate) decides, element by element, how much of W3's projection (the value) passes;
// silu is a smooth gate that lets a little of a negative h1 through. The backward is the chain
// rule through reference::linear, sigmoid and mul.
#include "../binary.h"
#include "../elementwise.h"
#include "../kernel_ops.h"
#include "reference.h"

namespace ag::reference {

Tensor swiglu(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down) {
  count_call(KernelOp::Swiglu);
  Tensor h1 = reference::linear(x, w_gate, Tensor());
  Tensor h3 = reference::linear(x, w_up, Tensor());
  Tensor a = h1 * sigmoid(h1) * h3;
  return reference::linear(a, w_down, Tensor());
}

}  // namespace ag::reference
