// Google Benchmark programs for the ops a GPT step spends its time in. Sizes follow the
// "small" configuration (batch 16, block 64, n_embd 128, 4 heads) unless a range says otherwise.
//
//   build/bench/ops_benchmark --benchmark_filter=Attention
#include <attograd/attograd.h>
#include <benchmark/benchmark.h>

namespace {

using ag::Tensor;

Tensor leaf(const ag::Shape& shape, std::uint64_t seed) {
  ag::Generator gen(seed);
  return ag::randn(shape, gen).requires_grad_();
}

// Forward and backward of f(x), as training runs it.
template <class F>
void forward_backward(benchmark::State& state, const std::vector<Tensor>& inputs, F f) {
  for (auto _ : state) {
    Tensor y = f(inputs);
    y.backward(ag::ones_like(y));
    for (Tensor x : inputs) x.zero_grad();
    benchmark::DoNotOptimize(y.raw_data());
  }
}

void BM_Matmul(benchmark::State& state) {  // [B*T, C] @ [C, 4C]: the MLP's first matmul
  auto n = state.range(0);
  Tensor a = leaf({1024, n}, 1), b = leaf({n, 4 * n}, 2);
  forward_backward(state, {a, b}, [](const auto& in) { return in[0].matmul(in[1]); });
  state.SetItemsProcessed(state.iterations() * 3 * 2 * 1024 * n * 4 * n);  // FLOP, forward + backward
}
BENCHMARK(BM_Matmul)->Arg(64)->Arg(128)->Arg(192)->Unit(benchmark::kMicrosecond);

void BM_Softmax(benchmark::State& state) {
  Tensor x = leaf({16, 4, state.range(0), state.range(0)}, 3);
  forward_backward(state, {x}, [](const auto& in) { return ag::softmax(in[0], -1); });
}
BENCHMARK(BM_Softmax)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_LayerNorm(benchmark::State& state) {
  auto c = state.range(0);
  Tensor x = leaf({1024, c}, 4), w = leaf({c}, 5), b = leaf({c}, 6);
  forward_backward(state, {x, w, b}, [](const auto& in) { return ag::layer_norm(in[0], in[1], in[2]); });
}
BENCHMARK(BM_LayerNorm)->Arg(128)->Arg(192)->Unit(benchmark::kMicrosecond);

void BM_Gelu(benchmark::State& state) {
  Tensor x = leaf({1024, state.range(0)}, 7);
  forward_backward(state, {x}, [](const auto& in) { return ag::gelu(in[0]); });
}
BENCHMARK(BM_Gelu)->Arg(512)->Arg(768)->Unit(benchmark::kMicrosecond);

void BM_CrossEntropy(benchmark::State& state) {
  Tensor logits = leaf({1024, 65}, 8);
  Tensor ids = ag::empty({1024}, ag::kInt64);
  for (std::int64_t i = 0; i < 1024; ++i) ids.data_ptr<std::int64_t>()[i] = (i * 7) % 65;
  forward_backward(state, {logits}, [&](const auto& in) { return ag::cross_entropy(in[0], ids); });
}
BENCHMARK(BM_CrossEntropy)->Unit(benchmark::kMicrosecond);

// Causal attention, forward + backward, fused op against the composed reference: [4, 4, T, 32].
void BM_AttentionFused(benchmark::State& state) {
  auto t = state.range(0);
  Tensor q = leaf({4, 4, t, 32}, 9), k = leaf({4, 4, t, 32}, 10), v = leaf({4, 4, t, 32}, 11);
  forward_backward(state, {q, k, v}, [](const auto& in) {
    return ag::scaled_dot_product_attention(in[0], in[1], in[2], {}, true).output;
  });
}
BENCHMARK(BM_AttentionFused)->RangeMultiplier(2)->Range(32, 512)->Unit(benchmark::kMicrosecond);

void BM_AttentionComposed(benchmark::State& state) {
  auto t = state.range(0);
  Tensor q = leaf({4, 4, t, 32}, 9), k = leaf({4, 4, t, 32}, 10), v = leaf({4, 4, t, 32}, 11);
  forward_backward(state, {q, k, v},
                   [](const auto& in) { return ag::attention_reference(in[0], in[1], in[2], {}, true).output; });
}
BENCHMARK(BM_AttentionComposed)->RangeMultiplier(2)->Range(32, 512)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
