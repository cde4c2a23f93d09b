// C = A B, for each matrix in a (broadcast) batch.
//
//   A: [..., M, K]   B: [..., K, N]   C, dC: [..., M, N]
//
//   dA = dC B^T      (dC_mn depends on A_mk with weight B_kn: dA_mk = sum_n dC_mn B_kn)
//   dB = A^T dC      (likewise dB_kn = sum_m A_mk dC_mn)
//
// then summed over batch dims that broadcasting stretched (docs/autograd.md). BLAS reads a
// matrix transposed for free when told to (CblasTrans), so B^T and A^T are never copied. The
// products run under the policy the router hands them (ops/route.h): under autocast they take
// bf16 inputs and add in float32, each operand rounded once, whole.
#include "matmul.h"

#include "../autograd/dispatch.h"
#include "binary.h"
#include "blas.h"
#include "route.h"
#include "shape.h"

namespace ag {

namespace {

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

// Which of an operand's own batch entries (batch dims `own`) entry i of the broadcast batch
// `batch` reads: coordinates along dims where `own` has size 1 (or lacks the dim) are dropped.
std::int64_t broadcast_entry(std::int64_t i, const Shape& batch, const Shape& own) {
  std::int64_t entry = 0, stride = 1;
  for (std::size_t r = 0; r < batch.size(); ++r) {  // r counts dims from the right
    std::int64_t size = batch[batch.size() - 1 - r];
    std::int64_t coord = i % size;
    i /= size;
    if (r >= own.size()) continue;
    std::int64_t own_size = own[own.size() - 1 - r];
    if (own_size != 1) entry += coord * stride;
    stride *= own_size;
  }
  return entry;
}

// Every product of op(A) @ op(B) over the broadcast batch `batch`, A and B as stored ([ra, ca]
// and [rb, cb] per entry).
template <class T>
void batch_products(const Products& products, const T* pa, std::int64_t ra, std::int64_t ca, bool trans_a,
                    const Shape& batch_a, const T* pb, std::int64_t rb, std::int64_t cb, bool trans_b,
                    const Shape& batch_b, const Shape& batch, T* pc, std::int64_t m, std::int64_t n) {
  auto gemm = [&](blas::Matrix<const T> a, blas::Matrix<const T> b, blas::Matrix<T> c) { products.gemm(a, b, c); };
  std::int64_t batch_count = shape_numel(batch);
  auto view_a = [&](std::int64_t offset, std::int64_t rows) {
    blas::Matrix<const T> v{pa + offset, rows, ca};
    return trans_a ? v.t() : v;
  };
  auto view_b = [&](std::int64_t offset) {
    blas::Matrix<const T> v{pb + offset, rb, cb};
    return trans_b ? v.t() : v;
  };
  // B is one matrix shared by the whole batch and A is not transposed: A's rows stack into one
  // tall matrix [batch * M, K], and one GEMM does it all (the Linear-layer case).
  if (batch_b.empty() && !trans_a) {
    gemm(view_a(0, batch_count * m), view_b(0), blas::Matrix<T>{pc, batch_count * m, n});
    return;
  }
  // Otherwise one GEMM per batch entry; a broadcast operand is re-read through its offset.
  for (std::int64_t i = 0; i < batch_count; ++i) {
    std::int64_t oa = broadcast_entry(i, batch, batch_a) * ra * ca;
    std::int64_t ob = broadcast_entry(i, batch, batch_b) * rb * cb;
    gemm(view_a(oa, ra), view_b(ob), blas::Matrix<T>{pc + i * m * n, m, n});
  }
}

// op(a) @ op(b) over broadcast batch dims, where op transposes the last two dims when asked.
// Under bf16 products each operand is rounded once, whole (or its kept copy read), and every
// product reads the rounded copies.
Tensor batched_gemm(Products products, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b) {
  const Shape &sa = a.shape(), &sb = b.shape();
  std::int64_t ra = sa[sa.size() - 2], ca = sa.back(), rb = sb[sb.size() - 2], cb = sb.back();
  std::int64_t m = trans_a ? ca : ra, k = trans_a ? ra : ca, n = trans_b ? rb : cb;
  Shape batch = broadcast_shapes("matmul", batch_of(sa), batch_of(sb));
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor c = detail::empty_for("matmul", out_shape, a.dtype());
  if (c.numel() == 0) return c;
  if (k == 0) return zeros(out_shape, a.dtype());
  products.keep(a).keep(b);
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    batch_products<T>(products, a.data_ptr<T>(), ra, ca, trans_a, batch_of(sa), b.data_ptr<T>(), rb, cb, trans_b,
                      batch_of(sb), batch, c.mutable_data_ptr<T>(), m, n);
  });
  return c;
}

