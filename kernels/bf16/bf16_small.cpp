// Small bf16 matrix products on AVX512-BF16 (bf16_small.h).
#include "bf16_small.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ag::bf16::small {

namespace {

// Up to this many multiply-adds a product is "small": a medium GPT's attention tiles are at most
// 64 x 128 x 32 = 2^18. From about 256 x 64 x 64 = 2^20 on, oneDNN's own kernel (brgemm) is
// faster than this one, whose packing then costs more than oneDNN's per-call work saves.
constexpr std::int64_t kMaxWork = std::int64_t{1} << 19;
// The packed operands live in per-thread scratch, at most this many 32-bit pairs each.
constexpr std::int64_t kMaxPacked = std::int64_t{1} << 17;

constexpr int kRows = 8;   // a tile of C: 8 rows ...
constexpr int kCols = 32;  // ... by 32 columns, two vectors of 16 float32
constexpr int kLanes = 16;

}  // namespace

#if defined(__x86_64__)

namespace {

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

bool cpu_has_it() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return has;
}

// Every function from here to the end of this namespace is compiled for AVX512-BF16 (and is only
// called where the CPU has it). The attribute, unlike GCC's target pragma, is one both g++ and
// clang++ (the fuzz build's compiler) understand.
#define AG_BF16_KERNEL __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
// g++ 12's AVX-512 headers start many intrinsics (the unpacks, shuffles, widenings) from a vector
// they leave undefined on purpose, and then warn that it is uninitialised.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

AG_BF16_KERNEL __mmask16 first(std::int64_t count) {
  return count >= kLanes ? __mmask16(0xffff) : __mmask16((1u << std::max<std::int64_t>(count, 0)) - 1u);
}

// 32 consecutive values x[0 .. count) as 32 bf16 (rounded to nearest even), zeros past count:
// read as 32-bit lanes, 16 pairs (x[0], x[1]), (x[2], x[3]), ... with the even one low, where
// VDPBF16PS takes the even k.
AG_BF16_KERNEL __m512i load32(const float* x, std::int64_t count) {
  __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(first(count - kLanes), x + kLanes),
                                   _mm512_maskz_loadu_ps(first(count), x));
  __m512i out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}
AG_BF16_KERNEL __m512i load32(const std::uint16_t* x, std::int64_t count) {
  __mmask32 in = count >= 2 * kLanes ? ~__mmask32(0) : (__mmask32(1) << std::max<std::int64_t>(count, 0)) - 1;
  return _mm512_maskz_loadu_epi16(in, x);
}

// Two rows' values side by side: lane j = (lo[j], hi[j]) for j < 16, zeros past count (and for
// all of hi when it is null, past the end of k).
template <class T>
AG_BF16_KERNEL __m512i load_pairs(const T* lo, const T* hi, std::int64_t count) {
  // Both rows' 16 values as one vector, lo's in the low half ...
  __m512i both;
  if constexpr (std::is_same_v<T, float>) {
    __m512 l = _mm512_maskz_loadu_ps(first(count), lo),
           h = hi ? _mm512_maskz_loadu_ps(first(count), hi) : _mm512_setzero_ps();
    __m512bh b = _mm512_cvtne2ps_pbh(h, l);
    std::memcpy(&both, &b, sizeof both);
  } else {
    __m256i l = _mm256_maskz_loadu_epi16(first(count), lo),
            h = hi ? _mm256_maskz_loadu_epi16(first(count), hi) : _mm256_setzero_si256();
    both = _mm512_shuffle_i64x2(_mm512_zextsi256_si512(l), _mm512_zextsi256_si512(h), 0x44);
  }
  // ... then interleaved 16-bit element by element: 0, 16, 1, 17, ...
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, both);
}

// Row-contiguous values x[0 .. k) as kp = ceil(k / 2) pairs (the last one padded with a zero).
template <class T>
AG_BF16_KERNEL void pack_pairs(const T* x, std::int64_t k, std::uint32_t* out) {
  std::int64_t kp = (k + 1) / 2;
  for (std::int64_t p = 0; p < kp; p += kLanes)
    _mm512_mask_storeu_epi32(out + p, first(kp - p), load32(x + 2 * p, k - 2 * p));
}

// Pairs of two rows, k and k + 1 (hi null past the end of k), for columns [0, n), padded with
// zeros up to `width` (a multiple of 16).
template <class T>
AG_BF16_KERNEL void pack_row_pair(const T* lo, const T* hi, std::int64_t n, std::int64_t width, std::uint32_t* out) {
  for (std::int64_t j = 0; j < width; j += kLanes)
    _mm512_storeu_si512(out + j, load_pairs(lo + j, hi ? hi + j : nullptr, n - j));
}

