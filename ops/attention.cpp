// Scaled dot-product attention, for one (batch, head) pair at a time:
//
//   S = scale Q K^T          [Tq, Tk]   how well each query matches each key
//   S_ij = -inf where masked
//   P = softmax_rows(S)      [Tq, Tk]   the attention weights; each row sums to 1 (or is 0)
//   O = P V                  [Tq, dv]   each output row a weighted average of value rows
//
// Backward, from dO (docs/attention.md derives each line):
//
//   dV = P^T dO                          (O = P V, the matmul rule)
//   dP = dO V^T
//   dS_ij = P_ij (dP_ij - sum_k dP_ik P_ik)   (softmax's Jacobian-vector product, per row)
//   dQ = scale dS K,   dK = scale dS^T Q      (S = scale Q K^T, the matmul rule again)
//
// Masked positions have P = 0, so dS = 0 there: no gradient flows through a masked score.
#include "attention.h"

#include <cmath>
#include <limits>

#include "../autograd/dispatch.h"
#include "../autograd/node.h"
#include "binary.h"
#include "blas.h"
#include "masking.h"
#include "matmul.h"
#include "softmax.h"

namespace ag {

namespace {

struct Dims {
  std::int64_t b, h, tq, tk, d, dv;
};

Dims check_qkv(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_floating(op, q);
  check_same_floating(op, q, k);
  check_same_floating(op, q, v);
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    throw_invalid(op, "q, k and v must be [B, H, T, d], got shapes {}, {} and {}", shape_str(q.shape()),
                  shape_str(k.shape()), shape_str(v.shape()));
  Dims n{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  if (k.size(0) != n.b || v.size(0) != n.b || k.size(1) != n.h || v.size(1) != n.h)
    throw_invalid(op, "q, k and v must agree in batch and heads, got shapes {}, {} and {}", shape_str(q.shape()),
                  shape_str(k.shape()), shape_str(v.shape()));
  if (k.size(3) != n.d)
    throw_invalid(op, "query and key dims differ: q {} and k {} (the scores q k^T need the same d)",
                  shape_str(q.shape()), shape_str(k.shape()));
  if (n.d == 0)
    throw_invalid(op, "q and k have head dim 0 (shapes {} and {})", shape_str(q.shape()), shape_str(k.shape()));
  if (v.size(2) != n.tk)
    throw_invalid(op, "key length {} and value length {} differ: k {} and v {}", n.tk, v.size(2), shape_str(k.shape()),
                  shape_str(v.shape()));
  return n;
}

// Throws unless attn_mask is bool and broadcasts to the scores' shape [B, H, Tq, Tk].
void check_mask(std::string_view op, const Tensor& attn_mask, const Dims& n) {
  Shape full{n.b, n.h, n.tq, n.tk};
  if (attn_mask.dtype() != kBool)
    throw_invalid(op, "attn_mask must be bool (true = may attend), got {} with shape {}", dtype_name(attn_mask.dtype()),
                  shape_str(attn_mask.shape()));
  bool fits = attn_mask.dim() <= 4;
  for (std::int64_t i = 1; fits && i <= attn_mask.dim(); ++i) {
    std::int64_t s = attn_mask.size(-i);
    fits = s == 1 || s == full[static_cast<std::size_t>(4 - i)];
  }
  if (!fits)
    throw_invalid(op, "attn_mask of shape {} does not broadcast to the scores' shape {}", shape_str(attn_mask.shape()),
                  shape_str(full));
}

// The full [B, H, Tq, Tk] "may attend" mask from the optional user mask and the causal flag,
// or undefined when nothing is masked (for the composed reference).
Tensor combined_mask(std::string_view op, const Tensor& attn_mask, bool causal, const Dims& n) {
  Tensor mask;
  if (attn_mask.defined()) {
    check_mask(op, attn_mask, n);
    mask = attn_mask;
  }
  if (causal) mask = mask.defined() ? logical_and(mask, causal_mask(n.tq, n.tk)) : causal_mask(n.tq, n.tk);
  if (!mask.defined()) return mask;
  return logical_and(mask, ag::full({n.b, n.h, n.tq, n.tk}, 1.0, kBool));  // expanded to [B, H, Tq, Tk]
}

double default_scale(std::optional<double> scale, std::int64_t d) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d));
}

