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

// The full [B, H, Tq, Tk] "may attend" mask from the optional user mask and the causal flag,
// or undefined when nothing is masked.
Tensor combined_mask(std::string_view op, const Tensor& attn_mask, bool causal, const Dims& n) {
  Shape full{n.b, n.h, n.tq, n.tk};
  Tensor mask;
  if (attn_mask.defined()) {
    if (attn_mask.dtype() != kBool)
      throw_invalid(op, "attn_mask must be bool (true = may attend), got {} with shape {}",
                    dtype_name(attn_mask.dtype()), shape_str(attn_mask.shape()));
    bool fits = attn_mask.dim() <= 4;
    for (std::int64_t i = 1; fits && i <= attn_mask.dim(); ++i) {
      std::int64_t s = attn_mask.size(-i);
      fits = s == 1 || s == full[static_cast<std::size_t>(4 - i)];
    }
    if (!fits)
      throw_invalid(op, "attn_mask of shape {} does not broadcast to the scores' shape {}",
                    shape_str(attn_mask.shape()), shape_str(full));
    mask = attn_mask;
  }
  if (causal) mask = mask.defined() ? logical_and(mask, causal_mask(n.tq, n.tk)) : causal_mask(n.tq, n.tk);
  if (!mask.defined()) return mask;
  return logical_and(mask, ag::full(full, 1.0, kBool));  // expanded to [B, H, Tq, Tk]
}

double default_scale(std::optional<double> scale, std::int64_t d) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d));
}

