// A backend: the kernels one kind of machine runs, as a table of plain functions on buffers.
//
// An op (ops/) checks its arguments, allocates its outputs and records its backward; to compute,
// it calls the kernels of the backend the router chose for this call (ops/route.h), through the
// table below. A backend is a folder and one of these tables:
//
//   kernels/cpu/     the fast kernels: OpenBLAS products, SIMD loops, the thread pool, tiled attention;
//                    under autocast their products take bf16 inputs (kernels/bf16/, oneDNN)
//   kernels/naive/   every kernel a GPT training step needs as plain loops on one thread, the way
//                    a reader would write them first: no BLAS, no SIMD, no threads, no tiles
//
// Every kernel knows only pointers and sizes. Layouts are row-major and contiguous unless a view
// says otherwise (attention's Layouts). A pointer an entry documents as optional may be null,
// meaning "none" for an input and "not wanted" for an output; every element of an output that is
// asked for is written. An entry a backend leaves null (only those marked "optional") is not
// served by it, and the op computes that part through its reference instead.
//
// `products` is the matrix-product policy of the call (kernels/products.h): a backend whose
// table says bf16_products = false is only ever handed the plain policy.
//
// Random draws are not kernels: dropout's mask and the initial weights come from ag::Generator in
// the op, the same numbers on every backend, so that the three routes train on the same masks
// (tests/nn/kernels_equal_test.cpp trains with dropout). A backend is handed the drawn mask,
// never a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "attention_layout.h"

namespace ag {
class Products;  // kernels/products.h: the matrix-product policy, handed to the entries that multiply
}

