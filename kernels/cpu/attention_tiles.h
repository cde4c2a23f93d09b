// The fused attention kernels of ops/fused/attention.cpp, block by block over the queries, for any
// layout of q, k and v: what they share with the op that calls them. The math is at the top of
// ops/fused/attention.cpp; the readable twin is ops/reference/attention.cpp.
#pragma once

#include <cstdint>

#include "../attention_layout.h"
#include "../products.h"

namespace ag::attention_kernels {

// Queries are processed in blocks of this many rows. A block's scores are one [rows, Tk] tile,
// so neither pass holds more than a tile per (batch, head) at a time, and under a causal mask a
// block stops at the last key its last query may see: the masked upper triangle is never
// multiplied, only the diagonal blocks' corners.
inline constexpr std::int64_t kQueryBlock = 64;

// Forward for every (batch, head), block by block: S = scale Q K^T into a tile, masked row
// softmax, O = P V. lse is [B, H, Tq]; `weights`, when not null, receives P as [B, H, Tq, Tk]
// (zero-initialised by the caller), for callers that asked to see it. Both products run under
// `products` (under autocast: bf16 inputs, float32 sums); the softmax stays float32.
template <class T>
void attention_forward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                       const T* v, T* lse, T* weights, T* out, const Products& products = {});

// Backward for every (batch, head), block by block, from dO; dq, dk, dv may be null when not
// needed, and are laid out like q, k, v. Every element of the ones asked for is written. Its
// products (S again, dV, dP, dQ and dK) run under the forward's `products`. q, k and v are read
// only by those products, so under bf16 they may be the forward's rounded copies (In =
// std::uint16_t, with T = float and `products` a bf16 policy) instead of the float32 tensors.
template <class T, class In>
void attention_backward(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const In* q,
                        const In* k, const In* v, const T* lse, const T* dout, T* dq, T* dk, T* dv,
                        const Products& products = {});

// Forward mode for every (batch, head), block by block: the output's tangent dO from the
// tangents dQ, dK, dV (any may be null: it does not move), laid out like q, k, v and out:
//
//   dS = scale (dQ K^T + Q dK^T),   dP = P * (dS - rowsum(P * dS)),   dO = dP V + P dV
//
// with P recomputed per block from the forward's log-sum-exp, as backward does: no [Tq, Tk]
// buffer, one tile of rows at a time. Every element of dout is written.
template <class T>
void attention_jvp(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q, const T* k,
                   const T* v, const T* lse, const T* dq, const T* dk, const T* dv, T* dout,
                   const Products& products = {});

// Forward over reverse for every (batch, head), block by block: the tangents of backward's dQ,
// dK, dV (outputs dq_t, dk_t, dv_t, each may be null when not needed) when q, k, v and dout move
// along q_t, k_t, v_t, dout_t (each may be null: it stays). With P, dP, dS as in backward:
//
//   dP' = P * (dS'' - rowsum(P * dS''))   where dS'' = scale (q_t K^T + Q k_t^T)  (P's tangent)
//   d(dP) = dout_t V^T + dO v_t^T,   r = rowsum(dP * P),   d(r) = rowsum(d(dP) * P + dP * dP')
//   d(dS) = dP' * (dP - r) + P * (d(dP) - d(r))
//   d(dV) = dP'^T dO + P^T dout_t,   d(dQ) = scale (d(dS) K + dS k_t),   d(dK) = scale (d(dS)^T Q + dS^T q_t)
//
// P recomputed from the log-sum-exp; four [rows, Tk] tiles per thread, no [Tq, Tk] tensor.
template <class T>
void attention_backward_tangent(const Dims& n, const Layouts& L, const MaskReader& mask, double scale, const T* q,
                                const T* k, const T* v, const T* lse, const T* dout, const T* q_t, const T* k_t,
                                const T* v_t, const T* dout_t, T* dq_t, T* dk_t, T* dv_t,
                                const Products& products = {});

}  // namespace ag::attention_kernels
