// The naive backend's table: the plain loops of this folder, what `--kernels naive` runs. Its
// kernels count their calls while a test asks (naive_calls.h), so that the test can tell the
// naive route really ran them.
#include <atomic>

#include "naive.h"

namespace ag::backends {

namespace naive {

std::atomic<bool> g_counting{false};
std::atomic<std::int64_t> g_calls{0};  // naive kernels run while counting, since the last reset

void set_counting(bool on) { g_counting.store(on, std::memory_order_relaxed); }
std::int64_t calls() { return g_calls.load(std::memory_order_relaxed); }
void reset_calls() { g_calls.store(0, std::memory_order_relaxed); }

}  // namespace naive

namespace {

template <class T>
Table<T> naive_table() {
  return Table<T>{
      .unary = naive::unary<T>,
      .unary_backward = naive::unary_backward<T>,
      .arithmetic = naive::arithmetic<T>,
      .broadcast = naive::broadcast<T>,
      .sum_broadcast = naive::sum_broadcast<T>,
      .sum_dim = naive::sum_dim<T>,
      .max_dim = naive::max_dim<T>,
      .take_along = naive::take_along<T>,
      .put_along = naive::put_along<T>,
      .gather = naive::gather<T>,
      .scatter_add = naive::scatter_add<T>,
      .index_add = naive::index_add<T>,
      .softmax = naive::softmax<T>,
      .dead_rows = naive::dead_rows<T>,
      .masked_fill = naive::masked_fill<T>,
      .where = naive::where<T>,
      .matmul = naive::matmul<T>,
      .linear = naive::linear<T>,
      .linear_gelu = naive::linear_gelu<T>,
      .linear_backward = naive::linear_backward<T>,
      .swiglu = naive::swiglu<T>,
      .swiglu_backward = naive::swiglu_backward<T>,
      .gelu = naive::gelu<T>,
      .gelu_curvature = nullptr,  // the second-order rules of gelu and linear_gelu: the reference's
      .layer_norm = naive::layer_norm<T>,
      .layer_norm_backward = naive::layer_norm_backward<T>,
      .rms_norm = naive::rms_norm<T>,
      .rms_norm_backward = naive::rms_norm_backward<T>,
      .embedding = naive::embedding<T>,
      .embedding_backward = naive::embedding_backward<T>,
      .cross_entropy = naive::cross_entropy<T>,
      .cross_entropy_backward = naive::cross_entropy_backward<T>,
      .cross_entropy_jvp = nullptr,  // forward mode: the reference's tangent
      .cross_entropy_backward_tangent = nullptr,
      .attention = naive::attention<T>,
      .attention_backward = naive::attention_backward<T>,
      // Optional: bf16 copies never reach this backend (bf16_products = false), and attention's
      // forward mode runs through the op's reference instead.
      .attention_backward_rounded = nullptr,
      .attention_jvp = nullptr,
      .attention_backward_tangent = nullptr,
      .adam_update = naive::adam_update<T>,
      .sgd_update = naive::sgd_update<T>,
      .sum_of_squares = naive::sum_of_squares<T>,
      .scale = naive::scale<T>,
  };
}

}  // namespace

const Backend& naive_backend() {
  static const Backend backend{.name = "naive",
                               .bf16_products = false,
                               .copy_along = naive::copy_along,
                               .select_along = naive::select_along,
                               .permute = naive::permute,
                               .convert = naive::convert,
                               .arange = naive::arange,
                               .fill = naive::fill,
                               .causal_mask = naive::causal_mask,
                               .key_padding_mask = naive::key_padding_mask,
                               .logical = naive::logical,
                               .compare = naive::compare,
                               .sum_integers = naive::sum_integers,
                               .f32 = naive_table<float>(),
                               .f64 = naive_table<double>()};
  return backend;
}

}  // namespace ag::backends
