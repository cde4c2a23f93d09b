// The cpu backend's linear and linear_gelu: h = x W^T + b, by bands of rows. The math and the
// forward-mode rules are at the top of ops/fused/linear.cpp; what the bands below buy is measured
// in docs/performance.md. The three products run under the policy the router hands the kernels
// (kernels/products.h): under autocast they take bf16 inputs (W rounded once per step) and add in
// float32; GELU, the bias and db stay float32, GELU to a relative 3e-5 there since its output and
// slope are rounded to bf16 next (fast::normal_bf16).
//
//   x: [rows, in]   W: [out, in]   b: [out]   y, dy: [rows, out]
#include <algorithm>
#include <memory>
#include <vector>

#include "../../runtime/allocator.h"
#include "../../runtime/parallel.h"
#include "blas.h"
#include "fast_math.h"
#include "kernels.h"

namespace ag::backends::cpu {

namespace {

// sum[o] += dy[r, o] over rows r of dy [rows, out]: a bias gradient. float32 is what a
// training step runs, so it is compiled for AVX2 + FMA as well (fast_math.h).
AG_SIMD_CLONES void column_sums(const float* dy, std::int64_t rows, std::int64_t out, float* sum) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) sum[o] += dy[r * out + o];
}
void column_sums(const double* dy, std::int64_t rows, std::int64_t out, double* sum) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) sum[o] += dy[r * out + o];
}

// y = x W^T + b into y [rows, out], by bands of rows; after its product each band is handed to
// `epilogue(first_element, count)` on the same thread. The bias goes with the product
// (Products::gemm_bias: under bf16 oneDNN adds it as it writes y; in float32 the band starts as
// b's rows and the product is added on top). Under bf16 products W is kept rounded whole, and x
// is read from its kept copy, or each band rounds its own rows of x.
template <class T, class Epilogue>
void linear_bands(const Products& products, const LinearSizes& n, const T* x, const T* w, const T* b, T* y,
                  Epilogue epilogue) {
  std::int64_t rows = n.rows, in = n.in, out = n.out;  // named, not bound: lambdas capture them
  if (rows == 0 || out == 0) return;
  blas::Matrix<const T> xs{x, rows, in}, ws{w, out, in};
  blas::Matrix<T> ys{y, rows, out};
  // Too few rows for two bands: one band here, whose product the gemm may split by columns.
  bool split = blas::worth_splitting(rows, out, std::max<std::int64_t>(in, 1)) && rows >= 2 * blas::kBand;
  blas::for_row_bands(blas::detail::to_int(rows), split, [&](int r0, int r1) {
    std::int64_t count = std::int64_t{r1 - r0} * out;
    if (in > 0)
      products.gemm_bias(xs.row_band(r0, r1), ws.t(), ys.row_band(r0, r1), b);
    else if (b)  // an empty sum: the bias alone
      for (int r = r0; r < r1; ++r) std::copy(b, b + out, y + std::int64_t{r} * out);
    else
      std::fill(y + std::int64_t{r0} * out, y + std::int64_t{r0} * out + count, T(0));
    epilogue(std::int64_t{r0} * out, count);
  });
}

