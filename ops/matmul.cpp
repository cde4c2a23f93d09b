// C = A B, for each matrix in a (broadcast) batch.
//
//   A: [..., M, K]   B: [..., K, N]   C, dC: [..., M, N]
//
//   dA = dC B^T      (dC_mn depends on A_mk with weight B_kn: dA_mk = sum_n dC_mn B_kn)
//   dB = A^T dC      (likewise dB_kn = sum_m A_mk dC_mn)
//
// then summed over batch dims that broadcasting stretched (docs/autograd.md). BLAS reads a
// matrix transposed for free when told to (CblasTrans), so B^T and A^T are never copied. Under
// autocast (ops/autocast.h) the same products take bf16 inputs and add in float32.
#include "matmul.h"

#include "../autograd/dispatch.h"
#include "../autograd/node.h"
#include "binary.h"
#include "autocast.h"
#include "bf16.h"
#include "blas.h"
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
// and [rb, cb] per entry) holding elements E, C of T; `gemm` is blas::gemm or bf16::gemm.
template <class E, class T, class Gemm>
void batch_products(const E* pa, std::int64_t ra, std::int64_t ca, bool trans_a, const Shape& batch_a, const E* pb,
                    std::int64_t rb, std::int64_t cb, bool trans_b, const Shape& batch_b, const Shape& batch, T* pc,
                    std::int64_t m, std::int64_t n, Gemm gemm) {
  std::int64_t batch_count = shape_numel(batch);
  auto view_a = [&](std::int64_t offset, std::int64_t rows) {
    blas::Matrix<const E> v{pa + offset, rows, ca};
    return trans_a ? v.t() : v;
  };
  auto view_b = [&](std::int64_t offset) {
    blas::Matrix<const E> v{pb + offset, rb, cb};
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
// With `in_bf16` (autocast, float32 only) each operand is rounded to bf16 once, whole, and every
// product reads the rounded copies, accumulating in float32; `a16`/`b16`, when given, are those
// copies already made.
Tensor batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, bool in_bf16 = false,
                    std::shared_ptr<const bf16::Buffer> a16 = nullptr, std::shared_ptr<const bf16::Buffer> b16 = nullptr) {
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

  if (in_bf16 && a.dtype() == kFloat32) {
    if (!a16) a16 = detail::bf16_copy(a);
    if (!b16) b16 = detail::bf16_copy(b);
    batch_products(a16->data.get(), ra, ca, trans_a, batch_of(sa), b16->data.get(), rb, cb, trans_b, batch_of(sb),
                   batch, c.data_ptr<float>(), m, n,
                   [](const auto& x, const auto& y, const auto& z) { bf16::gemm(x, y, z); });
    return c;
  }
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    batch_products(a.data_ptr<T>(), ra, ca, trans_a, batch_of(sa), b.data_ptr<T>(), rb, cb, trans_b, batch_of(sb),
                   batch, c.data_ptr<T>(), m, n, [](const auto& x, const auto& y, const auto& z) { blas::gemm(x, y, z); });
  });
  return c;
}

// dA = dC B^T and dB = A^T dC, each summed over the batch dims its operand was broadcast along.
// Under autocast, a16/b16 are the operands' bf16 copies kept from the forward (parameters only).
std::vector<Tensor> matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, const std::vector<bool>& need,
                                   bool in_bf16, const std::shared_ptr<const bf16::Buffer>& a16,
                                   const std::shared_ptr<const bf16::Buffer>& b16) {
  Tensor da, db;
  if (need[0]) da = sum_to(batched_gemm(dc, false, b, true, in_bf16, nullptr, b16), a.shape());
  // When B is one [K, N] matrix shared by a batch of A's, the batch sum is a single GEMM over
  // the stacked rows: dB = A_flat^T dC_flat with A_flat [batch*M, K].
  if (need[1] && b.dim() == 2) {
    std::int64_t rows = shape_numel(Shape(a.shape().begin(), a.shape().end() - 1));  // batch * M
    db = batched_gemm(a.reshape({rows, a.shape().back()}), true, dc.reshape({rows, b.shape().back()}), false, in_bf16,
                      a16);  // the same elements in the same order: a16 reads as A_flat too
  } else if (need[1]) {
    db = sum_to(batched_gemm(a, true, dc, false, in_bf16, a16), b.shape());
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
  bool in_bf16 = detail::autocasts(a);  // autocast.h: bf16 products, in backward too
  // A parameter's bf16 copy is kept for backward, which may run after the guard has ended and
  // its cache is gone: one rounding per parameter per step. An activation is rounded again there.
  std::shared_ptr<const bf16::Buffer> a16, b16;
  if (in_bf16) {
    a16 = detail::bf16_copy(a);
    b16 = detail::bf16_copy(b);
  }
  Tensor c = batched_gemm(a, false, b, false, in_bf16, a16, b16);
  if (!detail::is_parameter(a)) a16.reset();
  if (!detail::is_parameter(b)) b16.reset();
  return record(
      "matmul", c, {a, b},
      // a and b as passed: with create_graph the products are differentiated through them.
      [a, b, in_bf16, a16, b16](const Tensor& dc, const std::vector<bool>& need) {
        if (detail::creating_graph())  // the same two products, as ops
          return std::vector<Tensor>{need[0] ? sum_to(dc.matmul(b.transpose(-2, -1)), a.shape()) : Tensor(),
                                     need[1] ? sum_to(a.transpose(-2, -1).matmul(dc), b.shape()) : Tensor()};
        return matmul_backward(dc, a, b, need, in_bf16, a16, b16);
      },
      Saved{a, b}, BackwardOrder::AnyOrder);
}

Tensor Tensor::matmul(const Tensor& other) const { return ag::matmul(*this, other); }

}  // namespace ag
