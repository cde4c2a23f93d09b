// The fused attention kernels (attention_tiles.h): queries in blocks, one [rows, Tk] tile of
// scores at a time, softmax from a running max, and P recomputed in backward from the saved
// log-sum-exp instead of being kept.
#include "attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../runtime/parallel.h"
#include "blas.h"
#include "fast_math.h"

namespace ag::attention_kernels {

namespace {

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

// How far a row's exponentials run: its jend keys, rounded up to whole vectors of 16 as far as
// the tile's row allows, so that a causal row's last few keys are not left to a scalar loop.
// What lies past jend is overwritten with zeros right after.
std::int64_t vector_end(std::int64_t jend, std::int64_t kend) { return std::min(kend, (jend + 15) / 16 * 16); }

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
      fast::exp_shifted(row, vector_end(jend, kend), m);
    }
    std::fill(row + jend, row + kend, T(0));
    double sum = fast::lane_sum(jend, [&](std::int64_t j) { return row[j]; });
    T inv = static_cast<T>(1.0 / sum);
    for (std::int64_t j = 0, end = vector_end(jend, kend); j < end; ++j) row[j] *= inv;  // zeros stay zero
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
      fast::exp_shifted(row, vector_end(jend, kend), l);
    }
    std::fill(row + jend, row + kend, T(0));
  }
}

// Softmax's Jacobian applied to each row of a tile, in place: x <- P * (x - rowsum(P * x)). The
// Jacobian is symmetric, so this one line is backward's dS from dP, the forward tangent's dP from
// dS, and P's own tangent from the scores' (the masked keys have P = 0 and stay 0).
template <class T>
void softmax_rows_jvp(const T* p, T* x, std::int64_t rows, std::int64_t kend) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = x + r * kend;
    const T* prow = p + r * kend;
    double dot = fast::lane_sum(kend, [&](std::int64_t j) { return static_cast<double>(row[j]) * prow[j]; });
    for (std::int64_t j = 0; j < kend; ++j) row[j] = prow[j] * (row[j] - static_cast<T>(dot));
  }
}

}  // namespace

// Declared, with what it computes, in attention_tiles.h.
template <class T>
void attention_forward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                       const T* v, T* lse, T* weights, T* out, const Products& products) {
  using Mat = blas::Matrix<const T>;
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
        // S = scale Q K^T for this block's queries and the keys they may see
        products.gemm<T>(Mat{q + L.q.at(b, h) + i0 * L.q.ld, rows, n.d, L.q.ld},
                         Mat{k + L.k.at(b, h), kend, n.d, L.k.ld}.t(), blas::Matrix<T>{tile.data(), rows, kend}, T(0),
                         static_cast<T>(scale));
        block_softmax(mask, b, h, i0, rows, kend, tile.data(), lse_bh);
        if (weights)
          for (std::int64_t r = 0; r < rows; ++r)
            std::copy_n(tile.data() + r * kend, kend, weights + ((b * n.h + h) * n.tq + i0 + r) * n.tk);
        if (n.dv > 0)
          products.gemm<T>(Mat{tile.data(), rows, kend}, Mat{v + L.v.at(b, h), kend, n.dv, L.v.ld},
                           blas::Matrix<T>{o, rows, n.dv, L.out.ld});  // O = P V
      }
    }
  });
}