// dx, dW and db from g [rows, out]: dx = g W, dW = g^T x, db = column sums of g. dW and db are
// sums over the rows. Split across threads, each band of rows sums its own part (a GEMM over just
// its rows, and its column sums) and the parts are added in band order: each thread then reads
// only the rows of g and x it computed itself, and packs only those. Split instead over dW's
// rows, both threads read every row and pack all of x; the tiny and small GPT steps ran 6 %
// slower that way on two threads.
template <class T>
void backward_blas(const LinearSizes& n, const T* g, const T* x, const T* w, T* dx, T* dw, T* db) {
  std::int64_t rows = n.rows, in = n.in, out = n.out;  // named, not bound: lambdas capture them
  bool full_work = rows * in * out > 0;  // the GEMMs below write every element (beta 0)
  blas::Matrix<const T> gs{g, rows, out}, xs{x, rows, in};
  if (dx) {
    if (full_work)
      blas::gemm(gs, blas::Matrix<const T>{w, out, in}, blas::Matrix<T>{dx, rows, in});
    else
      std::fill(dx, dx + rows * in, T(0));
  }
  if (!dw && !db) return;
  if (dw && !full_work) std::fill(dw, dw + out * in, T(0));
  if (db) std::fill(db, db + out, T(0));
  bool split = blas::worth_splitting(out, in, rows) && rows >= 2 * blas::kBand;
  std::int64_t bands = (rows + blas::kBand - 1) / blas::kBand, chunks = split ? chunk_count(bands, 1) : 1;
  // Band c > 0 sums its dW part into parts[c - 1] (written whole by its GEMM); band 0 into dw.
  std::vector<std::unique_ptr<BlockBuffer<T>>> parts;
  if (dw && full_work)
    for (std::int64_t c = 1; c < chunks; ++c) parts.push_back(std::make_unique<BlockBuffer<T>>(out * in));
  ChunkPartials<T> db_parts(db ? chunks : 0, out);
  auto band = [&](std::int64_t c, std::int64_t r0, std::int64_t r1) {
    if (dw && full_work)  // this band's dW part: g[r0:r1]^T x[r0:r1]
      blas::gemm(gs.row_band(r0, r1).t(), xs.row_band(r0, r1),
                 blas::Matrix<T>{c == 0 ? dw : parts[static_cast<std::size_t>(c - 1)]->data(), out, in});
    if (db) column_sums(g + r0 * out, r1 - r0, out, db_parts[c]);
  };
  if (chunks == 1)
    band(0, 0, rows);  // blas::gemm may still split dW by its rows or columns here
  else
    parallel_for_chunks(bands, 1, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
      band(c, lo * blas::kBand, std::min(rows, hi * blas::kBand));
    });
  if (!parts.empty())
    parallel_for(out * in, 4096, [&](std::int64_t begin, std::int64_t end) {
      for (const auto& part : parts)
        for (std::int64_t j = begin; j < end; ++j) dw[j] += part->data()[j];
    });
  if (db) db_parts.add_to(db);
}

// One pass over g [rows, out], kRows rows at a time while they are in the cache: db's partial
// sums (when db is wanted) and r(g), which both products then read. g is dy itself, or, when
// `slope` is given, dh = dy GELU'(h), made a few rows at a time in a small float32 buffer and
// never stored whole.
constexpr std::int64_t kRows = 8;  // rows per block: 8 x out floats stay in the cache
bf16::Buffer rounded_with_sums(const float* dy, const float* slope, std::int64_t rows, std::int64_t out,
                               bool products_needed, float* db) {
  bf16::Buffer g16 = products_needed ? bf16::uninitialised(rows * out) : bf16::Buffer{};
  std::int64_t blocks = (rows + kRows - 1) / kRows;
  ChunkPartials<float> db_parts(db ? chunk_count(blocks, 1) : 0, out);
  parallel_for_chunks(blocks, 1, [&](std::int64_t c, std::int64_t b0, std::int64_t b1) {
    thread_local std::vector<float> block;  // dh's rows; dy is read where it lies
    if (slope) block.resize(static_cast<std::size_t>(kRows * out));
    for (std::int64_t b = b0; b < b1; ++b) {
      std::int64_t r0 = b * kRows, count = (std::min(rows, r0 + kRows) - r0) * out;
      const float* g = dy + r0 * out;
      if (slope) {
        for (std::int64_t i = 0; i < count; ++i) block[static_cast<std::size_t>(i)] = g[i] * slope[r0 * out + i];
        g = block.data();
      }
      if (db) column_sums(g, count / out, out, db_parts[c]);
      if (products_needed) bf16::convert_here(g, count, g16.data.get() + r0 * out);
    }
  });
  if (db) db_parts.add_to(db);
  return g16;
}

