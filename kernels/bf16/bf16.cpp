// bf16 conversions and matrix products (bf16.h). The products are oneDNN's matmul primitive,
// the one file that includes oneDNN: built only with it (AG_HAVE_DNNL), else support() says so
// and gemm throws. Small products, where oneDNN's per-call cost would outweigh the work, run on
// the kernel of bf16_small.h instead.
//
// Threads: oneDNN runs on OpenMP, attograd on its own pool (runtime/parallel.h). Two pools
// spinning against each other on two cores cost more than they give, so oneDNN is only ever
// called single-threaded (OpenMP's thread count is set to 1 for each calling thread), and a
// large product is cut into bands across attograd's pool exactly as blas::gemm cuts an sgemm.
#include "bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "../../runtime/allocator.h"
#include "../../runtime/parallel.h"
#include "../../runtime/profile.h"
#include "bf16_small.h"

#if AG_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ag::bf16 {

namespace {

void convert_serial(const float* src, std::int64_t n, std::uint16_t* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = from_float(src[i]);
}

#if defined(__x86_64__)
// 16 at a time with AVX512-BF16's VCVTNEPS2BF16: the same rounding as from_float, except that
// the instruction flushes float32 subnormals (below 1.2e-38) to zero.
__attribute__((target("avx512f,avx512bf16"))) void convert_avx512(const float* src, std::int64_t n,
                                                                  std::uint16_t* dst) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    std::memcpy(dst + i, &h, sizeof h);
  }
  convert_serial(src + i, n - i, dst + i);
}
// Asked on first use, not while the library loads: the CPU detection behind
// __builtin_cpu_supports is itself set up by a load-time constructor.
bool has_convert_instruction() {
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("avx512bf16"));
  return has;
}
#else
bool has_convert_instruction() { return false; }
void convert_avx512(const float* src, std::int64_t n, std::uint16_t* dst) { convert_serial(src, n, dst); }
#endif

void convert_range(const float* src, std::int64_t n, std::uint16_t* dst) {
  if (has_convert_instruction())
    convert_avx512(src, n, dst);
  else
    convert_serial(src, n, dst);
}

}  // namespace

void convert(const float* src, std::int64_t n, std::uint16_t* dst) {
  profile::Scope scope(profile::Family::Rounding);
  parallel_for(n, std::int64_t{1} << 16,
               [&](std::int64_t begin, std::int64_t end) { convert_range(src + begin, end - begin, dst + begin); });
}

void convert_here(const float* src, std::int64_t n, std::uint16_t* dst) { convert_range(src, n, dst); }

void widen(const std::uint16_t* src, std::int64_t n, float* dst) {
  parallel_for(n, std::int64_t{1} << 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) dst[i] = to_float(src[i]);
  });
}

void BlockFree::operator()(std::uint16_t* p) const { free_block(p, nbytes); }

Buffer uninitialised(std::int64_t n) {
  std::size_t nbytes = static_cast<std::size_t>(n) * sizeof(std::uint16_t);
  return {std::unique_ptr<std::uint16_t[], BlockFree>(static_cast<std::uint16_t*>(allocate_block(nbytes)),
                                                      BlockFree{nbytes}),
          n};
}

Buffer convert(const float* src, std::int64_t n) {
  Buffer b = uninitialised(n);
  convert(src, n, b.data.get());
  return b;
}

namespace {

// A float32 view rounded to bf16: its stored rows x cols, packed cols apart, read the same way.
// Small views (attention's tiles, one per query block) go to a per-thread scratch of at most
// kScratch values per operand, reused call after call; a larger one (a layer's activations)
// takes a buffer from the block cache that goes back after the product, so no thread keeps an
// activation's worth of memory for good.
struct Packed {
  Buffer owner;  // empty when the scratch holds the values
  blas::Matrix<const std::uint16_t> view;
};
constexpr std::int64_t kScratch = std::int64_t{1} << 17;  // 256 KiB of bf16

Packed packed(const blas::Matrix<const float>& m, int operand) {
  profile::Scope scope(profile::Family::Rounding);
  std::int64_t count = m.rows * m.cols;
  Buffer owner;
  std::uint16_t* out;
  if (count <= kScratch) {
    thread_local std::array<std::vector<std::uint16_t>, 2> scratch;  // [0] for A, [1] for B
    std::vector<std::uint16_t>& mine = scratch[static_cast<std::size_t>(operand)];
    if (mine.size() < static_cast<std::size_t>(count)) mine.resize(static_cast<std::size_t>(count));
    out = mine.data();
  } else {
    owner = uninitialised(count);
    out = owner.data.get();
  }
  auto rows = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) convert_range(m.data + r * m.ld, m.cols, out + r * m.cols);
  };
  if (m.rows * m.cols >= (std::int64_t{1} << 16))
    parallel_for(m.rows, std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(m.cols, 1)), rows);
  else
    rows(0, m.rows);
  return {std::move(owner), {out, m.rows, m.cols, m.cols, m.transposed}};
}

