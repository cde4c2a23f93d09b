// C = A B, for each matrix in a (broadcast) batch.
//
//   A: [..., M, K]   B: [..., K, N]   C, dC: [..., M, N]
//
//   dA = dC B^T      (dC_mn depends on A_mk with weight B_kn: dA_mk = sum_n dC_mn B_kn)
//   dB = A^T dC      (likewise dB_kn = sum_m A_mk dC_mn)
//
// then summed over batch dims that broadcasting stretched (docs/autograd.md). Each product is
// the backend's matmul kernel (kernels/table.h), told how each operand is stored, so B^T and A^T
// are read in place and never copied: one BLAS call on the fast backend (CblasTrans), three loops
// on the naive one. The products run under the policy the router hands them (ops/route.h): under
// autocast they take bf16 inputs and add in float32, each operand rounded once, whole.
#include "matmul.h"

#include "../autograd/dispatch.h"
#include "../kernels/table.h"
#include "autocast_internal.h"
#include "binary.h"
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
// and [rb, cb] per entry), each by the backend's matmul kernel.
template <class T>
void batch_products(const Products& products, const backends::Table<T>& kernels, const T* pa, std::int64_t ra,
                    std::int64_t ca, bool trans_a, const Shape& batch_a, const T* pb, std::int64_t rb, std::int64_t cb,
                    bool trans_b, const Shape& batch_b, const Shape& batch, T* pc, std::int64_t m, std::int64_t n) {
  std::int64_t batch_count = shape_numel(batch);
  std::int64_t k = trans_a ? ra : ca;
  // B is one matrix shared by the whole batch and A is not transposed: A's rows stack into one
  // tall matrix [batch * M, K], and one product does it all (the Linear-layer case).
  if (batch_b.empty() && !trans_a) {
    kernels.matmul(products, {batch_count * m, n, k, false, trans_b}, pa, pb, pc);
    return;
  }
  // Otherwise one product per batch entry; a broadcast operand is re-read through its offset.
  for (std::int64_t i = 0; i < batch_count; ++i) {
    std::int64_t oa = broadcast_entry(i, batch, batch_a) * ra * ca;
    std::int64_t ob = broadcast_entry(i, batch, batch_b) * rb * cb;
    kernels.matmul(products, {m, n, k, trans_a, trans_b}, pa + oa, pb + ob, pc + i * m * n);
  }
}

// op(a) @ op(b) over broadcast batch dims, where op transposes the last two dims when asked.
// Under bf16 products each operand is rounded once, whole (or its kept copy read), and every
// product reads the rounded copies.
Tensor batched_gemm(Products products, const backends::Backend& backend, const Tensor& a, bool trans_a, const Tensor& b,
                    bool trans_b) {
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
  detail::keep_rounded(products, a);
  detail::keep_rounded(products, b);
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    batch_products<T>(products, backend.table<T>(), a.data_ptr<T>(), ra, ca, trans_a, batch_of(sa), b.data_ptr<T>(), rb,
                      cb, trans_b, batch_of(sb), batch, c.mutable_data_ptr<T>(), m, n);
  });
  return c;
}

// The gradients of C = op_a(A) op_b(B), where op_a transposes A's last two dims when ta is set
// (op_b likewise), by `product(x, tx, y, ty)` = op(x) op(y): a BLAS call outside the graph (the
// fast backward) or matmul_transposed (the composed one, which can be differentiated again).
//
//   d op_a(A) = dC op_b(B)^T        d op_b(B) = op_a(A)^T dC
//
// and so, for A and B as stored, with no transpose ever copied:
//
//   dA = dC op_b(B)^T = product(dC, no, B, !tb)      when A is read as is
//   dA = op_b(B) dC^T = product(B, tb, dC, yes)      when A is read transposed
//   dB = op_a(A)^T dC = product(A, !ta, dC, no)      when B is read as is
//   dB = dC^T op_a(A) = product(dC, yes, A, ta)      when B is read transposed
//
// each summed over the batch dims its operand was broadcast along. When B is one 2-D matrix
// shared by a batch of A's read as is, the batch sum is a single product over the stacked rows:
// A_flat [batch*M, K] and dC_flat [batch*M, N] (the same elements in the same order, so a kept
// bf16 copy of A reads as A_flat too).
template <class Product>
std::vector<Tensor> product_backward(Product&& product, const Tensor& dc, const Tensor& a, bool ta, const Tensor& b,
                                     bool tb, const std::vector<bool>& need) {
  Tensor da, db;
  if (need[0]) da = sum_to(ta ? product(b, tb, dc, true) : product(dc, false, b, !tb), a.shape());
  if (need[1]) {
    Tensor x = a, g = dc;
    if (b.dim() == 2 && !ta) {
      std::int64_t rows = shape_numel(Shape(a.shape().begin(), a.shape().end() - 1));  // batch * M
      x = a.reshape({rows, a.shape().back()});
      g = dc.reshape({rows, dc.shape().back()});
    }
    db = sum_to(tb ? product(g, true, x, ta) : product(x, !ta, g, false), b.shape());
  }
  return {da, db};
}