int as_int(std::int64_t v) {
  if (v > std::numeric_limits<int>::max())
    throw_invalid("scaled_dot_product_attention", "size {} exceeds what BLAS can index", v);
  return static_cast<int>(v);
}

// Where the matrix of one (batch, head) pair lives inside a 4-d tensor: rows `ld` elements
// apart, starting at b * batch + h * head. [B, H, T, d] and [B, T, H, d] differ only in these
// numbers, so the kernels below serve both layouts without copying.
struct View {
  std::int64_t batch, head, ld;
  std::int64_t at(std::int64_t b, std::int64_t h) const { return b * batch + h * head; }
};

View heads_first(std::int64_t h, std::int64_t t, std::int64_t d) { return {h * t * d, t * d, d}; }  // [B, H, T, d]
View heads_last(std::int64_t h, std::int64_t t, std::int64_t d) { return {t * h * d, d, h * d}; }   // [B, T, H, d]

struct Layouts {
  View q, k, v, out;
};

// "May query i attend to key j?" without building a [B, H, Tq, Tk] mask: the user's mask is
// read through broadcast strides and the causal rule is checked on the spot.
struct MaskReader {
  const bool* mask = nullptr;
  std::int64_t sb = 0, sh = 0, si = 0, sj = 0;  // strides of the mask as [B, H, Tq, Tk], 0 = broadcast
  bool causal = false;
  std::int64_t shift = 0;  // Tk - Tq: the causal diagonal runs through the last query and key

  bool allowed(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    if (causal && j > i + shift) return false;
    return !mask || mask[b * sb + h * sh + i * si + j * sj];
  }
};

MaskReader mask_reader(std::string_view op, const Tensor& attn_mask, bool causal, const Dims& n) {
  MaskReader r;
  r.causal = causal;
  r.shift = n.tk - n.tq;
  if (!attn_mask.defined()) return r;
  check_mask(op, attn_mask, n);
  Shape s = attn_mask.shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  std::int64_t stride = 1, strides[4];
  for (int d = 3; d >= 0; --d) {
    strides[d] = s[static_cast<std::size_t>(d)] == 1 ? 0 : stride;
    stride *= s[static_cast<std::size_t>(d)];
  }
  r.mask = attn_mask.data_ptr<bool>();
  r.sb = strides[0], r.sh = strides[1], r.si = strides[2], r.sj = strides[3];
  return r;
}

// Forward for every (batch, head): S = scale Q K^T into P, masked row softmax of P, O = P V.
template <class T>
void attention_forward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                       const T* v, T* P, T* out) {
  int tq = static_cast<int>(n.tq), tk = static_cast<int>(n.tk), d = static_cast<int>(n.d), dv = static_cast<int>(n.dv);
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t h = 0; h < n.h; ++h) {
      T* p = P + (b * n.h + h) * n.tq * n.tk;
      blas::gemm(false, true, tq, tk, d, static_cast<T>(scale), q + L.q.at(b, h), static_cast<int>(L.q.ld),
                 k + L.k.at(b, h), static_cast<int>(L.k.ld), T(0), p, tk);
      for (std::int64_t i = 0; i < n.tq; ++i) {
        T* row = p + i * n.tk;
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t j = 0; j < n.tk; ++j)
          if (mask.allowed(b, h, i, j)) m = std::max(m, row[j]);
        if (m == -std::numeric_limits<T>::infinity()) {  // every key masked: a zero row
          std::fill(row, row + n.tk, T(0));
          continue;
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j < n.tk; ++j) {
          row[j] = mask.allowed(b, h, i, j) ? std::exp(row[j] - m) : T(0);
          sum += row[j];
        }
        T inv = static_cast<T>(1.0 / sum);
        for (std::int64_t j = 0; j < n.tk; ++j) row[j] *= inv;
      }
      if (dv > 0)
        blas::gemm(false, false, tq, dv, tk, T(1), p, tk, v + L.v.at(b, h), static_cast<int>(L.v.ld), T(0),
                   out + L.out.at(b, h), static_cast<int>(L.out.ld));
    }
}

