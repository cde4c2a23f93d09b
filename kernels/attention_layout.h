// How attention's kernels see their operands, in every backend: the sizes, where one (batch,
// head) matrix lives inside a 4-d buffer, and which keys a query may attend to. The formulas are
// in kernels/cpu/attention_tiles.h; the op is ops/fused/attention.cpp.
#pragma once

#include <cstdint>

namespace ag::attention_kernels {

// Sizes: batch, heads, queries, keys, the q/k dim and the v dim.
struct Dims {
  std::int64_t b, h, tq, tk, d, dv;
};

// Where the matrix of one (batch, head) pair lives inside a 4-d tensor: rows `ld` elements
// apart, starting at b * batch + h * head. [B, H, T, d] and [B, T, H, d] differ only in these
// numbers, so the kernels below serve both layouts without copying.
struct View {
  std::int64_t batch, head, ld;
  std::int64_t at(std::int64_t b, std::int64_t h) const { return b * batch + h * head; }
};

inline View heads_first(std::int64_t h, std::int64_t t, std::int64_t d) {
  return {h * t * d, t * d, d};
}  // [B, H, T, d]
inline View heads_last(std::int64_t h, std::int64_t t, std::int64_t d) {
  return {t * h * d, d, h * d};
}  // [B, T, H, d]

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

}  // namespace ag::attention_kernels