// dA = dC B^T and dB = A^T dC, each summed over the batch dims its operand was broadcast along.
// `products` keeps, under autocast, the bf16 copies of the operands that are parameters.
std::vector<Tensor> matmul_backward(const Products& products, const Tensor& dc, const Tensor& a, const Tensor& b,
                                    const std::vector<bool>& need) {
  Tensor da, db;
  if (need[0]) da = sum_to(batched_gemm(products, dc, false, b, true), a.shape());
  // When B is one [K, N] matrix shared by a batch of A's, the batch sum is a single GEMM over
  // the stacked rows: dB = A_flat^T dC_flat with A_flat [batch*M, K] (the same elements in the
  // same order, so a kept copy of A reads as A_flat too).
  if (need[1] && b.dim() == 2) {
    std::int64_t rows = shape_numel(Shape(a.shape().begin(), a.shape().end() - 1));  // batch * M
    db = batched_gemm(products, a.reshape({rows, a.shape().back()}), true, dc.reshape({rows, b.shape().back()}), false);
  } else if (need[1]) {
    db = sum_to(batched_gemm(products, a, true, dc, false), b.shape());
  }
  return {da, db};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_floating("matmul", a, b);
  if (a.dim() < 2 || b.dim() < 2)
    throw_invalid("matmul", "shapes {} and {}: both need at least 2 dims (unsqueeze a vector first)",
                  shape_str(a.shape()), shape_str(b.shape()));
  if (a.shape().back() != b.shape()[b.shape().size() - 2])
    throw_invalid("matmul", "shapes {} and {}: inner dimensions {} and {} differ", shape_str(a.shape()),
                  shape_str(b.shape()), a.shape().back(), b.shape()[b.shape().size() - 2]);
  try {
    broadcast_shapes("matmul", batch_of(a.shape()), batch_of(b.shape()));
  } catch (const std::invalid_argument&) {
    throw_invalid("matmul", "shapes {} and {}: batch dims {} and {} cannot be broadcast", shape_str(a.shape()),
                  shape_str(b.shape()), shape_str(batch_of(a.shape())), shape_str(batch_of(b.shape())));
  }
  // One kernel, so no reference to switch to; under create_graph its backward is the same two
  // products written as ops. A parameter's bf16 copy is kept for backward, which may run after
  // autocast has ended: one rounding per parameter per step; an activation is rounded again there.
  RoutedOp op{.name = "matmul", .bf16_products = true, .inputs = {a, b}};
  op.fast = [&](Products products) {
    products.keep(a).keep(b);
    Tensor c = batched_gemm(products, a, false, b, false);
    auto backward = [products = products.parameters_only(), a, b](const Tensor& dc, const std::vector<bool>& need) {
      return matmul_backward(products, dc, a, b, need);
    };
    return FastRun{c, backward, Saved{a, b}};
  };
  op.composed = [](const std::vector<Tensor>& in, const Tensor& dc, const std::vector<bool>& need) {
    const Tensor &a = in[0], &b = in[1];
    return std::vector<Tensor>{need[0] ? sum_to(dc.matmul(b.transpose(-2, -1)), a.shape()) : Tensor(),
                               need[1] ? sum_to(a.transpose(-2, -1).matmul(dc), b.shape()) : Tensor()};
  };
  // C = A B:  Ċ = Ȧ B + A Ḃ
  op.tangent = [](const std::vector<Tensor>& in, const std::vector<Tensor>& t) {
    if (!t[1].defined()) return t[0].matmul(in[1]);
    if (!t[0].defined()) return in[0].matmul(t[1]);
    return t[0].matmul(in[1]) + in[0].matmul(t[1]);
  };
  return route(op).output;
}

Tensor Tensor::matmul(const Tensor& other) const { return ag::matmul(*this, other); }

}  // namespace ag