// The 16 x 16 matrix of 32-bit lanes r[0 .. 16) transposed in place: four rounds of shuffles,
// each pairing lanes twice as far apart as the last.
AG_BF16_KERNEL void transpose16(__m512i r[kLanes]) {
  __m512i t[kLanes];
  for (int i = 0; i < kLanes; i += 2) {  // rows 2i, 2i+1 interleaved: (r0[c], r1[c]) for c in each 128-bit lane
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < kLanes; i += 4) {  // four rows' lane 4L + c in 128-bit lane L of r[i + c]
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // gather column 4L + c's four 128-bit pieces from the four row groups
    __m512i even01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), odd01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
    __m512i even23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88),
            odd23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    t[c] = _mm512_shuffle_i32x4(even01, even23, 0x88);
    t[8 + c] = _mm512_shuffle_i32x4(even01, even23, 0xdd);
    t[4 + c] = _mm512_shuffle_i32x4(odd01, odd23, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(odd01, odd23, 0xdd);
  }
  for (int i = 0; i < kLanes; ++i) r[i] = t[i];
}

// A [m, k] as read, packed so that pair p of row i sits at data[i * row + p * step]. Read 32 bits
// at a time, also where data is A's own bf16 storage (pairs of uint16_t): hence may_alias.
using Pair = std::uint32_t __attribute__((may_alias));
struct PackedA {
  const Pair* data;
  std::int64_t row, step;
};

template <class T>
AG_BF16_KERNEL PackedA pack_a(const blas::Matrix<const T>& a, std::vector<std::uint32_t>& buf) {
  std::int64_t m = a.m(), k = a.n(), kp = (k + 1) / 2;
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    // bf16 rows with an even k, each starting on a pair's boundary, are already pairs: no copy.
    if (!a.transposed && k % 2 == 0 && a.ld % 2 == 0 && reinterpret_cast<std::uintptr_t>(a.data) % sizeof(Pair) == 0)
      return {reinterpret_cast<const Pair*>(a.data), a.ld / 2, 1};
  }
  if (!a.transposed) {  // row i's k values are contiguous: pair by pair along the row
    buf.resize(static_cast<std::size_t>(m * kp));
    for (std::int64_t i = 0; i < m; ++i) pack_pairs(a.data + i * a.ld, k, buf.data() + i * kp);
    return {buf.data(), kp, 1};
  }
  // A = X^T with X [k, m] stored: rows k and k + 1 of X give pair p of every row i at once.
  std::int64_t width = round_up(m, kLanes);
  buf.resize(static_cast<std::size_t>(kp * width));
  for (std::int64_t p = 0; p < kp; ++p) {
    const T* lo = a.data + 2 * p * a.ld;
    pack_row_pair(lo, 2 * p + 1 < k ? lo + a.ld : nullptr, m, width, buf.data() + p * width);
  }
  return {buf.data(), 1, width};
}

// B [k, n] as read, packed as kp rows of `width` pairs: pair p of column j at out[p * width + j].
template <class T>
AG_BF16_KERNEL void pack_b(const blas::Matrix<const T>& b, std::int64_t width, std::vector<std::uint32_t>& buf) {
  std::int64_t k = b.m(), n = b.n(), kp = (k + 1) / 2;
  buf.resize(static_cast<std::size_t>(kp * width));
  if (!b.transposed) {  // rows k and k + 1 side by side, as for a transposed A
    for (std::int64_t p = 0; p < kp; ++p) {
      const T* lo = b.data + 2 * p * b.ld;
      pack_row_pair(lo, 2 * p + 1 < k ? lo + b.ld : nullptr, n, width, buf.data() + p * width);
    }
    return;
  }
  // B = Y^T with Y [n, k] stored (attention's keys): each column's pairs are contiguous in its
  // row of Y. 16 rows of 16 pairs each are a 16 x 16 block of 32-bit lanes, turned on its side.
  for (std::int64_t j = 0; j < width; j += kLanes)
    for (std::int64_t p = 0; p < kp; p += kLanes) {
      __m512i block[kLanes];
      for (int r = 0; r < kLanes; ++r)
        block[r] = j + r < n ? load32(b.data + (j + r) * b.ld + 2 * p, k - 2 * p) : _mm512_setzero_si512();
      transpose16(block);
      for (std::int64_t c = 0; c < std::min<std::int64_t>(kLanes, kp - p); ++c)
        _mm512_storeu_si512(buf.data() + (p + c) * width + j, block[c]);
    }
}

