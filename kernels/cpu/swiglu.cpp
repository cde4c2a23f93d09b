// The cpu backend's swiglu: the MLP of LLaMA-style models as three products and one elementwise
// pass forward, six products and one pass backward. The plain-loop twin, with the derivation line
// by line, is kernels/naive/swiglu.cpp.
//
//   x: [rows, in]   W1, W3: [hidden, in]   W2: [out, hidden]   y, dy: [rows, out]
//   h1, h3, a and their gradients: [rows, hidden]
//
//   forward:   h1 = x W1^T,   h3 = x W3^T,   a = silu(h1) h3,   y = a W2^T
//   backward:  da = dy W2,   dW2 = dy^T a,   dh3 = da silu(h1),   dh1 = da h3 silu'(h1)
//              dx = dh1 W1 + dh3 W3,   dW1 = dh1^T x,   dW3 = dh3^T x
//
// Every product goes through the policy the router hands the kernels (kernels/products.h), so
// under autocast each takes bf16 inputs (a and the gradients rounded on the way in) and adds in
// float32; the elementwise passes stay in T. A product is cut into bands across the threads by
// the gemm itself; the passes by parallel_for.
#include <algorithm>
#include <cmath>
#include <optional>

#include "../../runtime/allocator.h"
#include "../../runtime/parallel.h"
#include "blas.h"
#include "kernels.h"

namespace ag::backends::cpu {

namespace {

// silu(v) = v s and silu'(v) = s (1 + v (1 - s)), s = sigmoid(v) = 1 / (1 + e^-v), in T (float
// math for float32). For every finite v both are finite: far below zero e^-v overflows to inf,
// so s = 0 and silu = silu' = -0; far above, s = 1, silu = v and silu' = 1. At v = -inf or +inf
// the products would be inf * 0 = NaN, so the limits are returned there instead:
// silu(-inf) = 0, silu'(-inf) = 0, silu(inf) = inf, silu'(inf) = 1. NaN stays NaN.
template <class T>
struct Silu {
  T value, slope;
};
template <class T>
Silu<T> silu(T v) {
  if (std::isinf(v)) return v > 0 ? Silu<T>{v, T(1)} : Silu<T>{T(0), T(0)};
  T s = T(1) / (T(1) + std::exp(-v));
  return {v * s, s * (T(1) + v * (T(1) - s))};
}

// The buffer `given`, or n values of scratch held by `own` when none is given.
template <class T>
T* given_or_scratch(T* given, std::int64_t n, std::optional<BlockBuffer<T>>& own) {
  return given ? given : own.emplace(n).data();
}

// C = op(A) op(B), or C += op(A) op(B) when `add`, through the policy. An empty sum (k = 0) is
// written here as zeros: a BLAS product with k = 0 is not trusted to write C.
template <class T>
void product(const Products& products, blas::Matrix<const T> a, blas::Matrix<const T> b, blas::Matrix<T> c,
             bool add = false) {
  if (c.rows == 0 || c.cols == 0) return;
  if (a.n() > 0) return products.gemm(a, b, c, add ? T(1) : T(0));
  if (!add)
    for (std::int64_t r = 0; r < c.rows; ++r) std::fill_n(c.data + r * c.ld, c.cols, T(0));
}

constexpr std::int64_t kGrain = 8192;  // elements per chunk of an elementwise pass, as linear's

}  // namespace

// h1 and h3 go to the caller's buffers when given, else to scratch; a is then written over a
// scratch h1 (or h3), and needs a buffer of its own only when both are kept.
template <class T>
void swiglu(const Products& products, const SwigluSizes& n, const T* x, const T* w1, const T* w3, const T* w2, T* y,
            T* h1, T* h3) {
  std::int64_t rows = n.rows, in = n.in, hidden = n.hidden, out = n.out;
  if (rows == 0 || (out == 0 && !h1 && !h3)) return;  // nothing to write
  std::int64_t size = rows * hidden;
  std::optional<BlockBuffer<T>> h1_own, h3_own, a_own;
  T* ph1 = given_or_scratch(h1, size, h1_own);
  T* ph3 = given_or_scratch(h3, size, h3_own);
  blas::Matrix<const T> xs{x, rows, in};
  // h1 = x W1^T,   h3 = x W3^T
  product(products, xs, blas::Matrix<const T>{w1, hidden, in}.t(), blas::Matrix<T>{ph1, rows, hidden});
  product(products, xs, blas::Matrix<const T>{w3, hidden, in}.t(), blas::Matrix<T>{ph3, rows, hidden});
  if (out == 0) return;  // y has no columns
  T* a = !h1 ? ph1 : !h3 ? ph3 : a_own.emplace(size).data();
  parallel_for(size, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) a[i] = silu(ph1[i]).value * ph3[i];  // a = silu(h1) h3
  });
  // y = a W2^T
  product(products, blas::Matrix<const T>{a, rows, hidden}, blas::Matrix<const T>{w2, out, hidden}.t(),
          blas::Matrix<T>{y, rows, out});
}

