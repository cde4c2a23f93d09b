// The cpu backend's table: the fast kernels, what `--kernels fast` runs.
#include "attention_tiles.h"
#include "kernels.h"

namespace ag::backends {

namespace {

// attention_tiles.h's templates take the policy last with a default; the table's entries are
// plain function pointers with every argument.
template <class T>
void attention(const attention_kernels::Dims& n, const attention_kernels::Layouts& L,
               const attention_kernels::MaskReader& mask, double scale, const T* q, const T* k, const T* v, T* lse,
               T* weights, T* out, const Products& products) {
  attention_kernels::attention_forward<T>(n, L, mask, scale, q, k, v, lse, weights, out, products);
}
template <class T, class In>
void attention_backward(const attention_kernels::Dims& n, const attention_kernels::Layouts& L,
                        const attention_kernels::MaskReader& mask, double scale, const In* q, const In* k, const In* v,
                        const T* lse, const T* dout, T* dq, T* dk, T* dv, const Products& products) {
  attention_kernels::attention_backward<T, In>(n, L, mask, scale, q, k, v, lse, dout, dq, dk, dv, products);
}

// One product through the policy: BLAS (or oneDNN under bf16) reads a stored matrix transposed
// for free, so the views say how each operand is stored and how it is read.
template <class T>
void matmul(const Products& products, const ProductSizes& n, const T* a, const T* b, T* c) {
  blas::Matrix<const T> a_stored{a, n.trans_a ? n.k : n.m, n.trans_a ? n.m : n.k};
  blas::Matrix<const T> b_stored{b, n.trans_b ? n.n : n.k, n.trans_b ? n.k : n.n};
  products.gemm(n.trans_a ? a_stored.t() : a_stored, n.trans_b ? b_stored.t() : b_stored, blas::Matrix<T>{c, n.m, n.n});
}

template <class T>
Table<T> cpu_table() {
  Table<T> t{
      .unary = cpu::unary<T>,
      .unary_backward = cpu::unary_backward<T>,
      .arithmetic = cpu::arithmetic<T>,
      .broadcast = cpu::broadcast<T>,
      .sum_broadcast = cpu::sum_broadcast<T>,
      .sum_dim = cpu::sum_dim<T>,
      .max_dim = cpu::max_dim<T>,
      .take_along = cpu::take_along<T>,
      .put_along = cpu::put_along<T>,
      .gather = cpu::gather<T>,
      .scatter_add = cpu::scatter_add<T>,
      .index_add = cpu::index_add<T>,
      .softmax = cpu::softmax<T>,
      .dead_rows = cpu::dead_rows<T>,
      .masked_fill = cpu::masked_fill<T>,
      .where = cpu::where<T>,
      .matmul = matmul<T>,
      .linear = cpu::linear<T>,
      .linear_gelu = cpu::linear_gelu<T>,
      .linear_backward = cpu::linear_backward<T>,
      .swiglu = cpu::swiglu<T>,
      .swiglu_backward = cpu::swiglu_backward<T>,
      .gelu = cpu::gelu<T>,
      .gelu_curvature = cpu::gelu_curvature<T>,
      .layer_norm = cpu::layer_norm<T>,
      .layer_norm_backward = cpu::layer_norm_backward<T>,
      .rms_norm = cpu::rms_norm<T>,
      .rms_norm_backward = cpu::rms_norm_backward<T>,
      .embedding = cpu::embedding<T>,
      .embedding_backward = cpu::embedding_backward<T>,
      .cross_entropy = cpu::cross_entropy<T>,
      .cross_entropy_backward = cpu::cross_entropy_backward<T>,
      .cross_entropy_jvp = cpu::cross_entropy_jvp<T>,
      .cross_entropy_backward_tangent = cpu::cross_entropy_backward_tangent<T>,
      .attention = attention<T>,
      .attention_backward = attention_backward<T, T>,
      .attention_backward_rounded = nullptr,
      .attention_jvp = attention_kernels::attention_jvp<T>,
      .attention_backward_tangent = attention_kernels::attention_backward_tangent<T>,
      .adam_update = cpu::adam_update<T>,
      .sgd_update = cpu::sgd_update<T>,
      .sum_of_squares = cpu::sum_of_squares<T>,
      .scale = cpu::scale<T>,
  };
  if constexpr (std::is_same_v<T, float>) t.attention_backward_rounded = attention_backward<float, std::uint16_t>;
  return t;
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend backend{.name = "fast",
                               .bf16_products = true,
                               .copy_along = cpu::copy_along,
                               .select_along = cpu::select_along,
                               .permute = cpu::permute,
                               .convert = cpu::convert,
                               .arange = cpu::arange,
                               .fill = cpu::fill,
                               .causal_mask = cpu::causal_mask,
                               .key_padding_mask = cpu::key_padding_mask,
                               .logical = cpu::logical,
                               .compare = cpu::compare,
                               .sum_integers = cpu::sum_integers,
                               .f32 = cpu_table<float>(),
                               .f64 = cpu_table<double>()};
  return backend;
}

}  // namespace ag::backends
