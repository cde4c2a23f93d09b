// linear and linear_gelu. Notation: R = rows (every dim of x but the last, flattened).
//
// linear:  y = x W^T + b      x: [R, in]  W: [out, in]  y: [R, out]
//   dx = dy W          (dy_ro depends on x_ri through W_oi)
//   dW = dy^T x        (summed over the R rows)
//   db = sum_r dy_r
// linear_gelu:  h = x W^T + b,  y = GELU(h);  saved: x, W and GELU'(h)
//   dh = dy GELU'(h), then the three products above with dh in place of dy
// Forward mode, from the tangents of x, W and b (each may be absent):
//   linear:       dy = dx W^T + x dW^T + db
//   linear_gelu:  dh the same, dy = GELU'(h) dh  (the slope backward uses)
//
// The readable twins are in ops/reference/linear.cpp; what the bands below buy is measured in
// docs/performance.md. The three products run under the policy the router hands the kernels
// (ops/route.h, kernels/products.h): under autocast they take bf16 inputs (W rounded once per step)
// and add in float32; GELU, the bias and db stay float32, GELU to a relative 3e-5 there since
// its output and slope are rounded to bf16 next (fast::normal_bf16).
#include <algorithm>

#include "../../autograd/dispatch.h"
#include "../../autograd/forward.h"
#include "../../autograd/grad_mode.h"
#include "../../kernels/cpu/blas.h"
#include "../../kernels/cpu/fast_math.h"
#include "../../runtime/parallel.h"
#include "../autocast.h"
#include "../binary.h"
#include "../elementwise.h"
#include "../nn_ops.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"

namespace ag {

namespace {

void check_linear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same_floating(op, x, weight);
  if (weight.dim() != 2 || x.dim() < 1 || x.shape().back() != weight.size(1))
    throw_invalid(op, "input of shape {} does not fit weight of shape {} (expected [..., {}])", shape_str(x.shape()),
                  shape_str(weight.shape()), weight.dim() == 2 ? weight.size(1) : -1);
  check_vector(op, "bias", bias, weight.size(0), x);
}

Shape linear_shape(const Tensor& x, const Tensor& weight) {
  Shape shape = x.shape();
  shape.back() = weight.size(0);
  return shape;
}

// sum[o] += dy[r, o] over rows r of dy [rows, out]: a bias gradient. float32 is what a
// training step runs, so it is compiled for AVX2 + FMA as well (kernels/cpu/fast_math.h).
AG_SIMD_CLONES void column_sums(const float* dy, std::int64_t rows, std::int64_t out, float* sum) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) sum[o] += dy[r * out + o];
}
void column_sums(const double* dy, std::int64_t rows, std::int64_t out, double* sum) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) sum[o] += dy[r * out + o];
}

// x as linear's backward reads it (detail::Held): the float32 tensor, or under bf16 products only
// its rounded copy, which is all dW = r(dy)^T r(x) reads (the float32 x is then released:
// FastRun::released).
detail::Held whole(const Tensor& x) { return detail::Held(x, nullptr); }

// y = x W^T + b into y [rows, out], by bands of rows; after its product each band is handed to
// `epilogue(first_element, count)` on the same thread. The bias goes with the product
// (Products::gemm_bias: under bf16 oneDNN adds it as it writes y; in float32 the band starts as
// b's rows and the product is added on top). Under bf16 products W is kept rounded whole, and x
// is read from its kept copy, or each band rounds its own rows of x.
template <class T, class Epilogue>
void linear_forward(const Products& products, const Tensor& x, const Tensor& weight, const Tensor& bias, T* py,
                    Epilogue epilogue) {
  std::int64_t in = weight.size(1), out = weight.size(0), rows = rows_of(x);
  if (rows == 0 || out == 0) return;
  blas::Matrix<const T> xs{x.data_ptr<T>(), rows, in}, w{weight.data_ptr<T>(), out, in};
  blas::Matrix<T> ys{py, rows, out};
  const T* pb = bias.defined() ? bias.data_ptr<T>() : nullptr;
  // Too few rows for two bands: one band here, whose product the gemm may split by columns.
  bool split = blas::worth_splitting(rows, out, std::max<std::int64_t>(in, 1)) && rows >= 2 * blas::kBand;
  blas::for_row_bands(blas::detail::to_int(rows), split, [&](int r0, int r1) {
    std::int64_t count = std::int64_t{r1 - r0} * out;
    if (in > 0)
      products.gemm_bias(xs.row_band(r0, r1), w.t(), ys.row_band(r0, r1), pb);
    else if (pb)  // an empty sum: the bias alone
      for (int r = r0; r < r1; ++r) std::copy(pb, pb + out, py + std::int64_t{r} * out);
    else
      std::fill(py + std::int64_t{r0} * out, py + std::int64_t{r0} * out + count, T(0));
    epilogue(std::int64_t{r0} * out, count);
  });
}

