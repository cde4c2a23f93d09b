// Scaled dot-product attention as the textbook's loops, one (batch, head) pair at a time; the
// fast twin is kernels/cpu/attention_tiles.cpp, the op ops/fused/attention.cpp (whose header
// and docs/attention.md derive each line below). For one (b, h):
//
//   q, dq: [Tq, d]   k, dk: [Tk, d]   v, dv: [Tk, dv]   out, dout: [Tq, dv]   S, P, dS: [Tq, Tk]
//
// Each of those matrices is read through its view in Layouts: row i of q for (b, h) starts at
// q + L.q.at(b, h) + i * L.q.ld, which serves [B, H, T, d], [B, T, H, d] and the packed
// [B, T, 3 H d] alike (dq, dk and dv may then be three parts of one buffer). lse is [B, H, Tq] and
// weights [B, H, Tq, Tk], both contiguous.
//
// Every sum runs in double, for float as for double: plain, and the most accurate. Each output
// element is one whole sum, stored once, so nothing is accumulated in T and no output needs
// zeroing first.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "naive.h"

namespace ag::backends::naive {

using attention_kernels::Dims;
using attention_kernels::Layouts;
using attention_kernels::MaskReader;
using attention_kernels::View;

namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// A matrix whose rows are ld elements apart: m(i, c) is its element (i, c). matrix() gives the
// (b, h) matrix of a buffer seen through its view.
template <class T>
struct Matrix {
  T* data;
  std::int64_t ld;
  T& operator()(std::int64_t i, std::int64_t c) const { return data[i * ld + c]; }
};
template <class T>
Matrix<T> matrix(T* data, const View& view, std::int64_t b, std::int64_t h) {
  return {data + view.at(b, h), view.ld};
}

// S = scale Q K^T for one (b, h), with -infinity where the mask forbids query i to see key j:
// exp(-infinity) = 0, so a masked score takes no part in the softmax. S: [Tq, Tk].
template <class T>
void masked_scores(const Dims& n, const MaskReader& mask, double scale, Matrix<const T> Q, Matrix<const T> K,
                   std::int64_t b, std::int64_t h, Matrix<double> S) {
  for (std::int64_t i = 0; i < n.tq; ++i)
    for (std::int64_t j = 0; j < n.tk; ++j) {
      double dot = 0;
      for (std::int64_t c = 0; c < n.d; ++c) dot += static_cast<double>(Q(i, c)) * K(j, c);
      S(i, j) = mask.allowed(b, h, i, j) ? scale * dot : kMinusInf;
    }
}

}  // namespace

// For each (b, h):
//   S = scale Q K^T,   S_ij = -inf where masked
//   P_ij = exp(S_ij - m_i) / sum_j exp(S_ij - m_i),   m_i = max_j S_ij   (the row max keeps exp <= 1)
//   lse_i = m_i + log sum_j exp(S_ij - m_i) = log sum_j exp(S_ij)        (kept for backward)
//   O = P V
// A row whose every key is masked (or Tk = 0) attends to nothing: P = 0, O = 0, lse = -inf.
// weights (may be null) receives P.
template <class T>
void attention(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
               const T* v, T* lse, T* weights, T* out, const Products&) {
  count_call();
  std::vector<double> scores(static_cast<std::size_t>(n.tq * n.tk));
  Matrix<double> P{scores.data(), n.tk};  // S, then P, of one (b, h)
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t h = 0; h < n.h; ++h) {
      Matrix<const T> V = matrix(v, L.v, b, h);
      Matrix<T> O = matrix(out, L.out, b, h);
      masked_scores(n, mask, scale, matrix(q, L.q, b, h), matrix(k, L.k, b, h), b, h, P);
      for (std::int64_t i = 0; i < n.tq; ++i) {
        std::int64_t at = (b * n.h + h) * n.tq + i;  // this query's place in lse, and its row of weights
        double m = kMinusInf;
        for (std::int64_t j = 0; j < n.tk; ++j) m = std::max(m, P(i, j));
        bool sees_nothing = m == kMinusInf;
        double sum = 0;
        for (std::int64_t j = 0; j < n.tk; ++j) {
          P(i, j) = sees_nothing ? 0.0 : std::exp(P(i, j) - m);
          sum += P(i, j);
        }
        if (!sees_nothing)
          for (std::int64_t j = 0; j < n.tk; ++j) P(i, j) /= sum;
        lse[at] = static_cast<T>(sees_nothing ? kMinusInf : m + std::log(sum));
        if (weights)
          for (std::int64_t j = 0; j < n.tk; ++j) weights[at * n.tk + j] = static_cast<T>(P(i, j));
        // O_ic = sum_j P_ij V_jc
        for (std::int64_t c = 0; c < n.dv; ++c) {
          double o = 0;
          for (std::int64_t j = 0; j < n.tk; ++j) o += P(i, j) * V(j, c);
          O(i, c) = static_cast<T>(o);
        }
      }
    }
}