namespace ag::backends {

// The two forms of GELU: x Phi(x), and GPT-2's tanh approximation of it.
enum class GeluForm { Exact, Tanh };

// linear's sizes: x [rows, in], W [out, in], y [rows, out].
struct LinearSizes {
  std::int64_t rows, in, out;
};

// swiglu's sizes: x [rows, in], W1 and W3 [hidden, in], W2 [out, hidden], y [rows, out].
struct SwigluSizes {
  std::int64_t rows, in, hidden, out;
};

// One Adam or AdamW step's settings. `step` counts from 1; decoupled = AdamW (the decay shrinks
// w directly), otherwise the decay is added to the gradient (L2).
struct AdamSettings {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  std::int64_t step;
};

// One SGD step's settings, PyTorch's torch.optim.SGD. `first`: the momentum buffer is new, and
// takes the step's direction itself rather than a blend with its zeros.
struct SgdSettings {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first;
};

// matmul's sizes for one product C = op(A) op(B): op(A) is [m, k], op(B) [k, n], C [m, n]. Each
// matrix is stored whole, row-major; A is stored [m, k], or [k, m] and read transposed when
// trans_a (B likewise: [k, n], or [n, k] when trans_b).
struct ProductSizes {
  std::int64_t m, n, k;
  bool trans_a, trans_b;
};

// The elementwise functions of ops/elementwise.cpp (gelu, which has a fused kernel, is apart).
enum class Unary { Neg, Pow, Exp, Log, Sqrt, Tanh, Sigmoid, Erfc, Relu, Abs };

// The arithmetic ops of ops/binary.cpp: the four operations, and maximum and minimum (the larger
// or smaller of a and b; a NaN in either wins, as in PyTorch; on a tie, b).
enum class Arithmetic { Add, Sub, Mul, Div, Maximum, Minimum };

// The two logical ops of ops/masking.cpp on bool elements: Not reads a alone.
enum class Logical { Not, And };

// The six comparisons of ops/binary.cpp, each giving a bool: ==, !=, <, <=, >, >=.
enum class Comparison { Eq, Ne, Lt, Le, Gt, Ge };

// The element types convert moves between, one for each of ag::DType's (autograd/dtype.h), in
// its order: float, double, std::int64_t, bool.
enum class Scalar { Float32, Float64, Int64, Bool };

// Calls f with a value of s's C++ type (float{}, double{}, std::int64_t{} or bool{}): how an
// entry that takes a Scalar reaches a loop written once for every element type.
template <class F>
void with_element(Scalar s, F&& f) {
  switch (s) {
    case Scalar::Float32: return f(float{});
    case Scalar::Float64: return f(double{});
    case Scalar::Int64: return f(std::int64_t{});
    case Scalar::Bool: return f(bool{});
  }
}

// A broadcast loop's sizes: the shape it runs over (`rank` dims, row-major), and for each of its
// inputs the stride of each of those dims in that input: 0 along a dim the input lacks or has
// size 1 in, so every element of the shape maps to one element of the input.
struct BroadcastSizes {
  std::size_t rank;
  const std::int64_t* shape;
  const std::int64_t* a_strides;
  const std::int64_t* b_strides;  // only for arithmetic and compare
};

// A tensor seen along one dim as [outer, n, inner] (ops/dim_layout.h): outer is the product of
// the sizes before the dim, inner of those after it, and element (o, k, i) sits at
// (o * n + k) * inner + i. Reducing over k leaves [outer, inner], element (o, i) at o * inner + i.
struct DimSizes {
  std::int64_t outer, n, inner;
};

// The number of elements of n's shape. A shape with a 0 holds none, whatever its other sizes
// (which may multiply past int64 on their own), so their product is never formed; otherwise it
// is the size of a buffer that exists, and every partial product fits.
inline std::int64_t element_count(const BroadcastSizes& n) {
  for (std::size_t d = 0; d < n.rank; ++d)
    if (n.shape[d] == 0) return 0;
  std::int64_t total = 1;
  for (std::size_t d = 0; d < n.rank; ++d) total *= n.shape[d];
  return total;
}

// copy_along's sizes: the source and the destination each seen around the same dim as
// [outer, n, inner] (DimSizes), with their own n, and `element` bytes an element.
struct CopySizes {
  std::int64_t outer, inner, element;
  std::int64_t dst_n, dst_begin, dst_step;
  std::int64_t src_n, src_begin, src_step;
  std::int64_t count;
};

// permute's sizes: y's shape (`rank` dims, row-major), and for each of y's dims how far a step
// along it moves in x, in elements of `element` bytes.
struct PermuteSizes {
  std::size_t rank;
  const std::int64_t* shape;
  const std::int64_t* x_strides;
  std::int64_t element;
};

template <class T>
struct Table {
  // --- the elementwise functions (ops/elementwise.cpp): y[i] = f(x[i]) for i < n, f named by op:
  //   Neg -x,  Pow x^p,  Exp e^x,  Log ln x,  Sqrt,  Tanh,  Sigmoid 1 / (1 + e^-x),  Erfc,
  //   Relu max(x, 0) (NaN passes through),  Abs |x|.   p is Pow's exponent; the others ignore it.
  void (*unary)(Unary op, double p, std::int64_t n, const T* x, T* y);
  // Their backward, dx[i] = dy[i] f'(i), with f' from what the op saved, its input x or its
  // output y:   Neg -1,  Pow p x^(p-1) (0 for p = 0),  Exp y,  Log 1 / x,  Sqrt 1 / (2y),
  //   Tanh 1 - y^2,  Sigmoid y (1 - y),  Erfc -2/sqrt(pi) e^(-x^2),  Relu 1 for x > 0, else 0,
  //   Abs 1 for x > 0, -1 for x < 0, else 0 (at the kink, and for NaN).
  // f' is computed in T, but Pow's and Erfc's in double, and rounded to T before the product.
  void (*unary_backward)(Unary op, double p, std::int64_t n, const T* saved, const T* dy, T* dx);

  // --- add, sub, mul, div with broadcasting (ops/binary.cpp): for every element o of the shape,
  //   y[o] = a[ia] op b[ib],   ia and ib: o's coordinates times a_strides and b_strides
  // y may be a itself when a's strides are its plain row-major ones: the backward pass adds one
  // gradient into another that way (autograd/engine.cpp).
  void (*arithmetic)(Arithmetic op, const BroadcastSizes& n, const T* a, const T* b, T* y);
  // broadcast_to: y[o] = x[ix], ix through a_strides. And its adjoint, sum_to: for every element
  // o of the shape, y[iy] += g[o], iy through a_strides (y zero-filled by the caller).
  void (*broadcast)(const BroadcastSizes& n, const T* x, T* y);
  void (*sum_broadcast)(const BroadcastSizes& n, const T* g, T* y);