// One pass over h1 and h3 computes silu once per element for all of a, dh3 and dh1; dh1 is
// written over da, each element after it is read. a is made only for dW2; da, dh1 and dh3 only
// for dx, dW1 or dW3.
template <class T>
void swiglu_backward(const Products& products, const SwigluSizes& n, const T* dy, const T* x, const T* w1, const T* w3,
                     const T* w2, const T* h1, const T* h3, T* dx, T* dw1, T* dw3, T* dw2) {
  std::int64_t rows = n.rows, in = n.in, hidden = n.hidden, out = n.out;
  bool through_h = dx || dw1 || dw3;  // whether da, dh1 and dh3 are needed
  if (!through_h && !dw2) return;
  std::int64_t size = rows * hidden;
  std::optional<BlockBuffer<T>> da_own, dh3_own, a_own;
  T* da = through_h ? da_own.emplace(size).data() : nullptr;
  T* dh1 = da;  // the same buffer
  T* dh3 = through_h ? dh3_own.emplace(size).data() : nullptr;
  T* a = dw2 ? a_own.emplace(size).data() : nullptr;
  blas::Matrix<const T> dys{dy, rows, out}, xs{x, rows, in};
  // da = dy W2
  if (da) product(products, dys, blas::Matrix<const T>{w2, out, hidden}, blas::Matrix<T>{da, rows, hidden});
  parallel_for(size, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      auto [value, slope] = silu(h1[i]);  // silu(h1), silu'(h1)
      if (a) a[i] = value * h3[i];        // a = silu(h1) h3
      if (da) {
        T g = da[i];
        dh3[i] = g * value;          // dh3 = da silu(h1)
        dh1[i] = g * h3[i] * slope;  // dh1 = da h3 silu'(h1)
      }
    }
  });
  // dW2 = dy^T a
  if (dw2) product(products, dys.t(), blas::Matrix<const T>{a, rows, hidden}, blas::Matrix<T>{dw2, out, hidden});
  if (!through_h) return;
  blas::Matrix<const T> dh1s{dh1, rows, hidden}, dh3s{dh3, rows, hidden};
  if (dw1) product(products, dh1s.t(), xs, blas::Matrix<T>{dw1, hidden, in});  // dW1 = dh1^T x
  if (dw3) product(products, dh3s.t(), xs, blas::Matrix<T>{dw3, hidden, in});  // dW3 = dh3^T x
  if (dx) {  // dx = dh1 W1 + dh3 W3, last: x has been read
    blas::Matrix<T> dxs{dx, rows, in};
    product(products, dh1s, blas::Matrix<const T>{w1, hidden, in}, dxs);
    product(products, dh3s, blas::Matrix<const T>{w3, hidden, in}, dxs, /*add=*/true);
  }
}

template void swiglu(const Products&, const SwigluSizes&, const float*, const float*, const float*, const float*,
                     float*, float*, float*);
template void swiglu(const Products&, const SwigluSizes&, const double*, const double*, const double*, const double*,
                     double*, double*, double*);
template void swiglu_backward(const Products&, const SwigluSizes&, const float*, const float*, const float*,
                              const float*, const float*, const float*, const float*, float*, float*, float*, float*);
template void swiglu_backward(const Products&, const SwigluSizes&, const double*, const double*, const double*,
                              const double*, const double*, const double*, const double*, double*, double*, double*,
                              double*);

}  // namespace ag::backends::cpu