// One tile: rows [0, R) of A's packing against B's 32 packed columns, then
// C = alpha acc + bias + beta C for its `cols` (at most 32) columns.
template <int R>
AG_BF16_KERNEL void tile(const PackedA& a, const std::uint32_t* b, std::int64_t width, std::int64_t kp, float* c,
                         std::int64_t ldc, std::int64_t cols, float beta, float alpha, const float* bias) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < kp; ++p) {
    __m512bh b0, b1;
    __m512i raw0 = _mm512_loadu_si512(b + p * width), raw1 = _mm512_loadu_si512(b + p * width + kLanes);
    std::memcpy(&b0, &raw0, sizeof b0);
    std::memcpy(&b1, &raw1, sizeof b1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512i pair = _mm512_set1_epi32(static_cast<int>(a.data[r * a.row + p * a.step]));
      __m512bh ar;
      std::memcpy(&ar, &pair, sizeof ar);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
  }
  const __mmask16 mask[2] = {first(cols), first(cols - kLanes)};
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) {
      if (!mask[h]) continue;
      float* out = c + r * ldc + h * kLanes;
      __m512 v = _mm512_mul_ps(acc[r][h], va);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[h], bias + h * kLanes));
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[h], out), v);  // C unread when beta is 0
      _mm512_mask_storeu_ps(out, mask[h], v);
    }
}

template <class TA, class TB>
AG_BF16_KERNEL void product(const blas::Matrix<const TA>& a, const blas::Matrix<const TB>& b,
                            const blas::Matrix<float>& c, float beta, float alpha, const float* bias) {
  thread_local std::vector<std::uint32_t> a_buf, b_buf;
  std::int64_t m = c.m(), n = c.n(), kp = (a.n() + 1) / 2, width = round_up(n, kCols);
  PackedA pa = pack_a(a, a_buf);
  pack_b(b, width, b_buf);
  using Tile = void (*)(const PackedA&, const std::uint32_t*, std::int64_t, std::int64_t, float*, std::int64_t,
                        std::int64_t, float, float, const float*);
  static constexpr Tile tiles[kRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>,
                                            tile<5>, tile<6>, tile<7>, tile<8>};
  for (std::int64_t j = 0; j < n; j += kCols)
    for (std::int64_t i = 0; i < m; i += kRows) {
      PackedA rows{pa.data + i * pa.row, pa.row, pa.step};
      tiles[std::min<std::int64_t>(kRows, m - i)](rows, b_buf.data() + j, width, kp, c.data + i * c.ld + j, c.ld,
                                                  std::min<std::int64_t>(kCols, n - j), beta, alpha,
                                                  bias ? bias + j : nullptr);
    }
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef AG_BF16_KERNEL

}  // namespace

bool takes(std::int64_t m, std::int64_t n, std::int64_t k) {
  std::int64_t kp = (k + 1) / 2;
  return m * n * k <= kMaxWork && round_up(m, kLanes) * kp <= kMaxPacked && kp * round_up(n, kCols) <= kMaxPacked &&
         cpu_has_it();
}

template <class TA, class TB>
void gemm(const blas::Matrix<const TA>& a, const blas::Matrix<const TB>& b, const blas::Matrix<float>& c, float beta,
          float alpha, const float* bias) {
  product(a, b, c, beta, alpha, bias);
}

#else  // not x86-64: no AVX512-BF16, so takes() says no and gemm() is never reached

bool takes(std::int64_t, std::int64_t, std::int64_t) { return false; }

template <class TA, class TB>
void gemm(const blas::Matrix<const TA>&, const blas::Matrix<const TB>&, const blas::Matrix<float>&, float, float,
          const float*) {}

#endif

template void gemm<float, float>(const blas::Matrix<const float>&, const blas::Matrix<const float>&,
                                 const blas::Matrix<float>&, float, float, const float*);
template void gemm<float, std::uint16_t>(const blas::Matrix<const float>&, const blas::Matrix<const std::uint16_t>&,
                                         const blas::Matrix<float>&, float, float, const float*);
template void gemm<std::uint16_t, float>(const blas::Matrix<const std::uint16_t>&, const blas::Matrix<const float>&,
                                         const blas::Matrix<float>&, float, float, const float*);
template void gemm<std::uint16_t, std::uint16_t>(const blas::Matrix<const std::uint16_t>&,
                                                 const blas::Matrix<const std::uint16_t>&, const blas::Matrix<float>&,
                                                 float, float, const float*);

}  // namespace ag::bf16::small
