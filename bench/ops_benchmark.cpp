// Google Benchmark programs for the ops a GPT step spends its time in. Sizes follow the
// "small" configuration (batch 16, block 64, n_embd 128, 4 heads) unless a range says otherwise.
//
//   build/bench/ops_benchmark --benchmark_filter=Attention
//
// The matrix-product benchmarks time the kernels themselves, below any op: OpenBLAS's and the
// bf16 products on raw buffers. Those kernels are not part of the installed API, so this program,
// which builds only in the source tree, includes their headers from it.
#include <attograd/attograd.h>
#include <benchmark/benchmark.h>
#include <kernels/bf16/bf16.h>
#include <kernels/cpu/blas.h>

#include <array>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// One matrix product C [m, n] = A [m, k] B [k, n] on the thread pool, no autograd: the throughput
// of each path (items/s = FLOP/s). Shapes of the medium GPT (4096 rows = batch 32 x block 128,
// width 192): the MLP's two products, the q/k/v projection, and one head's scores (128 x 128 x 32).
void gemm_args(benchmark::internal::Benchmark* b) {
  for (auto [m, k, n] :
       {std::array<std::int64_t, 3>{4096, 192, 768}, {4096, 768, 192}, {4096, 192, 576}, {128, 32, 128}})
    b->Args({m, k, n});
}
void BM_GemmFp32OpenBLAS(benchmark::State& state) {
  std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = leaf({m, k}, 1), b = leaf({k, n}, 2), c = ag::empty({m, n});
  for (auto _ : state)
    ag::blas::gemm<float>({a.const_data_ptr<float>(), m, k}, {b.const_data_ptr<float>(), k, n},
                          {c.mutable_data_ptr<float>(), m, n});
  state.SetItemsProcessed(state.iterations() * 2 * m * n * k);
}
BENCHMARK(BM_GemmFp32OpenBLAS)->Apply(gemm_args)->Unit(benchmark::kMicrosecond);
// bf16 inputs already rounded (as a cached weight is), float32 accumulation and output: on
// oneDNN, but for products of at most 2^19 multiply-adds (the last shape), which run on the
// library's own AVX512-BF16 kernel (kernels/bf16/bf16_small.h) where the CPU has it.
void BM_GemmBf16(benchmark::State& state) {
  if (!ag::bf16::support().available) {
    state.SkipWithError(ag::bf16::support().reason.c_str());
    return;
  }
  std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = leaf({m, k}, 1), b = leaf({k, n}, 2), c = ag::empty({m, n});
  ag::bf16::Buffer a16 = ag::bf16::convert(a.const_data_ptr<float>(), a.numel()),
                   b16 = ag::bf16::convert(b.const_data_ptr<float>(), b.numel());
  for (auto _ : state)
    ag::bf16::gemm({a16.data.get(), m, k}, {b16.data.get(), k, n}, {c.mutable_data_ptr<float>(), m, n});
  state.SetItemsProcessed(state.iterations() * 2 * m * n * k);
}
BENCHMARK(BM_GemmBf16)->Apply(gemm_args)->Unit(benchmark::kMicrosecond);
// The same with float32 inputs, each rounded to bf16 on the way in (an activation's cost).
void BM_GemmBf16WithRounding(benchmark::State& state) {
  if (!ag::bf16::support().available) {
    state.SkipWithError(ag::bf16::support().reason.c_str());
    return;
  }
  std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = leaf({m, k}, 1), b = leaf({k, n}, 2), c = ag::empty({m, n});
  for (auto _ : state)
    ag::bf16::gemm(ag::blas::Matrix<const float>{a.const_data_ptr<float>(), m, k},
                   ag::blas::Matrix<const float>{b.const_data_ptr<float>(), k, n}, {c.mutable_data_ptr<float>(), m, n});
  state.SetItemsProcessed(state.iterations() * 2 * m * n * k);
}
BENCHMARK(BM_GemmBf16WithRounding)->Apply(gemm_args)->Unit(benchmark::kMicrosecond);
// A medium GPT's linear layers under autocast, forward and backward, bias on: x [4096, 192] to
// `out` features (576: q, k and v; 192: the attention's output), and linear_gelu to 768.
void BM_LinearBf16(benchmark::State& state) {
  if (!ag::bf16::support().available) {
    state.SkipWithError(ag::bf16::support().reason.c_str());
    return;
  }
  std::int64_t out = state.range(0);
  bool gelu = state.range(1) != 0;
  Tensor x = leaf({4096, 192}, 1), w = leaf({out, 192}, 2), b = leaf({out}, 3);
  forward_backward(state, {x, w, b}, [gelu](const auto& in) {
    ag::AutocastGuard autocast;
    return gelu ? ag::linear_gelu(in[0], in[1], in[2]) : ag::linear(in[0], in[1], in[2]);
  });
  state.SetItemsProcessed(state.iterations() * 3 * 2 * 4096 * 192 * out);  // FLOP, forward + backward
}
BENCHMARK(BM_LinearBf16)->Args({576, 0})->Args({192, 0})->Args({768, 1})->Unit(benchmark::kMicrosecond);
// A weight's gradient dW = g^T x under bf16, g [4096, out] and x [4096, in] already rounded: the
// medium GPT's four shapes. The third argument 0 reads g transposed, as linear's backward does;
// 1 reads a transposed copy of g made beforehand and not timed, which linear does not make: what
// such a copy would buy the product (docs/performance.md). A dW taller than wide is cut into
// bands of its rows across the threads, each reading a strided band of g's columns, which
// oneDNN runs on gemm:jit, and from the copy whole rows, which it runs on brgemm; one wider than
// tall (192 x 768) is cut into bands of its columns, whose strided operand is x either way.
void BM_WeightGradBf16(benchmark::State& state) {
  if (!ag::bf16::support().available) {
    state.SkipWithError(ag::bf16::support().reason.c_str());
    return;
  }
  std::int64_t out = state.range(0), in = state.range(1), rows = 4096;
  bool transposed_copy = state.range(2) != 0;
  Tensor g = leaf({rows, out}, 1), x = leaf({rows, in}, 2), dw = ag::empty({out, in});
  ag::bf16::Buffer g16 = ag::bf16::convert(g.const_data_ptr<float>(), g.numel()),
                   x16 = ag::bf16::convert(x.const_data_ptr<float>(), x.numel()),
                   gt16 = ag::bf16::uninitialised(g.numel());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) gt16.data[o * rows + r] = g16.data[r * out + o];
  ag::blas::Matrix<const std::uint16_t> gs{g16.data.get(), rows, out}, gts{gt16.data.get(), out, rows},
      xs{x16.data.get(), rows, in};
  for (auto _ : state) ag::bf16::gemm(transposed_copy ? gts : gs.t(), xs, {dw.mutable_data_ptr<float>(), out, in});
  state.SetItemsProcessed(state.iterations() * 2 * rows * in * out);
}
BENCHMARK(BM_WeightGradBf16)
    ->ArgsProduct({{576}, {192}, {0, 1}})
    ->ArgsProduct({{192}, {192}, {0, 1}})
    ->ArgsProduct({{768}, {192}, {0, 1}})
    ->ArgsProduct({{192}, {768}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The units' peaks, measured: 12 independent chains of one vector instruction on every thread of
// the pool, nothing else (no loads): AVX2 FMA (the OpenBLAS kernels Debian's 0.3.21 picks here),
// AVX-512 FMA, and AVX512-BF16's dot product VDPBF16PS (32 bf16 multiply-adds into 16 float32
// sums). items/s = FLOP/s, counting a multiply-add as 2.
#if defined(__x86_64__)
template <class Chains>
void peak(benchmark::State& state, std::int64_t flop_per_round, Chains chains) {
  const std::int64_t rounds = 1 << 20;
  for (auto _ : state) ag::parallel_for(ag::get_num_threads(), 1, [&](std::int64_t, std::int64_t) { chains(rounds); });
  state.SetItemsProcessed(state.iterations() * ag::get_num_threads() * rounds * flop_per_round);
}
__attribute__((target("avx2,fma"))) void fma256_chains(std::int64_t rounds) {
  __m256 acc[12], x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-9f);
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& a : acc) a = _mm256_fmadd_ps(x, y, a);
  for (auto& a : acc) benchmark::DoNotOptimize(a);
}
__attribute__((target("avx512f"))) void fma512_chains(std::int64_t rounds) {
  __m512 acc[12], x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-9f);
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& a : acc) a = _mm512_fmadd_ps(x, y, a);
  for (auto& a : acc) benchmark::DoNotOptimize(a);
}
__attribute__((target("avx512f,avx512bf16"))) void bf16_dot_chains(std::int64_t rounds) {
  __m512 acc[12];
  __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f)),
           y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-9f), _mm512_set1_ps(1e-9f));
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
  for (auto& a : acc) benchmark::DoNotOptimize(a);
}
void BM_PeakFp32Avx2Fma(benchmark::State& state) { peak(state, 12 * 8 * 2, fma256_chains); }
void BM_PeakFp32Avx512Fma(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512f")) return state.SkipWithError("no AVX-512");
  peak(state, 12 * 16 * 2, fma512_chains);
}
void BM_PeakBf16Avx512Dot(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX512-BF16");
  peak(state, 12 * 32 * 2, bf16_dot_chains);
}
BENCHMARK(BM_PeakFp32Avx2Fma)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PeakFp32Avx512Fma)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PeakBf16Avx512Dot)->Unit(benchmark::kMillisecond);
#endif