  // --- along one dim of the [outer, n, inner] view (ops/reduce.cpp, ops/softmax.cpp):
  //   sum_dim      y[o, i] = sum_k x[o, k, i]   (summed in double)
  //   max_dim      y[o, i] = x[o, k*, i] and index[o, i] = k*: the first k with the largest value,
  //                a NaN beating any number (as in PyTorch). n >= 1.
  //   take_along   y[o, i] = x[o, index[o, i], i]                 (the winners' values, or tangents)
  //   put_along    y[o, index[o, i], i] = x[o, i]                  (y zero-filled by the caller)
  void (*sum_dim)(const DimSizes& n, const T* x, T* y);
  void (*max_dim)(const DimSizes& n, const T* x, T* y, std::int64_t* index);
  void (*take_along)(const DimSizes& n, const T* x, const std::int64_t* index, T* y);
  void (*put_along)(const DimSizes& n, const T* x, const std::int64_t* index, T* y);
  // The indexing ops (ops/indexing.cpp): x seen as [outer, n, inner], the result and `index` as
  // [outer, m, inner] (gather, scatter_add) or index as [m] (index_add; index_select, which
  // moves bytes, is with the moves), every index in 0..n-1 (the op checked them):
  //   gather        y[o, j, i] = x[o, index[o, j, i], i]
  //   scatter_add   y[o, index[o, j, i], i] += src[o, j, i]      (y holds self's values already)
  //   index_add     y[o, index[j], i] += src[o, j, i]             (y holds self's values already)
  // A position that several indices name gets each of their values added, in the order of j.
  void (*gather)(const DimSizes& n, std::int64_t m, const T* x, const std::int64_t* index, T* y);
  void (*scatter_add)(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y);
  void (*index_add)(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y);
  // softmax along k, y = exp(x - m) / sum_k exp(x - m) with m = max_k x, or when `log`,
  // y = x - m - ln sum_k exp(x - m): exp in T, the sum in double. A row whose every value is -inf
  // has no distribution: it gets zeros (softmax) or -inf (log). Returns whether some row did.
  bool (*softmax)(const DimSizes& n, bool log, const T* x, T* y);
  // dead[o, k, i] = true along every row of y whose values are all -inf (dead zero-filled by the
  // caller); returns whether there was one.
  bool (*dead_rows)(const DimSizes& n, const T* y, bool* dead);

  // --- masked_fill (ops/masking.cpp), on n values: y[i] = mask[i] ? value : x[i]
  void (*masked_fill)(std::int64_t n, const T* x, const bool* mask, double value, T* y);
  // --- where (ops/masking.cpp), on n values: y[i] = cond[i] ? a[i] : b[i]
  void (*where)(std::int64_t n, const bool* cond, const T* a, const T* b, T* y);

  // --- matmul (ops/matmul.cpp): one product of a batch, C = op(A) op(B), C written whole.
  //   C[i, j] = sum_p op(A)[i, p] op(B)[p, j]
  void (*matmul)(const Products& products, const ProductSizes& n, const T* a, const T* b, T* c);

  // --- linear (ops/fused/linear.cpp):  h = x W^T + b
  // y = h. b optional.
  void (*linear)(const Products& products, const LinearSizes& n, const T* x, const T* w, const T* b, T* y);
  // y = GELU(h), slope = GELU'(h) (optional: kept for backward). b optional.
  void (*linear_gelu)(const Products& products, const LinearSizes& n, const T* x, const T* w, const T* b, T* y,
                      T* slope, GeluForm form);
  // From dy [rows, out]: with g = dy, or g = dy * slope when slope is given (linear_gelu),
  //   dx = g W,   dw = g^T x,   db = column sums of g        (each optional)
  // x is read only for dw; under a bf16 policy (T = float) x_rounded, when given, is x's bf16
  // copy and is read in its place.
  void (*linear_backward)(const Products& products, const LinearSizes& n, const T* dy, const T* slope, const T* x,
                          const std::uint16_t* x_rounded, const T* w, T* dx, T* dw, T* db);