// For each (b, h), from dO, with P recomputed from the saved log-sum-exp (0 where masked, and on
// a row that saw no key):
//   P = exp(S - lse)
//   dV = P^T dO                                (O = P V: the matmul rule)
//   dP = dO V^T
//   dS_ij = P_ij (dP_ij - sum_k dP_ik P_ik)    (softmax's Jacobian, row by row; 0 where masked)
//   dQ = scale dS K,   dK = scale dS^T Q       (S = scale Q K^T: the matmul rule again)
// dq, dk, dv may each be null (not wanted).
template <class T>
void attention_backward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                        const T* v, const T* lse, const T* dout, T* dq, T* dk, T* dv, const Products&) {
  count_call();
  std::vector<double> buffers(static_cast<std::size_t>(2 * n.tq * n.tk));
  Matrix<double> P{buffers.data(), n.tk}, dS{buffers.data() + n.tq * n.tk, n.tk};  // dS holds dP first
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t h = 0; h < n.h; ++h) {
      Matrix<const T> Q = matrix(q, L.q, b, h), K = matrix(k, L.k, b, h), V = matrix(v, L.v, b, h);
      Matrix<const T> dO = matrix(dout, L.out, b, h);
      masked_scores(n, mask, scale, Q, K, b, h, P);
      for (std::int64_t i = 0; i < n.tq; ++i) {
        double l = lse[(b * n.h + h) * n.tq + i];
        for (std::int64_t j = 0; j < n.tk; ++j) P(i, j) = l == kMinusInf ? 0.0 : std::exp(P(i, j) - l);
      }
      // dV_jc = sum_i P_ij dO_ic
      if (dv) {
        Matrix<T> dV = matrix(dv, L.v, b, h);
        for (std::int64_t j = 0; j < n.tk; ++j)
          for (std::int64_t c = 0; c < n.dv; ++c) {
            double sum = 0;
            for (std::int64_t i = 0; i < n.tq; ++i) sum += P(i, j) * dO(i, c);
            dV(j, c) = static_cast<T>(sum);
          }
      }
      if (!dq && !dk) continue;
      // dP_ij = sum_c dO_ic V_jc, then dS_ij = P_ij (dP_ij - r_i) with r_i = sum_j dP_ij P_ij
      for (std::int64_t i = 0; i < n.tq; ++i) {
        double r = 0;
        for (std::int64_t j = 0; j < n.tk; ++j) {
          double dp = 0;
          for (std::int64_t c = 0; c < n.dv; ++c) dp += static_cast<double>(dO(i, c)) * V(j, c);
          dS(i, j) = dp;
          r += dp * P(i, j);
        }
        for (std::int64_t j = 0; j < n.tk; ++j) dS(i, j) = P(i, j) * (dS(i, j) - r);
      }
      // dQ_ic = scale sum_j dS_ij K_jc
      if (dq) {
        Matrix<T> dQ = matrix(dq, L.q, b, h);
        for (std::int64_t i = 0; i < n.tq; ++i)
          for (std::int64_t c = 0; c < n.d; ++c) {
            double sum = 0;
            for (std::int64_t j = 0; j < n.tk; ++j) sum += dS(i, j) * K(j, c);
            dQ(i, c) = static_cast<T>(scale * sum);
          }
      }
      // dK_jc = scale sum_i dS_ij Q_ic
      if (dk) {
        Matrix<T> dK = matrix(dk, L.k, b, h);
        for (std::int64_t j = 0; j < n.tk; ++j)
          for (std::int64_t c = 0; c < n.d; ++c) {
            double sum = 0;
            for (std::int64_t i = 0; i < n.tq; ++i) sum += dS(i, j) * Q(i, c);
            dK(j, c) = static_cast<T>(scale * sum);
          }
      }
    }
}

// The two precisions of the table (table.cpp).
template void attention(const Dims&, const Layouts&, const MaskReader&, double, const float*, const float*,
                        const float*, float*, float*, float*, const Products&);
template void attention(const Dims&, const Layouts&, const MaskReader&, double, const double*, const double*,
                        const double*, double*, double*, double*, const Products&);
template void attention_backward(const Dims&, const Layouts&, const MaskReader&, double, const float*, const float*,
                                 const float*, const float*, const float*, float*, float*, float*, const Products&);
template void attention_backward(const Dims&, const Layouts&, const MaskReader&, double, const double*, const double*,
                                 const double*, const double*, const double*, double*, double*, double*,
                                 const Products&);

}  // namespace ag::backends::naive