// Declared, with what it computes, in attention_tiles.h.
template <class T, class In>
void attention_backward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const In* q,
                        const In* k, const In* v, const T* lse, const T* dout, T* dq, T* dk, T* dv,
                        const Products& products) {
  using Mat = blas::Matrix<const T>;
  // q, k and v: T, or their bf16 copies; a product with one of them as an operand then goes to
  // the overload of Products::gemm that takes a bf16 operand as it is.
  using InMat = blas::Matrix<const In>;
  std::size_t tile_size = static_cast<std::size_t>(std::min(n.tq, kQueryBlock) * n.tk);
  parallel_for(n.b * n.h, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> p(tile_size), dS(tile_size);  // P and dP -> dS for one block, reused
    for (std::int64_t bh = first; bh < last; ++bh) {
      std::int64_t b = bh / n.h, h = bh % n.h;
      const T* lse_bh = lse + (b * n.h + h) * n.tq;
      const In *qb = q + L.q.at(b, h), *kb = k + L.k.at(b, h), *vb = v + L.v.at(b, h);
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
        InMat qblock{qb + i0 * L.q.ld, rows, n.d, L.q.ld}, keys{kb, kend, n.d, L.k.ld}, values{vb, kend, n.dv, L.v.ld};
        Mat dOblock{dO, rows, n.dv, L.out.ld};
        blas::Matrix<T> P{p.data(), rows, kend}, dSb{dS.data(), rows, kend};
        products.gemm(qblock, keys.t(), P, T(0), static_cast<T>(scale));  // S again
        block_recompute(mask, b, h, i0, rows, kend, p.data(), lse_bh);
        // dV[:kend] += P^T dO
        if (dvb && n.dv > 0) products.gemm<T>(Mat{P}.t(), dOblock, blas::Matrix<T>{dvb, kend, n.dv, L.v.ld}, T(1));
        if (!dqb && !dkb) continue;
        // dP = dO V^T
        if (n.dv > 0)
          products.gemm(dOblock, values.t(), dSb);
        else
          std::fill(dS.begin(), dS.end(), T(0));
        softmax_rows_jvp(p.data(), dS.data(), rows, kend);  // dS = P * (dP - rowsum(dP * P))
        // dQ = scale dS K,   dK[:kend] += scale dS^T Q
        if (dqb) products.gemm(Mat{dSb}, keys, blas::Matrix<T>{dqb, rows, n.d, L.q.ld}, T(0), static_cast<T>(scale));
        if (dkb)
          products.gemm(Mat{dSb}.t(), qblock, blas::Matrix<T>{dkb, kend, n.d, L.k.ld}, T(1), static_cast<T>(scale));
      }
    }
  });
}

// Declared, with what it computes, in attention_tiles.h.
template <class T>
void attention_jvp(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                   const T* v, const T* lse, const T* dq, const T* dk, const T* dv, T* dout, const Products& products) {
  using Mat = blas::Matrix<const T>;
  std::size_t tile_size = static_cast<std::size_t>(std::min(n.tq, kQueryBlock) * n.tk);
  parallel_for(n.b * n.h, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> p(tile_size), dS(tile_size);  // P and dS -> dP for one block, reused
    for (std::int64_t bh = first; bh < last; ++bh) {
      std::int64_t b = bh / n.h, h = bh % n.h;
      const T* lse_bh = lse + (b * n.h + h) * n.tq;
      for (std::int64_t i0 = 0; i0 < n.tq; i0 += kQueryBlock) {
        std::int64_t rows = std::min(kQueryBlock, n.tq - i0), kend = key_end(mask, i0 + rows, n.tk);
        T* dO = dout + L.out.at(b, h) + i0 * L.out.ld;
        if (kend == 0 || n.dv == 0) {  // no key seen (or no value column): O does not move
          zero_rows(dO, rows, n.dv, L.out.ld);
          continue;
        }
        Mat qblock{q + L.q.at(b, h) + i0 * L.q.ld, rows, n.d, L.q.ld}, keys{k + L.k.at(b, h), kend, n.d, L.k.ld},
            values{v + L.v.at(b, h), kend, n.dv, L.v.ld};
        blas::Matrix<T> P{p.data(), rows, kend}, dSb{dS.data(), rows, kend}, dOb{dO, rows, n.dv, L.out.ld};
        products.gemm<T>(qblock, keys.t(), P, T(0), static_cast<T>(scale));  // S, then P in place
        block_recompute(mask, b, h, i0, rows, kend, p.data(), lse_bh);
        bool scores_move = dq || dk;
        if (scores_move) {
          // dS = scale (dQ K^T + Q dK^T)
          if (dq)
            products.gemm<T>(Mat{dq + L.q.at(b, h) + i0 * L.q.ld, rows, n.d, L.q.ld}, keys.t(), dSb, T(0),
                             static_cast<T>(scale));
          if (dk)
            products.gemm<T>(qblock, Mat{dk + L.k.at(b, h), kend, n.d, L.k.ld}.t(), dSb, dq ? T(1) : T(0),
                             static_cast<T>(scale));
          softmax_rows_jvp(p.data(), dS.data(), rows, kend);  // dP = P * (dS - rowsum(P * dS))
          products.gemm<T>(Mat{dSb}, values, dOb);  // dO = dP V
        }
        // dO += P dV
        if (dv) products.gemm<T>(Mat{P}, Mat{dv + L.v.at(b, h), kend, n.dv, L.v.ld}, dOb, scores_move ? T(1) : T(0));
        if (!scores_move && !dv) zero_rows(dO, rows, n.dv, L.out.ld);
      }
    }
  });
}

