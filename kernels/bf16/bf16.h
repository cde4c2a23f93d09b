// bfloat16 ("brain float"): a float32 with its mantissa cut from 23 bits to 7. It keeps float32's
// 8 exponent bits, so it holds the same range (1e-38 .. 3e38) with about 2-3 significant decimal
// digits: the spacing of bf16 numbers just above 1 is 2^-7 = 0.0078.
//
//   float32  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm      bf16  s eeeeeeee mmmmmmm
//
// A bf16 value is the top 16 bits of a float32, so converting back is a shift. Converting to
// bf16 rounds to nearest, ties to even, like any float32 operation.
//
// attograd uses bf16 only for the inputs of matrix products under ag::AutocastGuard
// (ops/autocast.h): the products multiply bf16 numbers and add in float32, on the CPU's bf16
// unit (AMX tiles or AVX512-BF16 dot products) through oneDNN, or for small ones through
// attograd's own AVX512-BF16 kernel (bf16_small.h). docs/mixed_precision.md says what
// that costs in accuracy and why everything else stays float32.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "../cpu/blas.h"

namespace ag::bf16 {

// float32 -> bf16, rounded to nearest even. A NaN stays a (quiet) NaN; a value past bf16's
// largest rounds to infinity, as float32 arithmetic would.
inline std::uint16_t from_float(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // add just under half a step; the odd half-way case rounds up
  return static_cast<std::uint16_t>(u >> 16);
}

inline float to_float(std::uint16_t b) {
  std::uint32_t u = std::uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// f as bf16 would hold it: what a value loses by being stored in bf16.
inline float round(float f) { return to_float(from_float(f)); }

// dst[i] = from_float(src[i]) for n values, across the thread pool when n is large, with the
// CPU's own conversion instruction where it has one (AVX512-BF16's, which also flushes float32
// subnormals, below 1.2e-38, to zero).
void convert(const float* src, std::int64_t n, std::uint16_t* dst);
// The same on the calling thread alone, for a loop already split across the pool.
void convert_here(const float* src, std::int64_t n, std::uint16_t* dst);
// And back, exactly: dst[i] = to_float(src[i]) for n values, across the pool when n is large.
void widen(const std::uint16_t* src, std::int64_t n, float* dst);

// A bf16 copy of a float32 matrix or tensor, contiguous. Its memory comes from the tensors'
// block cache (runtime/allocator.h): a training step's copies, the same sizes every step, then
// cost no page faults after the first.
struct BlockFree {
  std::size_t nbytes = 0;
  void operator()(std::uint16_t* p) const;
};
struct Buffer {
  std::unique_ptr<std::uint16_t[], BlockFree> data;
  std::int64_t size = 0;
};
Buffer convert(const float* src, std::int64_t n);
// n bf16 values from the block cache, not yet written.
Buffer uninitialised(std::int64_t n);

// Whether bf16 matrix products can run here, on which unit, and if not, why not.
struct Support {
  bool available = false;
  std::string unit;    // "AMX" or "AVX512-BF16" when available
  std::string reason;  // one line: what was found, or what is missing
};
// Computed once: oneDNN present in this build, and a CPU with a bf16 unit (AMX or AVX512-BF16;
// oneDNN's ISA detection, which honours ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA).
const Support& support();

// The capacity of oneDNN's process-wide primitive cache as oneDNN reports it now, for tests; -1
// in a build without oneDNN. The products keep their primitives per thread, each thread its own
// (bf16.cpp says why sharing them races on AMX CPUs), so the library switches that cache off,
// for the whole process, before it makes its first primitive (in support() or the first
// product), whatever ONEDNN_PRIMITIVE_CACHE_CAPACITY says: from then on this is 0. Before that,
// or where support() found no bf16 unit and so made no primitive, it is oneDNN's own value
// (1024 unless that variable says otherwise).
int onednn_primitive_cache_capacity();

// C = alpha op(A) op(B) + beta C with bf16 A and B and float32 C, accumulated in float32: the
// views are read exactly like blas::gemm's (row-major, strided, transposed for free). Cut into
// bands of C across the thread pool like blas::gemm when large and not already inside a
// parallel_for. Small products (bf16_small.h: attention's tiles) run on attograd's own
// AVX512-BF16 kernel, the rest on oneDNN's matmul. With a bias (n float32 values, n = C's
// columns), bias[j] is added to every row's column j as C is written: C = op(A) op(B) + bias +
// beta C, in one pass over C; alpha must then be 1 (oneDNN would scale the bias with the
// product), else std::invalid_argument.
// Throws std::runtime_error (support().reason) where bf16 cannot run.
void gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c,
          float beta = 0.0f, float alpha = 1.0f, const float* bias = nullptr);
// The same with float32 operands, each rounded to bf16 first (into a per-thread scratch buffer,
// only the rows and columns the view reads). Either operand may already be bf16.
void gemm(blas::Matrix<const float> a, blas::Matrix<const float> b, blas::Matrix<float> c, float beta = 0.0f,
          float alpha = 1.0f, const float* bias = nullptr);
void gemm(blas::Matrix<const float> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c, float beta = 0.0f,
          float alpha = 1.0f, const float* bias = nullptr);
void gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const float> b, blas::Matrix<float> c, float beta = 0.0f,
          float alpha = 1.0f, const float* bias = nullptr);

}  // namespace ag::bf16