// dx, dW and db of y = x W^T + b from dy [rows, out]: dx = dy W, dW = dy^T x, db = column sums
// of dy. dW and db are sums over the rows. Split across threads, each band of rows sums its own
// part (a GEMM over just its rows, and its column sums) and the parts are added in band order:
// each thread then reads only the rows of dy and x it computed itself, and packs only those.
// Split instead over dW's rows, both threads read every row and pack all of x; the tiny and
// small GPT steps ran 6 % slower that way on two threads.
// x may be undefined when dW is not wanted.
std::vector<Tensor> linear_backward_blas(const Tensor& dy, const Tensor& x, const Tensor& w,
                                         const std::vector<bool>& need) {
  std::int64_t in = w.size(1), out = w.size(0), rows = rows_of(dy);
  Tensor dx, dw, db;
  bool full_work = rows * in * out > 0;  // the GEMMs below write every element (beta 0)
  dispatch_floating(dy.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    blas::Matrix<const T> dys{dy.data_ptr<T>(), rows, out}, xs{x.defined() ? x.data_ptr<T>() : nullptr, rows, in};
    if (need[0]) {
      dx = full_work ? empty(x.shape(), dy.dtype()) : zeros(x.shape(), dy.dtype());
      if (full_work)
        blas::gemm(dys, blas::Matrix<const T>{w.data_ptr<T>(), out, in},
                   blas::Matrix<T>{dx.mutable_data_ptr<T>(), rows, in});
    }
    if (!need[1] && !need[2]) return;
    bool split = blas::worth_splitting(out, in, rows) && rows >= 2 * blas::kBand;
    std::int64_t bands = (rows + blas::kBand - 1) / blas::kBand, chunks = split ? chunk_count(bands, 1) : 1;
    std::vector<Tensor> dw_parts(need[1] ? static_cast<std::size_t>(chunks) : 0);
    if (need[1]) {
      dw = full_work ? empty(w.shape(), dy.dtype()) : zeros(w.shape(), dy.dtype());
      dw_parts[0] = dw;
      for (std::size_t c = 1; c < dw_parts.size(); ++c) dw_parts[c] = empty(w.shape(), dy.dtype());
    }
    ChunkPartials<T> db_parts(need[2] ? chunks : 0, out);
    auto band = [&](std::int64_t c, std::int64_t r0, std::int64_t r1) {
      if (need[1] && full_work)  // this band's dW part: dy[r0:r1]^T x[r0:r1]
        blas::gemm(dys.row_band(r0, r1).t(), xs.row_band(r0, r1),
                   blas::Matrix<T>{dw_parts[static_cast<std::size_t>(c)].template mutable_data_ptr<T>(), out, in});
      if (need[2]) column_sums(dys.data + r0 * out, r1 - r0, out, db_parts[c]);
    };
    if (chunks == 1)
      band(0, 0, rows);  // blas::gemm may still split dW by its rows or columns here
    else
      parallel_for_chunks(bands, 1, [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
        band(c, lo * blas::kBand, std::min(rows, hi * blas::kBand));
      });
    if (need[1] && chunks > 1) {
      T* pdw = dw.mutable_data_ptr<T>();
      parallel_for(dw.numel(), 4096, [&](std::int64_t begin, std::int64_t end) {
        for (std::size_t c = 1; c < dw_parts.size(); ++c) {
          const T* part = dw_parts[c].template data_ptr<T>();
          for (std::int64_t j = begin; j < end; ++j) pdw[j] += part[j];
        }
      });
    }
    if (need[2]) {
      db = zeros({out}, dy.dtype());
      db_parts.add_to(db.mutable_data_ptr<T>());
    }
  });
  return {dx, dw, db};
}