  // --- swiglu (ops/fused/swiglu.cpp): the MLP of LLaMA-style models, without biases.
  //   h1 = x W1^T,   h3 = x W3^T,   a = silu(h1) h3,   y = a W2^T,      silu(v) = v sigmoid(v)
  // h1 and h3 [rows, hidden] are written for backward (optional: not kept).
  void (*swiglu)(const Products& products, const SwigluSizes& n, const T* x, const T* w1, const T* w3, const T* w2,
                 T* y, T* h1, T* h3);
  // From dy [rows, out], with the forward's h1 and h3 (a recomputed from them):
  //   da = dy W2,   dW2 = dy^T a
  //   dh3 = da silu(h1),   dh1 = da h3 silu'(h1),   silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v)))
  //   dx = dh1 W1 + dh3 W3,   dW1 = dh1^T x,   dW3 = dh3^T x
  // dx, dw1, dw3, dw2 each optional.
  void (*swiglu_backward)(const Products& products, const SwigluSizes& n, const T* dy, const T* x, const T* w1,
                          const T* w3, const T* w2, const T* h1, const T* h3, T* dx, T* dw1, T* dw3, T* dw2);

  // --- gelu (ops/fused/gelu.cpp): y = GELU(x) and slope = GELU'(x) (optional) on n values.
  void (*gelu)(std::int64_t n, const T* x, T* y, T* slope, GeluForm form);
  // Optional: out = GELU''(x) on n values, what the slope's tangent needs (forward over reverse
  // and create_graph through gelu and linear_gelu). Null: those ops differentiate their reference.
  void (*gelu_curvature)(std::int64_t n, const T* x, T* out, GeluForm form);

  // --- layer_norm over rows of d values (ops/fused/layer_norm.cpp). w, b optional (1 and 0).
  // mean and rstd (per row, float64) are written for backward.
  void (*layer_norm)(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, const T* b, T* y,
                     double* mean, double* rstd);
  // dx, dw, db (each optional) from dy, with xhat recomputed from mean and rstd.
  void (*layer_norm_backward)(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* mean,
                              const double* rstd, const T* dy, T* dx, T* dw, T* db);

  // --- rms_norm over rows of d values (ops/fused/rms_norm.cpp). w optional; rrms per row.
  void (*rms_norm)(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, T* y, double* rrms);
  void (*rms_norm_backward)(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* rrms, const T* dy,
                            T* dx, T* dw);

  // --- embedding (ops/fused/nn_ops.cpp): y[p, :] = w[ids[p], :] for `positions` ids into a
  // table of `dim` columns; backward scatters dy's rows into dw [vocab, dim] (written whole).
  void (*embedding)(std::int64_t positions, std::int64_t dim, const T* w, const std::int64_t* ids, T* y);
  void (*embedding_backward)(std::int64_t positions, std::int64_t dim, std::int64_t vocab, const std::int64_t* ids,
                             const T* dy, T* dw);

  // --- cross_entropy over rows of `classes` logits (ops/fused/nn_ops.cpp). Rows whose target is
  // ignore_index are skipped. Writes each counted row's log-sum-exp into lse and returns the sum
  // over counted rows of (lse - x[target]).
  double (*cross_entropy)(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                          std::int64_t ignore_index, double* lse);
  // dx = g (softmax(x) - onehot(target)) on counted rows, 0 on ignored ones; softmax is
  // exp(x - lse). g is dloss / (the number of counted rows).
  void (*cross_entropy_backward)(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                                 std::int64_t ignore_index, const double* lse, double g, T* dx);
  // Optional: forward mode. The loss's tangent times the number of counted rows, from the
  // logits' tangent dx:  sum over counted rows r of (sum_c p_rc dx_rc - dx_{r, target_r}).
  // Null: the op takes its reference's tangent (and the next entry is not used either).
  double (*cross_entropy_jvp)(std::int64_t rows, std::int64_t classes, const T* x, const T* dx,
                              const std::int64_t* targets, std::int64_t ignore_index, const double* lse);
  // Optional: forward over reverse, the part of d(dx) that moves with the logits along x_t:
  //   out = g p (x_t - sum_c p_c x_t_c) on counted rows, 0 on ignored ones.
  void (*cross_entropy_backward_tangent)(std::int64_t rows, std::int64_t classes, const T* x, const T* x_t,
                                         const std::int64_t* targets, std::int64_t ignore_index, const double* lse,
                                         double g, T* out);