// Backward for every (batch, head), from dO; dq, dk, dv may be null when not needed. They are
// laid out like q, k, v.
template <class T>
void attention_backward(const Dims& n, const Layouts& L, double scale, const T* q, const T* k, const T* v, const T* P,
                        const T* dout, T* dq, T* dk, T* dv) {
  int tq = static_cast<int>(n.tq), tk = static_cast<int>(n.tk), d = static_cast<int>(n.d), dvn = static_cast<int>(n.dv);
  std::vector<T> dS(static_cast<std::size_t>(n.tq * n.tk));  // one [Tq, Tk] scratch, reused
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t h = 0; h < n.h; ++h) {
      const T* p = P + (b * n.h + h) * n.tq * n.tk;
      const T* dO = dout + L.out.at(b, h);
      int ldo = static_cast<int>(L.out.ld);
      // dV = P^T dO
      if (dv && dvn > 0)
        blas::gemm(true, false, tk, dvn, tq, T(1), p, tk, dO, ldo, T(0), dv + L.v.at(b, h), static_cast<int>(L.v.ld));
      if (!dq && !dk) continue;
      // dP = dO V^T, into the scratch
      if (dvn > 0)
        blas::gemm(false, true, tq, tk, dvn, T(1), dO, ldo, v + L.v.at(b, h), static_cast<int>(L.v.ld), T(0), dS.data(),
                   tk);
      else
        std::fill(dS.begin(), dS.end(), T(0));
      // dS = P * (dP - rowsum(dP * P)), row by row
      for (std::int64_t i = 0; i < n.tq; ++i) {
        T* row = dS.data() + i * n.tk;
        const T* prow = p + i * n.tk;
        double dot = 0.0;
        for (std::int64_t j = 0; j < n.tk; ++j) dot += static_cast<double>(row[j]) * prow[j];
        for (std::int64_t j = 0; j < n.tk; ++j) row[j] = prow[j] * (row[j] - static_cast<T>(dot));
      }
      // dQ = scale dS K,   dK = scale dS^T Q
      if (dq)
        blas::gemm(false, false, tq, d, tk, static_cast<T>(scale), dS.data(), tk, k + L.k.at(b, h),
                   static_cast<int>(L.k.ld), T(0), dq + L.q.at(b, h), static_cast<int>(L.q.ld));
      if (dk)
        blas::gemm(true, false, tk, d, tq, static_cast<T>(scale), dS.data(), tk, q + L.q.at(b, h),
                   static_cast<int>(L.q.ld), T(0), dk + L.k.at(b, h), static_cast<int>(L.k.ld));
    }
}