// One pass over g [rows, out], kRows rows at a time while they are in the cache: db's partial
// sums (when db is wanted) and r(g), which both products then read. g is dy itself, or, when
// `slope` is given, dh = dy GELU'(h), made a few rows at a time in a small float32 buffer and
// never stored whole.
constexpr std::int64_t kRows = 8;  // rows per block: 8 x out floats stay in the cache
bf16::Buffer rounded_with_sums(const float* dy, const float* slope, std::int64_t rows, std::int64_t out,
                               bool products_needed, Tensor& db) {
  bf16::Buffer g16 = products_needed ? bf16::uninitialised(rows * out) : bf16::Buffer{};
  std::int64_t blocks = (rows + kRows - 1) / kRows;
  ChunkPartials<float> db_parts(db.defined() ? chunk_count(blocks, 1) : 0, out);
  parallel_for_chunks(blocks, 1, [&](std::int64_t c, std::int64_t b0, std::int64_t b1) {
    thread_local std::vector<float> block;  // dh's rows; dy is read where it lies
    if (slope) block.resize(static_cast<std::size_t>(kRows * out));
    for (std::int64_t b = b0; b < b1; ++b) {
      std::int64_t r0 = b * kRows, n = (std::min(rows, r0 + kRows) - r0) * out;
      const float* g = dy + r0 * out;
      if (slope) {
        for (std::int64_t i = 0; i < n; ++i) block[i] = g[i] * slope[r0 * out + i];
        g = block.data();
      }
      if (db.defined()) column_sums(g, n / out, out, db_parts[c]);
      if (products_needed) bf16::convert_here(g, n, g16.data.get() + r0 * out);
    }
  });
  if (db.defined()) db_parts.add_to(db.mutable_data_ptr<float>());
  return g16;
}

// The backward of linear (no `slope`) or linear_gelu (`slope` = GELU'(h)) under bf16 products,
// float32 tensors: one pass rounds g (dy, or dh = dy GELU'(h)) for both products and sums db from
// its float32 values, then dx = r(g) r(W) and dW = r(g)^T r(x), each one gemm cutting its own
// bands (dW by its rows or columns, not by the rows summed over), W's copy the one the forward
// kept, r(x) the forward's copy when it kept one. dx and dW are the unfused path's exactly (the
// same float32 g, rounded the same way); db adds the same values grouped by other row blocks than
// the float32 path's, so it may differ from it in the last bits.
std::vector<Tensor> linear_backward_bf16(const Products& products, const Tensor& dy, const detail::Held& x,
                                         const Tensor& w, const Tensor& slope, const std::vector<bool>& need) {
  std::int64_t in = w.size(1), out = w.size(0), rows = rows_of(dy);
  bool full_work = rows * in * out > 0, products_needed = full_work && (need[0] || need[1]);
  Tensor dx, dw, db;
  if (need[0]) dx = full_work ? empty(x.shape(), kFloat32) : zeros(x.shape(), kFloat32);
  if (need[1]) dw = full_work ? empty(w.shape(), kFloat32) : zeros(w.shape(), kFloat32);
  if (need[2]) db = zeros({out}, kFloat32);
  if (rows * out == 0) return {dx, dw, db};
  bf16::Buffer g16 = rounded_with_sums(dy.const_data_ptr<float>(),
                                       slope.defined() ? slope.const_data_ptr<float>() : nullptr, rows, out,
                                       products_needed, db);
  if (!products_needed) return {dx, dw, db};
  blas::Matrix<const std::uint16_t> gs{g16.data.get(), rows, out};
  if (need[0])
    products.gemm(gs, blas::Matrix<const float>{w.const_data_ptr<float>(), out, in},
                  blas::Matrix<float>{dx.mutable_data_ptr<float>(), rows, in});
  blas::Matrix<float> dws{need[1] ? dw.mutable_data_ptr<float>() : nullptr, out, in};
  if (need[1] && x.rounded())
    products.gemm(gs.t(), blas::Matrix<const std::uint16_t>{x.rounded()->data.get(), rows, in}, dws);
  else if (need[1])
    products.gemm(gs.t(), blas::Matrix<const float>{x.get().const_data_ptr<float>(), rows, in}, dws);
  return {dx, dw, db};
}

// dx, dW and db under the forward's product policy.
std::vector<Tensor> linear_backward(const Products& products, const Tensor& dy, const detail::Held& x, const Tensor& w,
                                    const std::vector<bool>& need) {
  return products.in_bf16() ? linear_backward_bf16(products, dy, x, w, Tensor{}, need)
                            : linear_backward_blas(dy, x.get(), w, need);
}