  // --- scaled dot-product attention, every (batch, head), any layout (ops/fused/attention.cpp;
  // the formulas are in kernels/cpu/attention_tiles.h). lse [B, H, Tq] is written for backward;
  // weights (optional, zero-filled by the caller) receives P as [B, H, Tq, Tk].
  void (*attention)(const attention_kernels::Dims& n, const attention_kernels::Layouts& L,
                    const attention_kernels::MaskReader& mask, double scale, const T* q, const T* k, const T* v, T* lse,
                    T* weights, T* out, const Products& products);
  // dq, dk, dv (each optional) from dout, laid out like q, k, v.
  void (*attention_backward)(const attention_kernels::Dims& n, const attention_kernels::Layouts& L,
                             const attention_kernels::MaskReader& mask, double scale, const T* q, const T* k,
                             const T* v, const T* lse, const T* dout, T* dq, T* dk, T* dv, const Products& products);
  // Optional: the same with q, k and v read from bf16 copies (T = float, a bf16 policy).
  void (*attention_backward_rounded)(const attention_kernels::Dims& n, const attention_kernels::Layouts& L,
                                     const attention_kernels::MaskReader& mask, double scale, const std::uint16_t* q,
                                     const std::uint16_t* k, const std::uint16_t* v, const T* lse, const T* dout, T* dq,
                                     T* dk, T* dv, const Products& products);
  // Optional: forward mode, the output's tangent from the tangents of q, k, v (each optional).
  void (*attention_jvp)(const attention_kernels::Dims& n, const attention_kernels::Layouts& L,
                        const attention_kernels::MaskReader& mask, double scale, const T* q, const T* k, const T* v,
                        const T* lse, const T* dq, const T* dk, const T* dv, T* dout, const Products& products);
  // Optional: forward over reverse, the tangents of dq, dk, dv (each optional) when q, k, v and
  // dout move along q_t, k_t, v_t, dout_t (each optional).
  void (*attention_backward_tangent)(const attention_kernels::Dims& n, const attention_kernels::Layouts& L,
                                     const attention_kernels::MaskReader& mask, double scale, const T* q, const T* k,
                                     const T* v, const T* lse, const T* dout, const T* q_t, const T* k_t, const T* v_t,
                                     const T* dout_t, T* dq_t, T* dk_t, T* dv_t, const Products& products);