// How fast this machine reads memory: 256 MiB of floats summed by one thread, or by two taking a
// half each. A pass over an activation larger than the caches (layer norm's, GELU's, a residual
// add's) cannot run faster than this (docs/performance.md, "The time around the products").
void BM_MemoryRead(benchmark::State& state) {
  const std::size_t n = std::size_t{1} << 26;
  std::vector<float> buffer(n, 1.0f);
  auto sum = [&](std::size_t begin, std::size_t end) {
    std::array<float, 16> lanes{};  // independent sums, so the loop vectorises without reordering
    for (std::size_t i = begin; i < end; i += lanes.size())
      for (std::size_t l = 0; l < lanes.size(); ++l) lanes[l] += buffer[i + l];
    float total = 0.0f;
    for (float v : lanes) total += v;
    return total;
  };
  bool two = state.range(0) == 2;
  for (auto _ : state) {
    float other = 0.0f;
    std::thread second;
    if (two) second = std::thread([&] { other = sum(n / 2, n); });
    float mine = sum(0, two ? n / 2 : n);
    if (two) second.join();
    benchmark::DoNotOptimize(mine + other);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}
BENCHMARK(BM_MemoryRead)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Softmax(benchmark::State& state) {
  Tensor x = leaf({16, 4, state.range(0), state.range(0)}, 3);
  forward_backward(state, {x}, [](const auto& in) { return ag::softmax(in[0], -1); });
}
BENCHMARK(BM_Softmax)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond);