// linear_gelu's backward: dh = dy GELU'(h), with GELU'(h) saved by the forward pass as `slope`,
// then linear's.
std::vector<Tensor> linear_gelu_backward(const Products& products, const Tensor& dy, const detail::Held& x,
                                         const Tensor& w, const Tensor& slope, const std::vector<bool>& need) {
  if (products.in_bf16() && dy.dtype() == kFloat32) return linear_backward_bf16(products, dy, x, w, slope, need);
  Tensor dh = empty_like(slope);
  dispatch_floating(dy.dtype(), "linear_gelu", [&](auto tag) {
    using T = decltype(tag);
    const T *pdy = dy.data_ptr<T>(), *ps = slope.data_ptr<T>();
    T* pdh = dh.mutable_data_ptr<T>();
    parallel_for(dh.numel(), 8192, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) pdh[i] = pdy[i] * ps[i];
    });
  });
  return linear_backward(products, dh, x, w, need);
}

// The tangent of h = x W^T + b from the tangents of x, W and b (undefined where absent).
Tensor linear_tangent(const Tensor& x, const Tensor& weight, const std::vector<Tensor>& t) {
  Tensor h;
  auto add_term = [&h](const Tensor& term) { h = h.defined() ? h + term : term; };
  if (t[0].defined()) add_term(linear(t[0], weight));
  if (t[1].defined()) add_term(linear(x, t[1]));
  if (t[2].defined()) add_term(h.defined() ? t[2] : broadcast_to(t[2], linear_shape(x, weight)));
  return h;
}

// Forward over reverse: linear's backward is bilinear in dy and (x, W), so its tangent is the
// same products with one factor moved at a time:
//   dx = dy W      ->  d(dx) = d(dy) W + dy dW
//   dW = dy^T x    ->  d(dW) = d(dy)^T x + dy^T dx
//   db = sum dy    ->  d(db) = sum d(dy)
std::vector<Tensor> linear_gradient_tangent(const Products& products, const Tensor& dy, const Tensor& dy_t,
                                            const Tensor& x, const Tensor& w, const Tensor& x_t, const Tensor& w_t,
                                            const std::vector<bool>& need) {
  std::vector<Tensor> r(3);
  if (dy_t.defined()) r = linear_backward(products, dy_t, whole(x), w, need);
  std::vector<bool> second{need[0] && w_t.defined(), need[1] && x_t.defined(), false};
  if (second[0] || second[1]) {
    std::vector<Tensor> s =
        linear_backward(products, dy, whole(x_t.defined() ? x_t : x), w_t.defined() ? w_t : w, second);
    for (std::size_t i : {0u, 1u})
      if (second[i]) r[i] = r[i].defined() ? r[i] + s[i] : s[i];
  }
  return r;
}

// The fused forwards, W kept rounded for backward under bf16 products (one copy per parameter
// version, ops/autocast.h). There, with a backward to come, x is rounded whole once: the
// forward's bands read that copy, backward's dW reads it again, and the node keeps no float32 x
// (FastRun::released), so a saved activation costs half its float32 size and is rounded once.
// What reads x itself (a backward with create_graph, a forward-mode rule) reaches it through
// Held::get().
struct SavedInput {
  Products forward;  // the policy the forward's products run under (x's copy kept too)
  detail::Held x;    // what backward reads
};
SavedInput save_input(const Products& products, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Products forward = products;
  if (!products.in_bf16() || x.numel() == 0 || !detail::may_release_inputs({x, weight, bias}))
    return {forward, whole(x)};
  std::shared_ptr<const bf16::Buffer> copy = detail::keep_rounded(forward, x);
  return {forward, detail::Held(x, std::move(copy))};
}

FastRun linear_fast(Products products, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::keep_rounded(products, weight);
  SavedInput in = save_input(products, x, weight, bias);
  Tensor y = detail::empty_for("linear", linear_shape(x, weight), x.dtype());
  dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    linear_forward<T>(in.forward, x, weight, bias, y.mutable_data_ptr<T>(), [](std::int64_t, std::int64_t) {});
  });
  auto backward = [products, x = in.x, weight](const Tensor& dy, const std::vector<bool>& need) {
    return linear_backward(products, dy, x, weight, need);
  };
  auto tangent = [held = in.x, weight](const std::vector<Tensor>& t) { return linear_tangent(held.get(), weight, t); };
  auto gradient_tangent = [products, held = in.x, weight](const Tensor& dy, const Tensor& dy_t,
                                                             const std::vector<Tensor>& in_t,
                                                             const std::vector<bool>& need) {
    return linear_gradient_tangent(products, dy, dy_t, held.get(), weight, in_t[0], in_t[1], need);
  };
  FastRun run{y, backward, Saved{x, weight}, Tensor(), tangent, gradient_tangent};
  if (in.x.rounded()) run.released = {in.x.rounded(), nullptr, nullptr};
  return run;
}