#if AG_HAVE_DNNL

using dnnl::memory;

// The CPU engine every primitive is made on, so no primitive exists before it. Making it first
// switches oneDNN's process-wide primitive cache off (capacity 0) for the whole process, whatever
// ONEDNN_PRIMITIVE_CACHE_CAPACITY asked. That cache hands each thread asking for a shape the
// primitive, kernels and all, that the first such thread made. product_one keeps each thread's
// primitives itself, so the cache would only spare a thread compiling a shape's kernels once, the
// first time it meets the shape; and on AMX CPUs the sharing races. ThreadSanitizer saw one
// thread's matmul construction read, under the cache's lock, memory another thread's was
// allocating, and oneDNN issue 5393 reports AMX brgemm kernels shared through the cache whose
// tile configuration (the palette) several threads write. With the cache off, each primitive and
// every kernel in it belong to the thread that made it.
const dnnl::engine& engine() {
  static const dnnl::engine e = [] {
    dnnl::set_primitive_cache_capacity(0);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// One matrix as oneDNN describes it: its size as read and the element strides that read it.
memory::desc describe(std::int64_t rows_read, std::int64_t cols_read, std::int64_t ld, bool transposed,
                      memory::data_type type) {
  memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows_read, cols_read}, type, strides);
}

// A shape's matmul with its memory objects (the bias's only when it has one) and its argument
// list, made once: a call only points the memory objects at its operands (set_data_handle), so
// no oneDNN object is built per product.
struct Primitive {
  dnnl::matmul matmul;
  memory a, b, c, bias;
  std::unordered_map<int, memory> args;
};

// One band, on this thread alone: oneDNN's matmul, created once per shape and kept per thread.
// Per thread because oneDNN's default ("library") scratchpad lets primitives run in parallel
// only on the thread that created them.
void product_one(const blas::Matrix<const std::uint16_t>& a, const blas::Matrix<const std::uint16_t>& b,
                 const blas::Matrix<float>& c, float beta, float alpha, const float* bias) {
  try {
    thread_local const bool one_thread = (omp_set_num_threads(1), true);
    (void)one_thread;
    using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool, std::int64_t, bool,
                           std::int64_t, float, float, bool>;
    thread_local std::map<Key, Primitive> cache;
    std::int64_t m = c.rows, n = c.cols, k = a.n();
    Key key{m, n, k, a.ld, a.transposed, b.ld, b.transposed, c.ld, beta, alpha, bias != nullptr};
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= 4096) cache.clear();  // shapes of a run repeat; a sweep over sizes may not
      memory::desc da = describe(m, k, a.ld, a.transposed, memory::data_type::bf16),
                   db = describe(k, n, b.ld, b.transposed, memory::data_type::bf16),
                   dc = describe(m, n, c.ld, false, memory::data_type::f32),
                   dbias = bias ? describe(1, n, n, false, memory::data_type::f32) : memory::desc();
      Primitive p{{},
                  memory(da, engine(), DNNL_MEMORY_NONE),
                  memory(db, engine(), DNNL_MEMORY_NONE),
                  memory(dc, engine(), DNNL_MEMORY_NONE),
                  bias ? memory(dbias, engine(), DNNL_MEMORY_NONE) : memory(),
                  {}};
      p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
      if (bias) p.args.emplace(DNNL_ARG_BIAS, p.bias);
      dnnl::primitive_attr attr;
      if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
      if (beta != 0.0f) {
        dnnl::post_ops ops;
        ops.append_sum(beta);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(da, db, dbias, dc) : dnnl::matmul::desc(da, db, dc),
                                      attr, engine());
      p.matmul = dnnl::matmul(pd);
      it = cache.emplace(key, std::move(p)).first;
    }
    thread_local dnnl::stream stream(engine());
    Primitive& p = it->second;
    p.a.set_data_handle(const_cast<std::uint16_t*>(a.data));
    p.b.set_data_handle(const_cast<std::uint16_t*>(b.data));
    p.c.set_data_handle(c.data);
    if (bias) p.bias.set_data_handle(const_cast<float*>(bias));
    p.matmul.execute(stream, p.args);
    stream.wait();
  } catch (const dnnl::error& e) {  // oneDNN's own words, with the product they were about
    throw std::runtime_error(fmt::format("bf16 matrix product [{}, {}] x [{}, {}]{}: oneDNN failed: {}", c.rows, a.n(),
                                         a.n(), c.cols, b.transposed ? " (B read transposed)" : "", e.what()));
  }
}