// The fused op for either layout: the tensors are [B, H, T, d] or, with `heads_are_last`,
// [B, T, H, d]; `n` has been checked.
AttentionResult fused_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Dims& n,
                                bool heads_are_last, const Tensor& attn_mask, bool causal, bool need_weights,
                                std::optional<double> scale) {
  MaskReader mask = mask_reader(op, attn_mask, causal, n);
  double s = default_scale(scale, n.d);
  for (std::int64_t size : {n.tq, n.tk, n.d, n.dv}) as_int(size);  // BLAS indexes with int
  auto view = heads_are_last ? heads_last : heads_first;
  Layouts L{view(n.h, n.tq, n.d), view(n.h, n.tk, n.d), view(n.h, n.tk, n.dv), view(n.h, n.tq, n.dv)};
  Shape out_shape = heads_are_last ? Shape{n.b, n.tq, n.h, n.dv} : Shape{n.b, n.h, n.tq, n.dv};
  Tensor out = zeros(out_shape, q.dtype());
  Tensor weights = zeros({n.b, n.h, n.tq, n.tk}, q.dtype());  // P, kept for backward
  if (n.tq > 0 && n.tk > 0)
    dispatch_floating(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      attention_forward<T>(n, L, mask, s, q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), weights.data_ptr<T>(),
                           out.data_ptr<T>());
    });
  // Saved for backward: q, k, v (shared with the caller) and P.
  Tensor result =
      record(op, out, {q, k, v},
             [q = q.detach(), k = k.detach(), v = v.detach(), P = weights, n, L, s, op](const Tensor& dout,
                                                                                        const std::vector<bool>& need) {
               // Only the gradients asked for are allocated; the others stay undefined.
               // The kernel writes every element (GEMMs with beta 0) unless a size is 0.
               bool writes_all = n.tq > 0 && n.tk > 0 && n.dv > 0;
               auto buffer = [&](bool needed, const Tensor& like) {
                 if (!needed) return Tensor();
                 return writes_all ? empty(like.shape(), like.dtype()) : zeros(like.shape(), like.dtype());
               };
               Tensor dq = buffer(need[0], q), dk = buffer(need[1], k), dv = buffer(need[2], v);
               if (n.tq > 0 && n.tk > 0)
                 dispatch_floating(q.dtype(), op, [&](auto tag) {
                   using T = decltype(tag);
                   attention_backward<T>(n, L, s, q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), P.data_ptr<T>(),
                                         dout.data_ptr<T>(), need[0] ? dq.data_ptr<T>() : nullptr,
                                         need[1] ? dk.data_ptr<T>() : nullptr, need[2] ? dv.data_ptr<T>() : nullptr);
                 });
               return std::vector<Tensor>{dq, dk, dv};
             });
  // A copy: the caller may write into it without corrupting what backward reads.
  return {result, need_weights ? weights.detach().clone() : Tensor()};
}

}  // namespace

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                             bool causal, bool need_weights, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  return fused_attention(op, q, k, v, check_qkv(op, q, k, v), false, attn_mask, causal, need_weights, scale);
}

AttentionResult scaled_dot_product_attention_bthd(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& attn_mask, bool causal, bool need_weights,
                                                  std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_bthd";
  // Checked as [B, H, T, d] views of the same numbers: swap dims 1 and 2 in the shapes only.
  auto swapped = [](const Tensor& t) {
    if (!t.defined() || t.dim() != 4) return Shape{};
    return Shape{t.size(0), t.size(2), t.size(1), t.size(3)};
  };
  Tensor vq = q.defined() && q.dim() == 4 ? q.detach().reshape(swapped(q)) : q;
  Tensor vk = k.defined() && k.dim() == 4 ? k.detach().reshape(swapped(k)) : k;
  Tensor vv = v.defined() && v.dim() == 4 ? v.detach().reshape(swapped(v)) : v;
  return fused_attention(op, q, k, v, check_qkv(op, vq, vk, vv), true, attn_mask, causal, need_weights, scale);
}

AttentionResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool causal, std::optional<double> scale) {
  const char* op = "attention_reference";
  Dims n = check_qkv(op, q, k, v);
  Tensor mask = combined_mask(op, attn_mask, causal, n);
  Tensor scores = q.matmul(k.transpose(-2, -1)) * default_scale(scale, n.d);  // [B, H, Tq, Tk]
  if (mask.defined()) scores = masked_fill(scores, logical_not(mask), -std::numeric_limits<double>::infinity());
  Tensor weights = softmax(scores, -1);  // a fully masked row gives zeros (ops/softmax.h)
  return {weights.matmul(v), weights};
}

}  // namespace ag