Shape operand_shape(const Tensor& t, bool transposed) {
  Shape s = t.shape();
  if (transposed) std::swap(s[s.size() - 2], s[s.size() - 1]);
  return s;
}

// op_a(a) @ op_b(b), routed: one kernel (batched_gemm), its fast backward, the same formula
// composed of matmul_transposed under create_graph, and the tangent rule.
Tensor product(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  // A parameter's bf16 copy is kept for backward, which may run after autocast has ended: one
  // rounding per parameter per step; an activation is rounded again there.
  RoutedOp op{.name = "matmul", .family = profile::Family::Products, .bf16_products = true, .inputs = {a, b}};
  // The backend's matmul kernel, under the product policy (BLAS, or bf16 under autocast, on the
  // fast backend; three loops on the naive one).
  op.fast = [&](Products products, const backends::Backend& backend) {
    detail::keep_rounded(products, a);
    detail::keep_rounded(products, b);
    Tensor c = batched_gemm(products, backend, a, ta, b, tb);
    auto backward = [products = products.parameters_only(), backend = &backend, a, ta, b, tb](
                        const Tensor& dc, const std::vector<bool>& need) {
      auto gemm = [&](const Tensor& x, bool tx, const Tensor& y, bool ty) {
        return batched_gemm(products, *backend, x, tx, y, ty);
      };
      return product_backward(gemm, dc, a, ta, b, tb, need);
    };
    return FastRun{c, backward, Saved{a, b}};
  };
  op.composed = [ta, tb](const std::vector<Tensor>& in, const Tensor& dc, const std::vector<bool>& need) {
    return product_backward(matmul_transposed, dc, in[0], ta, in[1], tb, need);
  };
  // C = op(A) op(B):  Ċ = op(Ȧ) op(B) + op(A) op(Ḃ)
  op.tangent = [ta, tb](const std::vector<Tensor>& in, const std::vector<Tensor>& t) {
    if (!t[1].defined()) return matmul_transposed(t[0], ta, in[1], tb);
    if (!t[0].defined()) return matmul_transposed(in[0], ta, t[1], tb);
    return matmul_transposed(t[0], ta, in[1], tb) + matmul_transposed(in[0], ta, t[1], tb);
  };
  return route(op).output;
}

void check_product(const char* op, const Tensor& a, bool ta, const Tensor& b, bool tb) {
  check_same_floating(op, a, b);
  if (a.dim() < 2 || b.dim() < 2)
    throw_invalid(op, "shapes {} and {}: both need at least 2 dims (unsqueeze a vector first)", shape_str(a.shape()),
                  shape_str(b.shape()));
  Shape sa = operand_shape(a, ta), sb = operand_shape(b, tb);
  auto read = [](const Tensor& t, bool transposed) {
    return transposed ? shape_str(t.shape()) + " read transposed" : shape_str(t.shape());
  };
  if (sa.back() != sb[sb.size() - 2])
    throw_invalid(op, "shapes {} and {}: inner dimensions {} and {} differ", read(a, ta), read(b, tb), sa.back(),
                  sb[sb.size() - 2]);
  try {
    broadcast_shapes(op, batch_of(sa), batch_of(sb));
  } catch (const std::invalid_argument&) {
    throw_invalid(op, "shapes {} and {}: batch dims {} and {} cannot be broadcast", shape_str(a.shape()),
                  shape_str(b.shape()), shape_str(batch_of(sa)), shape_str(batch_of(sb)));
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_product("matmul", a, false, b, false);
  return product(a, false, b, false);
}

Tensor matmul_transposed(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b) {
  check_product("matmul_transposed", a, transpose_a, b, transpose_b);
  return product(a, transpose_a, b, transpose_b);
}

Tensor Tensor::matmul(const Tensor& other) const { return ag::matmul(*this, other); }

}  // namespace ag