// The backward under bf16 products, float32: one pass rounds g (dy, or dh = dy GELU'(h)) for
// both products and sums db from its float32 values, then dx = r(g) r(W) and dW = r(g)^T r(x),
// each one gemm cutting its own bands (dW by its rows or columns, not by the rows summed over),
// W's copy the one the forward kept, r(x) the forward's copy when it kept one. dx and dW are the
// unfused path's exactly (the same float32 g, rounded the same way); db adds the same values
// grouped by other row blocks than the float32 path's, so it may differ from it in the last bits.
void backward_bf16(const Products& products, const LinearSizes& n, const float* dy, const float* slope, const float* x,
                   const std::uint16_t* x_rounded, const float* w, float* dx, float* dw, float* db) {
  std::int64_t rows = n.rows, in = n.in, out = n.out;  // named, not bound: lambdas capture them
  bool full_work = rows * in * out > 0, products_needed = full_work && (dx || dw);
  if (dx && !full_work) std::fill(dx, dx + rows * in, 0.0f);
  if (dw && !full_work) std::fill(dw, dw + out * in, 0.0f);
  if (db) std::fill(db, db + out, 0.0f);
  if (rows * out == 0) return;
  bf16::Buffer g16 = rounded_with_sums(dy, slope, rows, out, products_needed, db);
  if (!products_needed) return;
  blas::Matrix<const std::uint16_t> gs{g16.data.get(), rows, out};
  if (dx) products.gemm(gs, blas::Matrix<const float>{w, out, in}, blas::Matrix<float>{dx, rows, in});
  blas::Matrix<float> dws{dw, out, in};
  if (dw && x_rounded)
    products.gemm(gs.t(), blas::Matrix<const std::uint16_t>{x_rounded, rows, in}, dws);
  else if (dw)
    products.gemm(gs.t(), blas::Matrix<const float>{x, rows, in}, dws);
}

}  // namespace

template <class T>
void linear(const Products& products, const LinearSizes& n, const T* x, const T* w, const T* b, T* y) {
  linear_bands(products, n, x, w, b, y, [](std::int64_t, std::int64_t) {});
}

// The same with GELU applied to each band as it leaves the product, GELU'(h) kept when asked.
template <class T>
void linear_gelu(const Products& products, const LinearSizes& n, const T* x, const T* w, const T* b, T* y, T* slope,
                 GeluForm form) {
  bool rounded_next = products.in_bf16();  // y and the slope are read rounded to bf16
  linear_bands(products, n, x, w, b, y, [&](std::int64_t first, std::int64_t count) {
    if constexpr (std::is_same_v<T, float>)
      if (rounded_next) return gelu_loop_bf16(y + first, y + first, slope ? slope + first : nullptr, count, form);
    gelu_loop(y + first, y + first, slope ? slope + first : nullptr, count, form);
  });
}

// Under bf16 products (float32) the fused pass above; else g = dy (or dy GELU'(h), made whole
// first) and the BLAS products.
template <class T>
void linear_backward(const Products& products, const LinearSizes& n, const T* dy, const T* slope, const T* x,
                     const std::uint16_t* x_rounded, const T* w, T* dx, T* dw, T* db) {
  if constexpr (std::is_same_v<T, float>)
    if (products.in_bf16()) return backward_bf16(products, n, dy, slope, x, x_rounded, w, dx, dw, db);
  if (!slope) return backward_blas(n, dy, x, w, dx, dw, db);
  BlockBuffer<T> dh(n.rows * n.out);  // dh = dy GELU'(h)
  T* pdh = dh.data();
  parallel_for(n.rows * n.out, 8192, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) pdh[i] = dy[i] * slope[i];
  });
  backward_blas(n, pdh, x, w, dx, dw, db);
}

template void linear(const Products&, const LinearSizes&, const float*, const float*, const float*, float*);
template void linear(const Products&, const LinearSizes&, const double*, const double*, const double*, double*);
template void linear_gelu(const Products&, const LinearSizes&, const float*, const float*, const float*, float*, float*,
                          GeluForm);
template void linear_gelu(const Products&, const LinearSizes&, const double*, const double*, const double*, double*,
                          double*, GeluForm);
template void linear_backward(const Products&, const LinearSizes&, const float*, const float*, const float*,
                              const std::uint16_t*, const float*, float*, float*, float*);
template void linear_backward(const Products&, const LinearSizes&, const double*, const double*, const double*,
                              const std::uint16_t*, const double*, double*, double*, double*);

}  // namespace ag::backends::cpu
