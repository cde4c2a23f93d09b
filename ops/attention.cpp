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

#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <limits>
#include <vector>

#include "../autograd/dispatch.h"
#include "../autograd/node.h"
#include "binary.h"
#include "blas.h"
#include "fast_math.h"
#include "kernels.h"
#include "masking.h"
#include "matmul.h"
#include "reference/reference.h"
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
  // An empty batch is rejected rather than answered with an empty (or, for Tk = 0, zero) output.
  if (n.b == 0 || n.h == 0 || n.tq == 0 || n.tk == 0)
    throw_invalid(op, "q, k and v need at least one batch entry, head, query and key, got shapes {}, {} and {}",
                  shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
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

double default_scale(std::string_view op, std::optional<double> scale, std::int64_t d) {
  if (scale && !std::isfinite(*scale)) throw_invalid(op, "scale must be finite, got {}", *scale);  // else NaN weights
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

// Queries are processed in blocks of this many rows. A block's scores are one [rows, Tk] tile,
// so neither pass holds more than a tile per (batch, head) at a time, and under a causal mask a
// block stops at the last key its last query may see: the masked upper triangle is never
// multiplied, only the diagonal blocks' corners.
constexpr std::int64_t kQueryBlock = 64;

// One past the last key any query in rows [.., i_end) may attend to.
std::int64_t key_end(const MaskReader& mask, std::int64_t i_end, std::int64_t tk) {
  return mask.causal ? std::clamp<std::int64_t>(i_end + mask.shift, 0, tk) : tk;
}

// Zeroes `rows` rows of `cols` elements, `ld` apart.
template <class T>
void zero_rows(T* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  for (std::int64_t r = 0; r < rows; ++r) std::fill(x + r * ld, x + r * ld + cols, T(0));
}

// Keys a row may see under the causal rule alone: [0, row_end(i)).
std::int64_t row_end(const MaskReader& mask, std::int64_t i, std::int64_t kend) {
  return mask.causal ? std::clamp<std::int64_t>(i + mask.shift + 1, 0, kend) : kend;
}

// The attention weights of one block of queries, in place: `tile` holds the scaled scores
// S[i0 .. i0 + rows, 0 .. kend) and leaves as P. Each row's log-sum-exp, m + log(sum exp(S - m)),
// goes to lse (minus infinity for a row with every key masked, whose weights are all zero).
// Without a user mask, a row's allowed keys are a prefix, and its exponentials run as one SIMD
// loop (fast_math.h).
template <class T>
void block_softmax(const MaskReader& mask, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t rows,
                   std::int64_t kend, T* tile, T* lse) {
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t i = i0 + r, jend = row_end(mask, i, kend);
    T* row = tile + r * kend;
    T m = kMinusInf;
    if (mask.mask) {
      for (std::int64_t j = 0; j < jend; ++j)
        if (mask.allowed(b, h, i, j)) m = std::max(m, row[j]);
    } else {
      m = fast::lane_max(row, jend, kMinusInf);
    }
    if (m == kMinusInf) {
      std::fill(row, row + kend, T(0));
      lse[i] = m;
      continue;
    }
    if (mask.mask) {
      for (std::int64_t j = 0; j < jend; ++j) row[j] = mask.allowed(b, h, i, j) ? fast::exp(row[j] - m) : T(0);
    } else {
      fast::exp_shifted(row, jend, m);
    }
    std::fill(row + jend, row + kend, T(0));
    double sum = fast::lane_sum(jend, [&](std::int64_t j) { return row[j]; });
    T inv = static_cast<T>(1.0 / sum);
    for (std::int64_t j = 0; j < jend; ++j) row[j] *= inv;
    lse[i] = static_cast<T>(m + std::log(sum));
  }
}

// The same weights again in backward, from the saved log-sum-exp: P = exp(S - lse). Exact
// recomputation costs one GEMM per block and saves keeping [B, H, Tq, Tk] weights alive
// between the passes.
template <class T>
void block_recompute(const MaskReader& mask, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t rows,
                     std::int64_t kend, T* tile, const T* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t i = i0 + r, jend = row_end(mask, i, kend);
    T* row = tile + r * kend;
    T l = lse[i];
    if (l == -std::numeric_limits<T>::infinity()) jend = 0;  // every key masked: all zero
    if (mask.mask) {
      for (std::int64_t j = 0; j < jend; ++j) row[j] = mask.allowed(b, h, i, j) ? fast::exp(row[j] - l) : T(0);
    } else {
      fast::exp_shifted(row, jend, l);
    }
    std::fill(row + jend, row + kend, T(0));
  }
}