// Declared, with what it computes, in attention_tiles.h.
template <class T>
void attention_backward_tangent(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q,
                                const T* k, const T* v, const T* lse, const T* dout, const T* q_t, const T* k_t,
                                const T* v_t, const T* dout_t, T* dq_t, T* dk_t, T* dv_t, const Products& products) {
  using Mat = blas::Matrix<const T>;
  using Out = blas::Matrix<T>;
  std::size_t tile_size = static_cast<std::size_t>(std::min(n.tq, kQueryBlock) * n.tk);
  T s = static_cast<T>(scale);
  parallel_for(n.b * n.h, 1, [&](std::int64_t first, std::int64_t last) {
    // P, P's tangent, dP (then dS) and d(dP) (then d(dS)) for one block, reused
    std::vector<T> p(tile_size), pt(tile_size), dp(tile_size), dpt(tile_size);
    for (std::int64_t bh = first; bh < last; ++bh) {
      std::int64_t b = bh / n.h, h = bh % n.h;
      const T* lse_bh = lse + (b * n.h + h) * n.tq;
      auto at = [&](const T* base, const View& view) { return base ? base + view.at(b, h) : nullptr; };
      const T *kb = at(k, L.k), *vb = at(v, L.v), *ktb = at(k_t, L.k), *vtb = at(v_t, L.v);
      T *dktb = dk_t ? dk_t + L.k.at(b, h) : nullptr, *dvtb = dv_t ? dv_t + L.v.at(b, h) : nullptr;
      if (dktb) zero_rows(dktb, n.tk, n.d, L.k.ld);  // summed over query blocks
      if (dvtb) zero_rows(dvtb, n.tk, n.dv, L.v.ld);
      for (std::int64_t i0 = 0; i0 < n.tq; i0 += kQueryBlock) {
        std::int64_t rows = std::min(kQueryBlock, n.tq - i0), kend = key_end(mask, i0 + rows, n.tk);
        T* dqtb = dq_t ? dq_t + L.q.at(b, h) + i0 * L.q.ld : nullptr;
        if (kend == 0) {
          if (dqtb) zero_rows(dqtb, rows, n.d, L.q.ld);
          continue;
        }
        const T* qb = q + L.q.at(b, h) + i0 * L.q.ld;
        const T* qtb = q_t ? q_t + L.q.at(b, h) + i0 * L.q.ld : nullptr;
        const T* dO = dout + L.out.at(b, h) + i0 * L.out.ld;
        const T* dOt = dout_t ? dout_t + L.out.at(b, h) + i0 * L.out.ld : nullptr;
        Mat Q{qb, rows, n.d, L.q.ld}, K{kb, kend, n.d, L.k.ld}, V{vb, kend, n.dv, L.v.ld}, dOm{dO, rows, n.dv, L.out.ld};
        Out P{p.data(), rows, kend}, Pt{pt.data(), rows, kend}, dP{dp.data(), rows, kend}, dPt{dpt.data(), rows, kend};
        products.gemm<T>(Q, K.t(), P, T(0), s);
        block_recompute(mask, b, h, i0, rows, kend, p.data(), lse_bh);
        // P's tangent, from the scores' tangent scale (q_t K^T + Q k_t^T)
        bool p_moves = qtb || ktb;
        if (qtb) products.gemm<T>(Mat{qtb, rows, n.d, L.q.ld}, K.t(), Pt, T(0), s);
        if (ktb) products.gemm<T>(Q, Mat{ktb, kend, n.d, L.k.ld}.t(), Pt, qtb ? T(1) : T(0), s);
        if (!p_moves) std::fill(pt.begin(), pt.end(), T(0));
        if (p_moves) softmax_rows_jvp(p.data(), pt.data(), rows, kend);
        // dP = dO V^T and its tangent dout_t V^T + dO v_t^T
        if (n.dv > 0) products.gemm<T>(dOm, V.t(), dP);
        else std::fill(dp.begin(), dp.end(), T(0));
        bool dp_moves = (dOt || vtb) && n.dv > 0;
        if (dOt && n.dv > 0) products.gemm<T>(Mat{dOt, rows, n.dv, L.out.ld}, V.t(), dPt);
        if (vtb && n.dv > 0) products.gemm<T>(dOm, Mat{vtb, kend, n.dv, L.v.ld}.t(), dPt, dOt ? T(1) : T(0));
        if (!dp_moves) std::fill(dpt.begin(), dpt.end(), T(0));
        // d(dV) += P'^T dO + P^T dout_t
        if (dvtb && n.dv > 0) {
          Out dV{dvtb, kend, n.dv, L.v.ld};
          if (p_moves) products.gemm<T>(Mat{Pt}.t(), dOm, dV, T(1));
          if (dOt) products.gemm<T>(Mat{P}.t(), Mat{dOt, rows, n.dv, L.out.ld}, dV, T(1));
        }
        if (!dqtb && !dktb) continue;
        // d(dS) = P' (dP - r) + P (d(dP) - d(r)), then dS = P (dP - r), row by row
        for (std::int64_t r = 0; r < rows; ++r) {
          T *dprow = dp.data() + r * kend, *dptrow = dpt.data() + r * kend;
          const T *prow = p.data() + r * kend, *ptrow = pt.data() + r * kend;
          double rr = fast::lane_sum(kend, [&](std::int64_t j) { return static_cast<double>(dprow[j]) * prow[j]; });
          double rt = fast::lane_sum(kend, [&](std::int64_t j) {
            return static_cast<double>(dptrow[j]) * prow[j] + static_cast<double>(dprow[j]) * ptrow[j];
          });
          for (std::int64_t j = 0; j < kend; ++j) {
            dptrow[j] = ptrow[j] * (dprow[j] - static_cast<T>(rr)) + prow[j] * (dptrow[j] - static_cast<T>(rt));
            dprow[j] = prow[j] * (dprow[j] - static_cast<T>(rr));
          }
        }
        // d(dQ) = scale (d(dS) K + dS k_t),   d(dK) += scale (d(dS)^T Q + dS^T q_t)
        if (dqtb) {
          Out dQ{dqtb, rows, n.d, L.q.ld};
          products.gemm<T>(Mat{dPt}, K, dQ, T(0), s);
          if (ktb) products.gemm<T>(Mat{dP}, Mat{ktb, kend, n.d, L.k.ld}, dQ, T(1), s);
        }
        if (dktb) {
          Out dK{dktb, kend, n.d, L.k.ld};
          products.gemm<T>(Mat{dPt}.t(), Q, dK, T(1), s);
          if (qtb) products.gemm<T>(Mat{dP}.t(), Mat{qtb, rows, n.d, L.q.ld}, dK, T(1), s);
        }
      }
    }
  });
}