// The same with GELU applied to each band as it leaves the product, GELU'(h) saved for backward.
FastRun linear_gelu_fast(Products products, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         GeluApproximation approximate) {
  detail::keep_rounded(products, weight);
  SavedInput in = save_input(products, x, weight, bias);
  bool need_slope =
      (is_grad_enabled() && (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()))) ||
      detail::any_tangent({x, weight, bias});
  Tensor y = detail::empty_for("linear_gelu", linear_shape(x, weight), x.dtype()),
         slope = need_slope ? empty_like(y) : Tensor();
  dispatch_floating(x.dtype(), "linear_gelu", [&](auto tag) {
    using T = decltype(tag);
    T *py = y.mutable_data_ptr<T>(), *ps = need_slope ? slope.mutable_data_ptr<T>() : nullptr;
    bool rounded_next = in.forward.in_bf16();  // y and the slope are read rounded to bf16
    linear_forward<T>(in.forward, x, weight, bias, py, [&](std::int64_t first, std::int64_t count) {
      if constexpr (std::is_same_v<T, float>)
        if (rounded_next)
          return detail::gelu_loop_bf16(py + first, py + first, ps ? ps + first : nullptr, count, approximate);
      detail::gelu_loop(py + first, py + first, ps ? ps + first : nullptr, count, approximate);
    });
  });
  auto backward = [products, x = in.x, weight, slope](const Tensor& dy, const std::vector<bool>& need) {
    return linear_gelu_backward(products, dy, x, weight, slope, need);
  };
  auto tangent = [held = in.x, weight, slope](const std::vector<Tensor>& t) {
    return slope * linear_tangent(held.get(), weight, t);
  };
  // Forward over reverse: dh = dy GELU'(h) moves with dy and with h, then linear's rule.
  auto gradient_tangent = [products, held = in.x, weight, bias, slope, approximate](
                              const Tensor& dy, const Tensor& dy_t, const std::vector<Tensor>& in_t,
                              const std::vector<bool>& need) {
    Tensor x = held.get();
    Tensor dh = dy * slope, dh_t = dy_t.defined() ? dy_t * slope : Tensor();
    Tensor h_t = linear_tangent(x, weight, in_t);
    if (h_t.defined()) {
      Tensor second = dy * detail::gelu_curvature(linear(x, weight, bias), approximate) * h_t;
      dh_t = dh_t.defined() ? dh_t + second : second;
    }
    return linear_gradient_tangent(products, dh, dh_t, x, weight, in_t[0], in_t[1], need);
  };
  FastRun run{y, backward, Saved{x, weight, slope}, Tensor(), tangent, gradient_tangent};
  if (in.x.rounded()) run.released = {in.x.rounded(), nullptr, nullptr};
  return run;
}

}  // namespace

// Both ops: the three products of x W^T + b may take bf16 inputs.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear("linear", x, weight, bias);
  RoutedOp op{.name = "linear", .kernel = KernelOp::Linear, .bf16_products = true, .inputs = {x, weight, bias}};
  op.reference = [](const std::vector<Tensor>& in) -> Routed { return {reference::linear(in[0], in[1], in[2])}; };
  op.fast = [&](const Products& products) { return linear_fast(products, x, weight, bias); };
  return route(op).output;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) {
  check_linear("linear_gelu", x, weight, bias);
  RoutedOp op{
      .name = "linear_gelu", .kernel = KernelOp::LinearGelu, .bf16_products = true, .inputs = {x, weight, bias}};
  op.reference = [approximate](const std::vector<Tensor>& in) -> Routed {
    return {reference::linear_gelu(in[0], in[1], in[2], approximate)};
  };
  op.fast = [&](const Products& products) { return linear_gelu_fast(products, x, weight, bias, approximate); };
  return route(op).output;
}

}  // namespace ag