// Forward for every (batch, head), block by block: S = scale Q K^T into the tile, masked row
// softmax, O = P V. lse is [B, H, Tq]; `weights`, when not null, receives P as [B, H, Tq, Tk]
// (zero-initialised by the caller), for callers that asked to see it.
template <class T>
void attention_forward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                       const T* v, T* lse, T* weights, T* out) {
  // (batch, head) pairs are independent: each thread takes a run of them with its own tile.
  parallel_for(n.b * n.h, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> tile(static_cast<std::size_t>(std::min(n.tq, kQueryBlock) * n.tk));
    for (std::int64_t bh = first; bh < last; ++bh) {
      std::int64_t b = bh / n.h, h = bh % n.h;
      T* lse_bh = lse + (b * n.h + h) * n.tq;
      for (std::int64_t i0 = 0; i0 < n.tq; i0 += kQueryBlock) {
        std::int64_t rows = std::min(kQueryBlock, n.tq - i0), kend = key_end(mask, i0 + rows, n.tk);
        T* o = out + L.out.at(b, h) + i0 * L.out.ld;
        if (kend == 0) {  // causal with Tq > Tk: these queries see no key at all
          std::fill(lse_bh + i0, lse_bh + i0 + rows, -std::numeric_limits<T>::infinity());
          zero_rows(o, rows, n.dv, L.out.ld);
          continue;
        }
        blas::gemm(false, true, as_int(rows), as_int(kend), as_int(n.d), static_cast<T>(scale),
                   q + L.q.at(b, h) + i0 * L.q.ld, as_int(L.q.ld), k + L.k.at(b, h), as_int(L.k.ld), T(0), tile.data(),
                   as_int(kend));
        block_softmax(mask, b, h, i0, rows, kend, tile.data(), lse_bh);
        if (weights)
          for (std::int64_t r = 0; r < rows; ++r)
            std::copy_n(tile.data() + r * kend, kend, weights + ((b * n.h + h) * n.tq + i0 + r) * n.tk);
        if (n.dv > 0)
          blas::gemm(false, false, as_int(rows), as_int(n.dv), as_int(kend), T(1), tile.data(), as_int(kend),
                     v + L.v.at(b, h), as_int(L.v.ld), T(0), o, as_int(L.out.ld));
      }
    }
  });
}

// Backward for every (batch, head), block by block, from dO; dq, dk, dv may be null when not
// needed, and are laid out like q, k, v. Every element of the ones asked for is written.
template <class T>
void attention_backward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                        const T* v, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  std::size_t tile_size = static_cast<std::size_t>(std::min(n.tq, kQueryBlock) * n.tk);
  parallel_for(n.b * n.h, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> p(tile_size), dS(tile_size);  // P and dP -> dS for one block, reused
    for (std::int64_t bh = first; bh < last; ++bh) {
      std::int64_t b = bh / n.h, h = bh % n.h;
      const T* lse_bh = lse + (b * n.h + h) * n.tq;
      const T *qb = q + L.q.at(b, h), *kb = k + L.k.at(b, h), *vb = v + L.v.at(b, h);
      T* dkb = dk ? dk + L.k.at(b, h) : nullptr;
      T* dvb = dv ? dv + L.v.at(b, h) : nullptr;
      // dK and dV sum over query blocks.
      if (dkb) zero_rows(dkb, n.tk, n.d, L.k.ld);
      if (dvb) zero_rows(dvb, n.tk, n.dv, L.v.ld);
      for (std::int64_t i0 = 0; i0 < n.tq; i0 += kQueryBlock) {
        std::int64_t rows = std::min(kQueryBlock, n.tq - i0), kend = key_end(mask, i0 + rows, n.tk);
        const T* dO = dout + L.out.at(b, h) + i0 * L.out.ld;
        T* dqb = dq ? dq + L.q.at(b, h) + i0 * L.q.ld : nullptr;
        if (kend == 0) {
          if (dqb) zero_rows(dqb, rows, n.d, L.q.ld);
          continue;
        }
        int ik = as_int(kend), ir = as_int(rows);
        blas::gemm(false, true, ir, ik, as_int(n.d), static_cast<T>(scale), qb + i0 * L.q.ld, as_int(L.q.ld), kb,
                   as_int(L.k.ld), T(0), p.data(), ik);
        block_recompute(mask, b, h, i0, rows, kend, p.data(), lse_bh);
        // dV[:kend] += P^T dO
        if (dvb && n.dv > 0)
          blas::gemm(true, false, ik, as_int(n.dv), ir, T(1), p.data(), ik, dO, as_int(L.out.ld), T(1), dvb,
                     as_int(L.v.ld));
        if (!dqb && !dkb) continue;
        // dP = dO V^T
        if (n.dv > 0)
          blas::gemm(false, true, ir, ik, as_int(n.dv), T(1), dO, as_int(L.out.ld), vb, as_int(L.v.ld), T(0), dS.data(),
                     ik);
        else
          std::fill(dS.begin(), dS.end(), T(0));
        // dS = P * (dP - rowsum(dP * P)), row by row
        for (std::int64_t r = 0; r < rows; ++r) {
          T* row = dS.data() + r * kend;
          const T* prow = p.data() + r * kend;
          double dot = fast::lane_sum(kend, [&](std::int64_t j) { return static_cast<double>(row[j]) * prow[j]; });
          for (std::int64_t j = 0; j < kend; ++j) row[j] = prow[j] * (row[j] - static_cast<T>(dot));
        }
        // dQ = scale dS K,   dK[:kend] += scale dS^T Q
        if (dqb)
          blas::gemm(false, false, ir, as_int(n.d), ik, static_cast<T>(scale), dS.data(), ik, kb, as_int(L.k.ld), T(0),
                     dqb, as_int(L.q.ld));
        if (dkb)
          blas::gemm(true, false, ik, as_int(n.d), ir, static_cast<T>(scale), dS.data(), ik, qb + i0 * L.q.ld,
                     as_int(L.q.ld), T(1), dkb, as_int(L.k.ld));
      }
    }
  });
}