int as_int(std::int64_t v) {
  if (v > std::numeric_limits<int>::max())
    throw_invalid("scaled_dot_product_attention", "size {} exceeds what BLAS can index", v);
  return static_cast<int>(v);
}

}  // namespace

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                             bool causal, bool need_weights, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  Dims n = check_qkv(op, q, k, v);
  Tensor mask = combined_mask(op, attn_mask, causal, n);
  double s = default_scale(scale, n.d);
  int tq = as_int(n.tq), tk = as_int(n.tk), d = as_int(n.d), dv = as_int(n.dv);
  std::int64_t pairs = n.b * n.h;

  Tensor out = zeros({n.b, n.h, n.tq, n.dv}, q.dtype());
  Tensor weights = zeros({n.b, n.h, n.tq, n.tk}, q.dtype());  // P, kept for backward
  dispatch_floating(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T *pq = q.data_ptr<T>(), *pk = k.data_ptr<T>(), *pv = v.data_ptr<T>();
    const bool* pm = mask.defined() ? mask.data_ptr<bool>() : nullptr;
    T *pp = weights.data_ptr<T>(), *po = out.data_ptr<T>();
    for (std::int64_t bh = 0; bh < pairs; ++bh) {
      T* P = pp + bh * n.tq * n.tk;
      if (n.tq == 0 || n.tk == 0) continue;
      // S = scale Q K^T, written straight into P's buffer
      if (n.d > 0)
        blas::gemm(false, true, tq, tk, d, pq + bh * n.tq * n.d, d, pk + bh * n.tk * n.d, d, P, T(0),
                   static_cast<T>(s));
      for (std::int64_t i = 0; i < n.tq; ++i) {
        T* row = P + i * n.tk;
        const bool* allowed = pm ? pm + (bh * n.tq + i) * n.tk : nullptr;
        // softmax over the allowed keys of this row; masked ones are -inf, i.e. weight 0
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t j = 0; j < n.tk; ++j)
          if (!allowed || allowed[j]) m = std::max(m, row[j]);
        if (m == -std::numeric_limits<T>::infinity()) {  // every key masked: a zero row
          std::fill(row, row + n.tk, T(0));
          continue;
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j < n.tk; ++j) {
          row[j] = (!allowed || allowed[j]) ? std::exp(row[j] - m) : T(0);
          sum += row[j];
        }
        for (std::int64_t j = 0; j < n.tk; ++j) row[j] = static_cast<T>(row[j] / sum);
      }
      // O = P V
      if (n.dv > 0) blas::gemm(false, false, tq, dv, tk, P, tk, pv + bh * n.tk * n.dv, dv, po + bh * n.tq * n.dv);
    }
  });

  Tensor result = record(op, out, {q, k, v},
                         [q = q.detach(), k = k.detach(), v = v.detach(), P = weights, n, s](
                             const Tensor& dout, const std::vector<bool>& need) {
                           // Only the gradients asked for are allocated; the others stay undefined.
                           Tensor dq = need[0] ? zeros(q.shape(), q.dtype()) : Tensor();
                           Tensor dk = need[1] ? zeros(k.shape(), k.dtype()) : Tensor();
                           Tensor dv = need[2] ? zeros(v.shape(), v.dtype()) : Tensor();
                           int tq = static_cast<int>(n.tq), tk = static_cast<int>(n.tk), d = static_cast<int>(n.d),
                               dvn = static_cast<int>(n.dv);
                           dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&](auto tag) {
                             using T = decltype(tag);
                             const T *pq = q.data_ptr<T>(), *pk = k.data_ptr<T>(), *pv = v.data_ptr<T>(),
                                     *pp = P.data_ptr<T>(), *pdo = dout.data_ptr<T>();
                             T* pdq = need[0] ? dq.data_ptr<T>() : nullptr;
                             T* pdk = need[1] ? dk.data_ptr<T>() : nullptr;
                             T* pdv = need[2] ? dv.data_ptr<T>() : nullptr;
                             std::vector<T> dS(static_cast<std::size_t>(n.tq * n.tk));  // one [Tq, Tk] scratch, reused
                             if (n.tq == 0 || n.tk == 0) return;
                             for (std::int64_t bh = 0; bh < n.b * n.h; ++bh) {
                               const T* Pm = pp + bh * n.tq * n.tk;
                               const T* dO = pdo + bh * n.tq * n.dv;
                               // dV = P^T dO
                               if (need[2] && n.dv > 0)
                                 blas::gemm(true, false, tk, dvn, tq, Pm, tk, dO, dvn, pdv + bh * n.tk * n.dv);
                               if (!need[0] && !need[1]) continue;
                               // dP = dO V^T, into the scratch
                               if (n.dv > 0)
                                 blas::gemm(false, true, tq, tk, dvn, dO, dvn, pv + bh * n.tk * n.dv, dvn, dS.data());
                               else
                                 std::fill(dS.begin(), dS.end(), T(0));
                               // dS = P * (dP - rowsum(dP * P)), row by row
                               for (std::int64_t i = 0; i < n.tq; ++i) {
                                 T* row = dS.data() + i * n.tk;
                                 const T* prow = Pm + i * n.tk;
                                 double dot = 0.0;
                                 for (std::int64_t j = 0; j < n.tk; ++j) dot += static_cast<double>(row[j]) * prow[j];
                                 for (std::int64_t j = 0; j < n.tk; ++j)
                                   row[j] = prow[j] * (row[j] - static_cast<T>(dot));
                               }
                               if (n.d == 0) continue;
                               // dQ = scale dS K,   dK = scale dS^T Q
                               if (need[0])
                                 blas::gemm(false, false, tq, d, tk, dS.data(), tk, pk + bh * n.tk * n.d, d,
                                            pdq + bh * n.tq * n.d, T(0), static_cast<T>(s));
                               if (need[1])
                                 blas::gemm(true, false, tk, d, tq, dS.data(), tk, pq + bh * n.tq * n.d, d,
                                            pdk + bh * n.tk * n.d, T(0), static_cast<T>(s));
                             }
                           });
                           return std::vector<Tensor>{dq, dk, dv};
                         });
  // A copy: the caller may write into it without corrupting what backward reads.
  return {result, need_weights ? weights.detach().clone() : Tensor()};
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