Support detect() {
  Support s;
  auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [&](dnnl::cpu_isa want) { return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want); };
  if (has(dnnl::cpu_isa::avx512_core_amx)) {
    s.unit = "AMX";
  } else if (has(dnnl::cpu_isa::avx512_core_bf16)) {
    s.unit = "AVX512-BF16";
  } else {
    s.reason =
        "the CPU has no bf16 unit (neither AMX nor AVX512-BF16), where oneDNN would only emulate bf16, "
        "slower than float32";
    return s;
  }
  // What oneDNN would run for a product: its reference kernel means no fast path after all.
  try {
    memory::desc a({64, 64}, memory::data_type::bf16, memory::dims{64, 1});
    memory::desc c({64, 64}, memory::data_type::f32, memory::dims{64, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), engine());
    std::string impl = pd.impl_info_str();
    if (impl.rfind("ref", 0) == 0) {
      s.reason = fmt::format("oneDNN offers only its reference kernel ({}) for bf16 here", impl);
      return s;
    }
    s.available = true;
    s.reason = fmt::format("bf16 on {} via oneDNN {}.{}.{} ({})", s.unit, dnnl::version()->major,
                           dnnl::version()->minor, dnnl::version()->patch, impl);
  } catch (const dnnl::error& e) {
    s.reason = fmt::format("oneDNN has no bf16 matrix product here ({})", e.what());
  }
  return s;
}

#endif

void check_available() {
  if (!support().available) throw std::runtime_error("bf16 matrix product: unavailable: " + support().reason);
}

}  // namespace

int onednn_primitive_cache_capacity() {
#if AG_HAVE_DNNL
  return dnnl::get_primitive_cache_capacity();
#else
  return -1;
#endif
}

const Support& support() {
#if AG_HAVE_DNNL
  static const Support s = detect();
#else
  static const Support s{false, "", "this build has no oneDNN (libdnnl-dev; meson -Ddnnl=enabled)"};
#endif
  return s;
}

namespace {

// Every gemm below: the checks, the empty cases, then a small product on bf16_small's kernel
// straight from the operands as they are, or each float32 operand rounded into a bf16 copy and
// the product cut into bands for oneDNN.
template <class TA, class TB>
void product(blas::Matrix<const TA> a, blas::Matrix<const TB> b, blas::Matrix<float> c, float beta, float alpha,
             const float* bias) {
  check_available();
  blas::check_fit("bf16::gemm", a, b, c);
  if (bias && alpha != 1.0f)
    throw std::invalid_argument(fmt::format("bf16::gemm: a bias is added unscaled, so alpha must be 1, got {}", alpha));
  std::int64_t m = c.m(), n = c.n(), k = a.n();
  if (m == 0 || n == 0) return;
  // A band of columns starts that many columns into C, and into the bias.
  auto bias_of = [&](const blas::Matrix<float>& c_band) { return bias ? bias + (c_band.data - c.data) % c.ld : nullptr; };
  if (k == 0) {  // an empty sum: C = bias + beta C
    profile::Scope scope(profile::Family::Products);
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t j = 0; j < n; ++j)
        c.data[r * c.ld + j] = (bias ? bias[j] : 0.0f) + (beta == 0.0f ? 0.0f : beta * c.data[r * c.ld + j]);
    return;
  }
  if (small::takes(m, n, k)) {
    profile::Scope scope(profile::Family::Products);
    blas::for_bands(a, b, c, [&](const auto& a_band, const auto& b_band, const auto& c_band) {
      small::gemm(a_band, b_band, c_band, beta, alpha, bias_of(c_band));
    });
    return;
  }
  if constexpr (std::is_same_v<TA, float>) {
    Packed a16 = packed(a, 0);
    product(a16.view, b, c, beta, alpha, bias);
  } else if constexpr (std::is_same_v<TB, float>) {
    Packed b16 = packed(b, 1);
    product(a, b16.view, c, beta, alpha, bias);
  } else {
#if AG_HAVE_DNNL
    profile::Scope scope(profile::Family::Products);
    blas::for_bands(a, b, c, [&](const auto& a_band, const auto& b_band, const auto& c_band) {
      product_one(a_band, b_band, c_band, beta, alpha, bias_of(c_band));
    });
#endif
  }
}

}  // namespace

void gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c, float beta,
          float alpha, const float* bias) {
  product(a, b, c, beta, alpha, bias);
}

void gemm(blas::Matrix<const float> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c, float beta,
          float alpha, const float* bias) {
  product(a, b, c, beta, alpha, bias);
}

void gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const float> b, blas::Matrix<float> c, float beta,
          float alpha, const float* bias) {
  product(a, b, c, beta, alpha, bias);
}

void gemm(blas::Matrix<const float> a, blas::Matrix<const float> b, blas::Matrix<float> c, float beta, float alpha,
          const float* bias) {
  product(a, b, c, beta, alpha, bias);
}

}  // namespace ag::bf16