// Where q, k or v is found among the node's inputs: input `input`, from element `offset` on.
struct Operand {
  std::size_t input;
  std::int64_t offset;
};

// The fused op over any layout: `inputs` are the node's inputs, q, k and v are found in them at
// `at`, laid out as `L` says; `n` has been checked. Each input's gradient has the input's shape,
// and q's, k's and v's gradients land where q, k and v were read.
AttentionResult fused_attention(const char* op, const std::vector<Tensor>& inputs, std::array<Operand, 3> at,
                                const Layouts& L, const Shape& out_shape, const Dims& n, const Tensor& attn_mask,
                                bool causal, bool need_weights, std::optional<double> scale) {
  MaskReader mask = mask_reader(op, attn_mask, causal, n);
  double s = default_scale(op, scale, n.d);
  for (std::int64_t size : {n.tq, n.tk, n.d, n.dv}) as_int(size);  // BLAS indexes with int
  const Tensor& first = inputs[0];
  // Every output row is written below (a product with beta 0, or zeros for a query that sees
  // no key); only an empty product leaves it to this fill.
  bool runs = n.tq > 0 && n.tk > 0;
  Tensor out = runs ? empty(out_shape, first.dtype()) : zeros(out_shape, first.dtype());
  Tensor lse = empty({n.b, n.h, n.tq}, first.dtype());  // per query: log of its softmax denominator
  Tensor weights = need_weights ? zeros({n.b, n.h, n.tq, n.tk}, first.dtype()) : Tensor();
  if (runs)
    dispatch_floating(first.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      auto in = [&](int i) { return inputs[at[i].input].data_ptr<T>() + at[i].offset; };
      attention_forward<T>(n, L, mask, s, in(0), in(1), in(2), lse.data_ptr<T>(),
                           need_weights ? weights.data_ptr<T>() : nullptr, out.data_ptr<T>());
    });
  // Saved for backward: the inputs (shared with the caller), the mask and one number per query.
  std::vector<Tensor> saved;
  for (const Tensor& t : inputs) saved.push_back(t.detach());
  Tensor result = record(op, out, inputs,
                         [saved, at, mask_tensor = attn_mask, lse, n, L, s, causal, op](const Tensor& dout,
                                                                                        const std::vector<bool>& need) {
                           // Only the gradients asked for are allocated; the others stay undefined.
                           bool runs = n.tq > 0 && n.tk > 0;
                           std::vector<Tensor> grads(saved.size());
                           for (std::size_t i = 0; i < saved.size(); ++i)
                             if (need[i])
                               grads[i] = runs ? empty(saved[i].shape(), saved[i].dtype())
                                               : zeros(saved[i].shape(), saved[i].dtype());
                           if (runs)
                             dispatch_floating(saved[0].dtype(), op, [&](auto tag) {
                               using T = decltype(tag);
                               auto in = [&](int i) { return saved[at[i].input].data_ptr<T>() + at[i].offset; };
                               auto grad = [&](int i) {
                                 return need[at[i].input] ? grads[at[i].input].data_ptr<T>() + at[i].offset : nullptr;
                               };
                               MaskReader mask = mask_reader(op, mask_tensor, causal, n);
                               attention_backward<T>(n, L, mask, s, in(0), in(1), in(2), lse.data_ptr<T>(),
                                                     dout.data_ptr<T>(), grad(0), grad(1), grad(2));
                             });
                           return grads;
                         });
  return {result, weights};
}