// Softmax's and log-softmax's backward through the node, the engine's work included: the formula
// as ops (docs/performance.md has it against the hand loops it replaced). Rows of n, as many as
// attention weights have at T = n (16 x 4 x n) or, at n = 65, a character model's output rows
// (32 x 64 rows of a 65-letter vocabulary).
ag::Shape softmax_rows(std::int64_t n) { return n == 65 ? ag::Shape{32 * 64, 65} : ag::Shape{16 * 4 * n, n}; }
template <bool Log>
void softmax_backward(benchmark::State& state) {
  Tensor x = leaf(softmax_rows(state.range(0)), 4);
  Tensor y = Log ? ag::log_softmax(x, -1) : ag::softmax(x, -1);
  ag::Generator gen(5);
  Tensor dy = ag::randn(y.shape(), gen);
  for (auto _ : state) {
    std::vector<Tensor> dx = ag::grad({y}, {x}, {dy}, {.retain_graph = true});
    benchmark::DoNotOptimize(dx[0].raw_data());
  }
}
void BM_SoftmaxBackward(benchmark::State& state) { softmax_backward<false>(state); }
void BM_LogSoftmaxBackward(benchmark::State& state) { softmax_backward<true>(state); }
BENCHMARK(BM_SoftmaxBackward)->Arg(64)->Arg(128)->Arg(65)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LogSoftmaxBackward)->Arg(64)->Arg(128)->Arg(65)->Unit(benchmark::kMicrosecond);

// An elementwise op's backward, dx = dy f'(saved), for tanh and sigmoid, on a recurrent network's
// step ([64, 256]) and on a batch of such rows ([4096, 256]): the op's own loop, through the node
// and the engine, against the same formula as ops run with no node at all (what the composed
// form computes, without the engine's work, so the comparison leans towards the ops).
template <bool Sigmoid, bool AsOps>
void unary_backward(benchmark::State& state) {
  Tensor x = leaf({state.range(0), 256}, 12);
  Tensor y = Sigmoid ? ag::sigmoid(x) : ag::tanh(x);
  ag::Generator gen(13);
  Tensor dy = ag::randn(y.shape(), gen);
  Tensor saved = y.detach();
  for (auto _ : state) {
    if constexpr (AsOps) {
      ag::NoGradGuard no_grad;
      Tensor dx = Sigmoid ? dy * (saved * (1 - saved)) : dy * (1 - saved * saved);
      benchmark::DoNotOptimize(dx.raw_data());
    } else {
      std::vector<Tensor> dx = ag::grad({y}, {x}, {dy}, {.retain_graph = true});
      benchmark::DoNotOptimize(dx[0].raw_data());
    }
  }
}
void BM_TanhBackwardLoop(benchmark::State& state) { unary_backward<false, false>(state); }
void BM_TanhBackwardOps(benchmark::State& state) { unary_backward<false, true>(state); }
void BM_SigmoidBackwardLoop(benchmark::State& state) { unary_backward<true, false>(state); }
void BM_SigmoidBackwardOps(benchmark::State& state) { unary_backward<true, true>(state); }
BENCHMARK(BM_TanhBackwardLoop)->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TanhBackwardOps)->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SigmoidBackwardLoop)->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SigmoidBackwardOps)->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);

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
  for (std::int64_t i = 0; i < 1024; ++i) ids.mutable_data_ptr<std::int64_t>()[i] = (i * 7) % 65;
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