template void attention_forward<float>(const Dims&, const Layouts&, const MaskReader&, double, const float*,
                                       const float*, const float*, float*, float*, float*, const Products&);
template void attention_forward<double>(const Dims&, const Layouts&, const MaskReader&, double, const double*,
                                        const double*, const double*, double*, double*, double*, const Products&);
template void attention_backward<float, float>(const Dims&, const Layouts&, const MaskReader&, double, const float*,
                                               const float*, const float*, const float*, const float*, float*, float*,
                                               float*, const Products&);
template void attention_backward<float, std::uint16_t>(const Dims&, const Layouts&, const MaskReader&, double,
                                                       const std::uint16_t*, const std::uint16_t*,
                                                       const std::uint16_t*, const float*, const float*, float*,
                                                       float*, float*, const Products&);
template void attention_backward<double, double>(const Dims&, const Layouts&, const MaskReader&, double,
                                                 const double*, const double*, const double*, const double*,
                                                 const double*, double*, double*, double*, const Products&);

template void attention_jvp<float>(const Dims&, const Layouts&, const MaskReader&, double, const float*, const float*,
                                   const float*, const float*, const float*, const float*, const float*, float*,
                                   const Products&);
template void attention_jvp<double>(const Dims&, const Layouts&, const MaskReader&, double, const double*,
                                    const double*, const double*, const double*, const double*, const double*,
                                    const double*, double*, const Products&);

template void attention_backward_tangent<float>(const Dims&, const Layouts&, const MaskReader&, double, const float*,
                                                const float*, const float*, const float*, const float*, const float*,
                                                const float*, const float*, const float*, float*, float*, float*,
                                                const Products&);
template void attention_backward_tangent<double>(const Dims&, const Layouts&, const MaskReader&, double,
                                                 const double*, const double*, const double*, const double*,
                                                 const double*, const double*, const double*, const double*,
                                                 const double*, double*, double*, double*, const Products&);

}  // namespace ag::attention_kernels