// The [B, H, T, d] and [B, T, H, d] ops: q, k and v are three inputs.
AttentionResult fused_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Dims& n,
                                bool heads_are_last, const Tensor& attn_mask, bool causal, bool need_weights,
                                std::optional<double> scale) {
  auto view = heads_are_last ? heads_last : heads_first;
  Layouts L{view(n.h, n.tq, n.d), view(n.h, n.tk, n.d), view(n.h, n.tk, n.dv), view(n.h, n.tq, n.dv)};
  Shape out_shape = heads_are_last ? Shape{n.b, n.tq, n.h, n.dv} : Shape{n.b, n.h, n.tq, n.dv};
  return fused_attention(op, {q, k, v}, {Operand{0, 0}, Operand{1, 0}, Operand{2, 0}}, L, out_shape, n, attn_mask,
                         causal, need_weights, scale);
}

// The reference route (ops/kernels.h), once the public op has checked q, k and v: the mask
// and the scale are checked here as the fused route checks them, and the weights are handed out
// as it hands them out, outside the graph and only when asked for.
AttentionResult reference_attention(std::string_view op, const Dims& n, const Tensor& attn_mask, bool need_weights,
                                    std::optional<double> scale,
                                    const std::function<AttentionResult(const Tensor&, double)>& attend) {
  if (attn_mask.defined()) check_mask(op, attn_mask, n);
  AttentionResult r = attend(attn_mask, default_scale(op, scale, n.d));
  return {r.output, need_weights ? r.weights.detach() : Tensor()};
}

}  // namespace

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                             bool causal, bool need_weights, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  Dims n = check_qkv(op, q, k, v);
  if (kernels() == Kernels::Reference)
    return reference_attention(op, n, attn_mask, need_weights, scale, [&](const Tensor& mask, double s) {
      return reference::scaled_dot_product_attention(q, k, v, mask, causal, s);
    });
  return fused_attention(op, q, k, v, n, false, attn_mask, causal, need_weights, scale);
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
  Dims n = check_qkv(op, vq, vk, vv);
  if (kernels() == Kernels::Reference)
    return reference_attention(op, n, attn_mask, need_weights, scale, [&](const Tensor& mask, double s) {
      return reference::scaled_dot_product_attention_bthd(q, k, v, mask, causal, s);
    });
  return fused_attention(op, q, k, v, n, true, attn_mask, causal, need_weights, scale);
}

AttentionResult scaled_dot_product_attention_packed(const Tensor& qkv, std::int64_t heads, const Tensor& attn_mask,
                                                    bool causal, bool need_weights, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_packed";
  check_floating(op, qkv);
  if (qkv.dim() != 3 || heads < 1 || qkv.size(2) % (3 * heads) != 0)
    throw_invalid(op, "qkv must be [B, T, 3 * heads * d] with heads >= 1, got shape {} and {} heads",
                  shape_str(qkv.shape()), heads);
  std::int64_t t = qkv.size(1), width = qkv.size(2) / 3, d = width / heads;
  Dims n{qkv.size(0), heads, t, t, d, d};
  // As for the other layouts (check_qkv): no empty batch or sequence, no empty heads.
  if (n.b == 0 || t == 0)
    throw_invalid(op, "q, k and v need at least one batch entry, head, query and key, got qkv of shape {}",
                  shape_str(qkv.shape()));
  if (d == 0) throw_invalid(op, "q and k have head dim 0 (qkv of shape {}, {} heads)", shape_str(qkv.shape()), heads);
  if (kernels() == Kernels::Reference)
    return reference_attention(op, n, attn_mask, need_weights, scale, [&](const Tensor& mask, double s) {
      return reference::scaled_dot_product_attention_packed(qkv, heads, mask, causal, s);
    });
  // Position p's query, key and value are its row's three thirds; head h is d columns of each.
  View packed{t * 3 * width, d, 3 * width};
  Layouts L{packed, packed, packed, heads_last(heads, t, d)};
  return fused_attention(op, {qkv}, {Operand{0, 0}, Operand{0, width}, Operand{0, 2 * width}}, L,
                         Shape{n.b, t, heads, d}, n, attn_mask, causal, need_weights, scale);
}

AttentionResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool causal, std::optional<double> scale) {
  const char* op = "attention_reference";
  Dims n = check_qkv(op, q, k, v);
  if (attn_mask.defined()) check_mask(op, attn_mask, n);
  return reference::scaled_dot_product_attention(q, k, v, attn_mask, causal, default_scale(op, scale, n.d));
}

}  // namespace ag