  // --- the optimizer (nn/optim.cpp): one Adam step on n values of w, in place, with its moments
  // m and v, from the gradient g.
  void (*adam_update)(std::int64_t n, T* w, const T* g, T* m, T* v, const AdamSettings& s);
  // One SGD step on n values of w, in double, each value stored rounded once to T:
  //   d = g + wd w;  with momentum (buf not null) buf = first ? d : mu buf + (1 - dampening) d,
  //   then d = nesterov ? d + mu buf : buf;  w = w - lr d
  void (*sgd_update)(std::int64_t n, T* w, const T* g, T* buf, const SgdSettings& s);
  // gradient clipping: the sum of squares of n values (in double), and x = x * factor (in double).
  double (*sum_of_squares)(std::int64_t n, const T* x);
  void (*scale)(std::int64_t n, T* x, double factor);
};

struct Backend {
  const char* name;    // "fast", "naive": what --kernels spells
  bool bf16_products;  // whether its kernels take a bf16 product policy (autocast)
  // --- moving elements, which is the same for every dtype (ops/shape.cpp: slice, its backward,
  // cat, permute): bytes are moved, never computed; and the three that make elements of any
  // type: convert, which moves each element into another type, arange and fill.
  //   copy_along   dst[o, dst_begin + j dst_step, :] = src[o, src_begin + j src_step, :], j < count
  //   permute      y[o] = x[sum_d (o's coordinate d) x_strides[d]] for every element o of y
  //   convert      dst[i] = src[i] as the type `to` (a C++ static_cast), i < n: Tensor::to and
  //                tensor() (autograd/tensor.cpp). A float going to int64 must be a number inside
  //                [-2^63, 2^63) (C++ leaves any other undefined): one that is not is stored as 0,
  //                and convert returns the index of the first such element, -1 when there is none
  //   arange       dst[i] = start + i step, computed in double and stored as the type `to`, i < n
  //                (autograd/tensor.cpp: arange, the positions of a GPT step)
  //   fill         dst[i] = value as the type `to`, i < n (autograd/tensor.cpp: zeros, ones, full)
  //   select_along y[o, j, :] = x[o, index[j], :] for j < m, x seen as [outer, n, inner] (DimSizes)
  //                and y as [outer, m, inner], `element` bytes an element, every index in 0..n-1
  //                (ops/indexing.cpp: index_select, Tensor::index)
  void (*copy_along)(const CopySizes& n, const void* src, void* dst);
  void (*select_along)(const DimSizes& n, std::int64_t m, std::int64_t element, const void* x,
                       const std::int64_t* index, void* y);
  void (*permute)(const PermuteSizes& n, const void* x, void* y);
  std::int64_t (*convert)(Scalar from, Scalar to, std::int64_t n, const void* src, void* dst);
  void (*arange)(Scalar to, double start, double step, std::int64_t n, void* dst);
  void (*fill)(Scalar to, double value, std::int64_t n, void* dst);
  // --- the boolean masks of ops/masking.cpp, the same for every dtype of what they mask:
  //   causal_mask        y[i, j] = j <= i + (tk - tq): query i sees key j (y is [tq, tk]; the
  //                      last query sees every key, as in a decoder's cache)
  //   key_padding_mask   y[s, j] = j < lengths[s]: the first lengths[s] keys of sequence s are
  //                      real (y is [b, t]; every length in 0..t, checked by the op)
  //   logical            y[i] = !a[i] (Not; b unused), or a[i] && b[i] (And), i < n
  void (*causal_mask)(std::int64_t tq, std::int64_t tk, bool* y);
  void (*key_padding_mask)(std::int64_t b, std::int64_t t, const std::int64_t* lengths, bool* y);
  void (*logical)(Logical op, std::int64_t n, const bool* a, const bool* b, bool* y);
  // --- the comparisons of ops/binary.cpp, on two inputs of one element type, with broadcasting:
  //   compare   y[o] = a[ia] op b[ib] for every element o of the shape, ia and ib as in arithmetic,
  //             a and b of the type `type`. IEEE's rules: -0 equals 0, and a NaN is unequal to
  //             everything, itself included (Ne true, the five others false); bool orders false
  //             before true.
  void (*compare)(Comparison op, Scalar type, const BroadcastSizes& n, const void* a, const void* b, bool* y);
  // --- sum over one dim of bool or int64 elements (ops/reduce.cpp), exact, in int64:
  //   sum_integers   y[o, i] = sum_k x[o, k, i], x bool (a count of the true ones) or int64 (`type`).
  //                  Returns the first lane o * inner + i whose sum passes int64's range (its y
  //                  is then meaningless), -1 when none does.
  std::int64_t (*sum_integers)(Scalar type, const DimSizes& n, const void* x, std::int64_t* y);
  Table<float> f32;
  Table<double> f64;

  template <class T>
  const Table<T>& table() const {
    if constexpr (std::is_same_v<T, float>)
      return f32;
    else
      return f64;
  }
};

// The backends, each defined in its folder.
const Backend& cpu_backend();
const Backend& naive_backend();

}  // namespace ag::backends
