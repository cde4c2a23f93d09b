// bf16 rounding, and the matrix products under ag::AutocastGuard (ops/autocast.h).
//
// The independent source for a product under autocast: the same product in float64 of the
// operands rounded to bf16 by hand. bf16 x bf16 is exact in float32 and the sums are float32, so
// the two agree to float32's rounding of a K-term sum, far inside bf16's own step (2^-8): a
// product that skipped the rounding, or rounded an operand it should not, fails.
// Where no bf16 unit or no oneDNN is present, the product tests skip and the refusals are tested.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "../../kernels/bf16/bf16.h"
#include "../../kernels/bf16/bf16_small.h"
#include "../../kernels/cpu/blas.h"
#include "../../kernels/cpu/fast_math.h"
#include "../../ops/autocast_internal.h"
#include "../test_util.h"

namespace ag {
namespace {

#define SKIP_WITHOUT_BF16() \
  if (!bf16::support().available) GTEST_SKIP() << bf16::support().reason

// float32 t, each element rounded to bf16, as float64.
Tensor rounded64(const Tensor& t) {
  std::vector<double> v;
  for (float x : t.to_vector<float>()) v.push_back(bf16::round(x));
  return tensor(v, t.shape(), kFloat64);
}

Tensor to64(const Tensor& t) {
  return tensor(std::vector<double>(t.to(kFloat64).to_vector<double>()), t.shape(), kFloat64);
}

// dh = dy GELU'(h), in float32, as linear_gelu makes it under bf16 products: with the slope of
// fast::normal_bf16, a relative 3e-5 from the exact one (FastMath.NormalBf16RelativeError...).
// Made the kernel's way, so that a dh lying near a bf16 rounding boundary rounds the same way;
// from the exact slope it could round the other way, and the products of dh could then not be
// matched to float32's precision. h as float64 (rounded to float32 here), dy with h's count.
Tensor gelu_dh_for_bf16(const Tensor& h, const Tensor& dy) {
  std::vector<float> hs = h.to(kFloat32).to_vector<float>(), dys = dy.to_vector<float>();
  std::vector<double> dh;
  for (std::size_t i = 0; i < hs.size(); ++i) {
    auto [cdf, pdf] = fast::normal_bf16(hs[i]);
    dh.push_back(dys[i] * (cdf + hs[i] * pdf));  // float32 arithmetic, as the kernel's
  }
  return tensor(dh, h.shape(), kFloat32);
}

// max |a - b| / max |b|, both read as float64.
double rel_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to(kFloat64).to_vector<double>(), y = b.to(kFloat64).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return diff / std::max(scale, 1e-300);
}

Tensor leaf(const Shape& shape, Generator& gen) { return randn(shape, gen).requires_grad_(); }

TEST(Bf16, RoundsToNearestEvenByHand) {
  EXPECT_EQ(bf16::from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16::from_float(-2.0f), 0xc000);
  // 1 + 2^-8 lies half-way between 1 and 1 + 2^-7: ties go to the even mantissa, 1.
  EXPECT_EQ(bf16::round(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3 * 2^-8 lies half-way between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(bf16::round(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  // Just past half-way rounds up, just short of it down.
  EXPECT_EQ(bf16::round(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bf16::round(1.0f + std::ldexp(1.0f, -8) - std::ldexp(1.0f, -20)), 1.0f);
  EXPECT_EQ(bf16::round(3.14159265f), 3.140625f);  // pi keeps 8 significant bits: 11.00100 1
  EXPECT_TRUE(std::isnan(bf16::round(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bf16::round(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16::round(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16::round(-0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(bf16::round(-0.0f)));
  // The same range as float32: 1e30 keeps its magnitude (float16 would overflow at 65504).
  EXPECT_NEAR(bf16::round(1e30f) / 1e30, 1.0, 1.0 / 256);
}

// What a user calls (ops/autocast.h) says what the kernels found and rounds as they do.
TEST(Bf16, TheUsersQueryAndRoundingAreTheKernels) {
  EXPECT_EQ(bf16_support().available, bf16::support().available);
  EXPECT_EQ(bf16_support().unit, bf16::support().unit);
  EXPECT_EQ(bf16_support().reason, bf16::support().reason);
  EXPECT_EQ(&bf16_support(), &bf16_support());  // found once
  for (float f : {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8), 3.14159265f, -0.0f, 1e30f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()})
    EXPECT_EQ(bf16_round(f), bf16::round(f)) << f;
  EXPECT_TRUE(std::signbit(bf16_round(-0.0f)));
  EXPECT_TRUE(std::isnan(bf16_round(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Bf16, ConvertingManyEqualsConvertingOneByOneAndWideningIsExact) {
  Generator gen(3);
  Tensor x = randn({100003}, gen) * 40.0;
  std::vector<float> v = x.to_vector<float>();
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[6] = -std::numeric_limits<float>::infinity();
  v[7] = 65504.0f;
  bf16::Buffer b = bf16::convert(v.data(), static_cast<std::int64_t>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(bf16::to_float(b.data[i])));
      continue;
    }
    ASSERT_EQ(b.data[i], bf16::from_float(v[i])) << "element " << i << " = " << v[i];
  }
  // and back, split across the pool: each value widens to its own bits shifted up by 16, exactly
  std::vector<float> back(v.size());
  bf16::widen(b.data.get(), static_cast<std::int64_t>(v.size()), back.data());
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &back[i], sizeof bits);
    ASSERT_EQ(bits, std::uint32_t{b.data[i]} << 16) << "element " << i;
  }
}

// This program asks oneDNN for its process-wide primitive cache at its default size. oneDNN reads
// ONEDNN_PRIMITIVE_CACHE_CAPACITY when it first needs the cache, long after this runs (before
// main). A shell that had switched the cache off would otherwise let the test below pass with no
// help from the library.
const bool environment_asks_for_cache = setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024", 1) == 0;

// The library switches oneDNN's shared cache off before its first primitive, whatever the
// environment asked: each thread keeps its own primitives (kernels/bf16/bf16.cpp says why sharing them
// races on AMX CPUs). Without that call the capacity would read 1024.
TEST(Bf16, OneDnnsSharedPrimitiveCacheIsOffWhateverTheEnvironmentAsks) {
  SKIP_WITHOUT_BF16();
  ASSERT_TRUE(environment_asks_for_cache);
  Tensor a = ones({3, 4}), b = ones({4, 5}), out;
  {
    AutocastGuard autocast;
    out = a.matmul(b);
  }
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(15, 4.0f));
  EXPECT_EQ(bf16::onednn_primitive_cache_capacity(), 0);
}

// Where bf16 cannot run, the library refuses rather than emulating it: the guard, and a product
// asked for directly, throw with the reason, and autocast stays off. (The programs' choice of
// precision from the command line is tested with them: tests/examples/memory_budget_test.cpp.)
TEST(Autocast, RefusedWhereBf16CannotRun) {
  if (bf16::support().available) GTEST_SKIP() << "bf16 runs here: " << bf16::support().reason;
  EXPECT_TRUE(test::throws_with<std::runtime_error>([] { AutocastGuard guard; }, "unavailable"));
  EXPECT_TRUE(test::throws_with<std::runtime_error>([] { set_autocast_enabled(true); }, bf16::support().reason));
  EXPECT_FALSE(is_autocast_enabled());
  Tensor a = ones({2, 3}), b = ones({3, 2});
  EXPECT_TRUE(test::throws_with<std::runtime_error>(
      [&] {
        bf16::gemm(blas::Matrix<const float>{a.data_ptr<float>(), 2, 3},
                   blas::Matrix<const float>{b.data_ptr<float>(), 3, 2},
                   blas::Matrix<float>{a.mutable_data_ptr<float>(), 2, 2});
      },
      "unavailable"));
}

// The naive backend computes in float32 and float64 only: an op whose products autocast would
// take in bf16 is refused there, naming the op and the backend, not run in float32 unasked;
// an op without products (layer_norm) runs, and autocast off, the products run too.
TEST(Autocast, NaiveKernelsRefuseBf16Products) {
  SKIP_WITHOUT_BF16();
  Generator gen(2);
  Tensor x = randn({3, 5}, gen), w = randn({4, 5}, gen);
  KernelGuard naive(Kernels::Naive);
  {
    AutocastGuard on;
    EXPECT_TRUE(test::throws_with<std::invalid_argument>(
        [&] { linear(x, w, Tensor()); }, "linear: autocast asks for bf16 products, which the naive kernels do not"));
    EXPECT_TRUE(test::throws_with<std::invalid_argument>(
        [&] { matmul(x, w.t()); }, "matmul: autocast asks for bf16 products, which the naive kernels do not"));
    EXPECT_TRUE(test::all_close(layer_norm(x, Tensor(), Tensor(), 1e-5),
                                layer_norm(x.to(kFloat64), Tensor(), Tensor(), 1e-5).to(kFloat32), 1e-6));
  }
  EXPECT_TRUE(test::all_close(linear(x, w, Tensor()), matmul(x, w.t()), 1e-6));
}

TEST(Autocast, GuardIsScopedAndPerThread) {
  SKIP_WITHOUT_BF16();
  EXPECT_FALSE(is_autocast_enabled());
  {
    AutocastGuard on;
    EXPECT_TRUE(is_autocast_enabled());
    {
      AutocastGuard off(false);
      EXPECT_FALSE(is_autocast_enabled());
    }
    EXPECT_TRUE(is_autocast_enabled());
    bool other_thread = true;
    std::thread([&] { other_thread = is_autocast_enabled(); }).join();
    EXPECT_FALSE(other_thread);
  }
  EXPECT_FALSE(is_autocast_enabled());
}

// C = op(A) op(B) over odd shapes, transposes and broadcast batches, and both gradients: each
// equals the float64 product of the bf16-rounded operands.
TEST(Autocast, MatmulForwardAndBackwardAreBf16Products) {
  SKIP_WITHOUT_BF16();
  Generator gen(11);
  struct Case {
    Shape a, b;
    bool transpose_b;
  };
  for (const Case& c :
       {Case{{5, 7}, {7, 9}, false}, Case{{3, 5, 7}, {7, 9}, false}, Case{{2, 1, 5, 6}, {3, 6, 4}, false},
        Case{{3, 5, 33}, {3, 9, 33}, true}, Case{{1, 130}, {130, 3}, false}, Case{{70, 96}, {96, 80}, false}}) {
    SCOPED_TRACE(shape_str(c.a) + " @ " + shape_str(c.b) + (c.transpose_b ? "^T" : ""));
    Tensor a = leaf(c.a, gen), b = leaf(c.b, gen);
    Tensor out, da, db;
    {
      AutocastGuard autocast;
      out = c.transpose_b ? a.matmul(b.transpose(-2, -1)) : a.matmul(b);
    }
    Tensor dout = randn(out.shape(), gen);
    out.backward(dout);  // outside the guard: the node remembers it ran in bf16
    Tensor a64 = rounded64(a), b64 = rounded64(c.transpose_b ? b.transpose(-2, -1) : b), d64 = rounded64(dout);
    Tensor expect = a64.matmul(b64);
    EXPECT_LT(rel_error(out, expect), 2e-6);
    // The same product in float32 differs from it by bf16's rounding: autocast did run.
    Tensor fp32 = c.transpose_b ? a.matmul(b.transpose(-2, -1)) : a.matmul(b);
    EXPECT_GT(rel_error(fp32, expect), 1e-5);
    EXPECT_LT(rel_error(fp32, expect), 2e-2);
    Tensor expect_da = sum_to(d64.matmul(b64.transpose(-2, -1)), a.shape());
    Tensor expect_db = sum_to(a64.transpose(-2, -1).matmul(d64), b64.shape());
    if (c.transpose_b) expect_db = expect_db.transpose(-2, -1);
    EXPECT_LT(rel_error(a.grad(), expect_da), 2e-6);
    EXPECT_LT(rel_error(b.grad(), expect_db), 2e-6);
  }
}

TEST(Autocast, LinearAndLinearGeluForwardAndBackwardAreBf16Products) {
  SKIP_WITHOUT_BF16();
  Generator gen(12);
  for (bool with_bias : {true, false})
    for (bool gelu : {false, true})
      for (Shape xs : {Shape{7, 13}, Shape{3, 50, 13}, Shape{13}}) {
        SCOPED_TRACE(fmt::format("bias {} gelu {} x {}", with_bias, gelu, shape_str(xs)));
        Tensor x = leaf(xs, gen), w = leaf({11, 13}, gen), b = with_bias ? leaf({11}, gen) : Tensor();
        Tensor y;
        {
          AutocastGuard autocast;
          y = gelu ? linear_gelu(x, w, b) : linear(x, w, b);
        }
        Tensor dy = randn(y.shape(), gen);
        y.backward(dy);
        // By hand in float64: h = r(x) r(W)^T + b; y = GELU(h); dh = dy GELU'(h);
        // dx = r(dh) r(W), dW = r(dh)^T r(x), db = sum dh.
        Tensor x2 = rounded64(x).reshape({-1, 13}), w64 = rounded64(w);
        Tensor h = x2.matmul(w64.t());
        if (with_bias) h = h + to64(b);
        Tensor h_leaf = h.detach().requires_grad_();
        Tensor y64 = gelu ? ag::gelu(h_leaf) : h_leaf * 1.0;
        y64.backward(to64(dy).reshape({-1, 11}));
        EXPECT_LT(rel_error(y, y64), 2e-6);
        // The library's dh is float32 before it is rounded: round that float32 value. Under bf16
        // products GELU is fast::normal_bf16's, so each y is within its 3e-5 of the float64 GELU
        // of h, and dh is made the kernel's way (gelu_dh_for_bf16).
        Tensor dh32 = gelu ? gelu_dh_for_bf16(h, dy) : h_leaf.grad().to(kFloat32);
        if (gelu) {
          std::vector<double> ys = y.to(kFloat64).to_vector<double>(), exact = y64.to_vector<double>();
          for (std::size_t i = 0; i < ys.size(); ++i)
            EXPECT_NEAR(ys[i], exact[i], 3e-5 * std::abs(exact[i]) + 1e-6) << "at element " << i;
        }
        Tensor dh2 = rounded64(dh32);
        EXPECT_LT(rel_error(x.grad(), dh2.matmul(w64)), 2e-5);
        EXPECT_LT(rel_error(w.grad(), dh2.t().matmul(x2)), 2e-5);
        if (with_bias) {
          EXPECT_LT(rel_error(b.grad(), dh32.to(kFloat64).sum(0)), 1e-6);
        }
      }
  // Each subset of x, W and b asking for a gradient (only db: no product runs; a frozen W: dx
  // and db; an x that is data: dW and db), against the same by-hand formulas.
  for (bool gelu : {false, true})
    for (int wanted = 1; wanted < 8; ++wanted) {
      SCOPED_TRACE(fmt::format("gelu {}, gradients of x {} W {} b {}", gelu, wanted & 1, (wanted >> 1) & 1,
                               (wanted >> 2) & 1));
      Tensor x = randn({41, 13}, gen), w = randn({11, 13}, gen), b = randn({11}, gen);
      if (wanted & 1) x.requires_grad_();
      if (wanted & 2) w.requires_grad_();
      if (wanted & 4) b.requires_grad_();
      Tensor y;
      {
        AutocastGuard autocast;
        y = gelu ? linear_gelu(x, w, b) : linear(x, w, b);
      }
      Tensor dy = randn(y.shape(), gen);
      y.backward(dy);
      Tensor x2 = rounded64(x), w64 = rounded64(w), h = x2.matmul(w64.t()) + to64(b);
      Tensor dh32 = gelu ? gelu_dh_for_bf16(h, dy) : dy, dh2 = rounded64(dh32);
      if (wanted & 1) {
        EXPECT_LT(rel_error(x.grad(), dh2.matmul(w64)), 2e-5);
      }
      if (wanted & 2) {
        EXPECT_LT(rel_error(w.grad(), dh2.t().matmul(x2)), 2e-5);
      }
      if (wanted & 4) {
        EXPECT_LT(rel_error(b.grad(), dh32.to(kFloat64).sum(0)), 1e-6);
      }
    }
}

// Under bf16 oneDNN adds linear's bias as it writes y. A product with few rows and many columns
// is cut into bands of columns across two threads; each band must add its own columns' bias.
TEST(Autocast, LinearBiasReachesEveryBandOfColumns) {
  SKIP_WITHOUT_BF16();
  Generator gen(14);
  test::ThreadCount threads(2);
  for (Shape xs : {Shape{5, 64}, Shape{70, 64}}) {  // 5 rows: bands of columns; 70: of rows
    SCOPED_TRACE(shape_str(xs));
    Tensor x = leaf(xs, gen), w = leaf({1000, 64}, gen), b = leaf({1000}, gen);
    Tensor y;
    {
      AutocastGuard autocast;
      y = linear(x, w, b);
    }
    Tensor expect = rounded64(x).matmul(rounded64(w).t()) + to64(b);
    EXPECT_LT(rel_error(y, expect), 2e-6);
  }
  // A bias is added unscaled: with alpha other than 1 the product refuses, naming itself.
  std::vector<std::uint16_t> ones(4, bf16::from_float(1.0f));
  float c[4], bias[2] = {1.0f, 2.0f};
  blas::Matrix<const std::uint16_t> m{ones.data(), 2, 2};
  try {
    bf16::gemm(m, m, blas::Matrix<float>{c, 2, 2}, 0.0f, 2.0f, bias);
    ADD_FAILURE() << "alpha 2 with a bias was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bf16::gemm: a bias is added unscaled, so alpha must be 1, got 2"),
              std::string::npos)
        << e.what();
  }
}

// bf16::gemm on small products (attention's tiles) runs the AVX512-BF16 kernel of
// kernels/bf16/bf16_small.h instead of oneDNN, packing each operand as it reads it. Over every storage
// (float32 rounded on the way, or bf16 already), both transposes, strides, start offsets, sizes
// off the kernel's 8 x 32 tiles (every height of a last tile, 1 to 8) and its pairs of k, alpha,
// beta and a bias: each element equals the float64 product of the rounded operands within
// float32's bound for a k-term sum in any order, (k + 3) 2^-24 (|alpha| sum |a b| + |bias| +
// |beta c|). Everything the views do not cover is NaN, so a read past one shows; with beta 0, C
// starts as NaN and must not be read; nothing past C's view (columns or rows) is written. On two
// threads, the larger products are cut into bands. The last size goes to oneDNN.
TEST(Bf16, SmallProductsAreFloat64ProductsOfTheRoundedOperands) {
  SKIP_WITHOUT_BF16();
  test::ThreadCount threads(2);
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  struct Size {
    std::int64_t m, n, k;
  };
  int cases = 0, small = 0;
  for (Size z : {Size{1, 1, 1}, Size{7, 15, 3}, Size{8, 32, 2}, Size{9, 33, 33}, Size{10, 40, 6}, Size{12, 33, 5},
                 Size{13, 20, 64}, Size{14, 64, 32}, Size{17, 130, 31}, Size{64, 128, 32}, Size{64, 57, 64},
                 Size{3, 1, 130}, Size{70, 300, 130}})
    for (int storage = 0; storage < 4; ++storage)  // bit 0: A is bf16; bit 1: B is bf16
      for (int transposes = 0; transposes < 4; ++transposes)
        for (auto [alpha, beta, with_bias] :
             {std::tuple{1.0f, 0.0f, false}, std::tuple{0.125f, 0.5f, false}, std::tuple{1.0f, -1.0f, true}}) {
          // Stored with a leading dimension 2 or 3 past what the view reads, from the first element
          // or the second (a bf16 A with an even k, an even stride and an even start is read in
          // place, without packing; the others are packed).
          std::int64_t pad = 2 + cases % 2, start = (cases / 2) % 2;
          SCOPED_TRACE(fmt::format("m {} n {} k {} storage {} transposes {} alpha {} beta {} bias {} pad {} start {}",
                                   z.m, z.n, z.k, storage, transposes, alpha, beta, with_bias, pad, start));
          bool ta = transposes & 1, tb = transposes & 2;
          std::int64_t a_rows = ta ? z.k : z.m, a_cols = ta ? z.m : z.k, b_rows = tb ? z.n : z.k,
                       b_cols = tb ? z.k : z.n, lda = a_cols + pad, ldb = b_cols + pad, ldc = z.n + pad;
          // One row more than the view for C, and NaN wherever no view reads.
          std::vector<float> a(static_cast<std::size_t>(start + a_rows * lda), kNaN),
              b(static_cast<std::size_t>(start + b_rows * ldb), kNaN),
              c(static_cast<std::size_t>(start + (z.m + 1) * ldc), kNaN), bias(static_cast<std::size_t>(z.n));
          for (std::int64_t r = 0; r < a_rows; ++r)
            for (std::int64_t j = 0; j < a_cols; ++j) a[start + r * lda + j] = normal(rng);
          for (std::int64_t r = 0; r < b_rows; ++r)
            for (std::int64_t j = 0; j < b_cols; ++j) b[start + r * ldb + j] = normal(rng);
          for (float& x : bias) x = normal(rng);
          if (beta != 0.0f)
            for (std::int64_t i = 0; i < z.m; ++i)
              for (std::int64_t j = 0; j < z.n; ++j) c[start + i * ldc + j] = normal(rng);
          std::vector<float> c0 = c;
          std::vector<std::uint16_t> a16(a.size()), b16(b.size());
          for (std::size_t i = 0; i < a.size(); ++i) a16[i] = bf16::from_float(a[i]);
          for (std::size_t i = 0; i < b.size(); ++i) b16[i] = bf16::from_float(b[i]);
          blas::Matrix<const float> af{a.data() + start, a_rows, a_cols, lda, ta},
              bf{b.data() + start, b_rows, b_cols, ldb, tb};
          blas::Matrix<const std::uint16_t> ah{a16.data() + start, a_rows, a_cols, lda, ta},
              bh{b16.data() + start, b_rows, b_cols, ldb, tb};
          float* cs = c.data() + start;
          blas::Matrix<float> cm{cs, z.m, z.n, ldc};
          const float* bp = with_bias ? bias.data() : nullptr;
          switch (storage) {
            case 0: bf16::gemm(af, bf, cm, beta, alpha, bp); break;
            case 1: bf16::gemm(ah, bf, cm, beta, alpha, bp); break;
            case 2: bf16::gemm(af, bh, cm, beta, alpha, bp); break;
            default: bf16::gemm(ah, bh, cm, beta, alpha, bp); break;
          }
          ++cases;
          small += bf16::small::takes(z.m, z.n, z.k);
          auto at = [start](const std::vector<std::uint16_t>& x, std::int64_t r, std::int64_t col, std::int64_t ld,
                            bool t) {
            return static_cast<double>(bf16::to_float(x[start + (t ? col * ld + r : r * ld + col)]));
          };
          for (std::int64_t i = 0; i < z.m; ++i)
            for (std::int64_t j = 0; j < z.n; ++j) {
              double sum = 0, size = 0;
              for (std::int64_t l = 0; l < z.k; ++l) {
                double term = at(a16, i, l, lda, ta) * at(b16, l, j, ldb, tb);
                sum += term;
                size += std::abs(term);
              }
              double before = c0[start + i * ldc + j], extra = with_bias ? bias[j] : 0.0;
              double expect = alpha * sum + extra + (beta == 0.0f ? 0.0 : beta * before);
              double bound =
                  (z.k + 3) * std::ldexp(1.0, -24) *
                  (std::abs(alpha) * size + std::abs(extra) + (beta == 0.0f ? 0.0 : std::abs(beta * before)));
              ASSERT_LE(std::abs(cs[i * ldc + j] - expect), bound) << "at C[" << i << ", " << j << "]";
            }
          for (std::size_t e = 0; e < c.size(); ++e) {  // past the view, C is untouched
            std::int64_t at_c = static_cast<std::int64_t>(e) - start;
            if (at_c >= 0 && at_c / ldc < z.m && at_c % ldc < z.n) continue;
            ASSERT_TRUE(std::isnan(c[e])) << "element " << e << " of C's storage, outside the view, was written";
          }
        }
  // Where the CPU has AVX512-BF16, every size here but the last (oneDNN's) goes to the small kernel.
  if (__builtin_cpu_supports("avx512bf16")) {
    EXPECT_EQ(small, cases - 4 * 4 * 3);
  }
}

// Under autocast, linear and linear_gelu keep only the bf16 copy of an input activation for
// backward: the float32 tensor is freed once the caller drops it, and the gradients are what
// the by-hand float64 formula gives (dW = r(dh)^T r(x)) and what the run that keeps the float32
// input gives (inside a DualLevel, whose backward passes read it). A backward with create_graph,
// which reads the input itself, works while the caller keeps it and is refused, naming the op,
// once it is gone.
TEST(Autocast, LinearKeepsOnlyTheBf16CopyOfAnActivation) {
  SKIP_WITHOUT_BF16();
  Generator gen(21);
  for (bool gelu : {false, true}) {
    SCOPED_TRACE(gelu ? "linear_gelu" : "linear");
    Tensor x = leaf({3, 9, 13}, gen), w = leaf({11, 13}, gen), b = leaf({11}, gen);
    Tensor dy = randn({3, 9, 11}, gen);
    auto run = [&](bool keep_alive, bool in_dual_level) {
      for (Tensor* p : {&x, &w, &b}) p->zero_grad();
      std::optional<fwad::DualLevel> level;
      if (in_dual_level) level.emplace();
      Tensor y, a = x * 2.0;  // the activation: a temporary with history
      std::weak_ptr<TensorImpl> a_impl = a.impl();
      {
        AutocastGuard autocast;
        y = gelu ? linear_gelu(a, w, b) : linear(a, w, b);
      }
      if (!keep_alive) a = Tensor();
      bool freed = a_impl.expired();
      y.backward(dy);
      return std::tuple{freed, x.grad().clone(), w.grad().clone(), b.grad().clone()};
    };
    auto [freed, dx, dw, db] = run(false, false);
    EXPECT_TRUE(freed);  // the node holds no float32 copy of the activation
    auto [held, dx_held, dw_held, db_held] = run(false, true);
    EXPECT_FALSE(held);  // a DualLevel keeps it: its backward may read it
    EXPECT_EQ(rel_error(dx, dx_held), 0.0);
    EXPECT_EQ(rel_error(dw, dw_held), 0.0);
    EXPECT_EQ(rel_error(db, db_held), 0.0);
    // By hand in float64, as in the test above.
    Tensor a2 = rounded64(x * 2.0).reshape({-1, 13}), w64 = rounded64(w);
    Tensor h_leaf = (a2.matmul(w64.t()) + to64(b)).detach().requires_grad_();
    (gelu ? ag::gelu(h_leaf) : h_leaf * 1.0).backward(to64(dy).reshape({-1, 11}));
    Tensor dh2 = rounded64(gelu ? gelu_dh_for_bf16(h_leaf.detach(), dy) : h_leaf.grad().to(kFloat32));
    EXPECT_LT(rel_error(w.grad(), dh2.t().matmul(a2)), 2e-5);
    EXPECT_LT(rel_error(x.grad(), (dh2.matmul(w64) * 2.0).reshape({3, 9, 13})), 2e-5);

    // A backward with create_graph reads the activation itself: the tensor while the caller
    // keeps it, and once it is gone a float32 tensor made from the bf16 copy, in its place in
    // the graph. Inside the guard the products round both to the same values, so the second
    // derivative through x (which linear_gelu's curvature reads x for) agrees exactly.
    Tensor v = randn({11, 13}, gen);
    std::vector<Tensor> second;
    for (bool keep_alive : {true, false}) {
      AutocastGuard autocast;
      Tensor a = x * 2.0;
      std::weak_ptr<TensorImpl> a_impl = a.impl();
      Tensor y = gelu ? linear_gelu(a, w, b) : linear(a, w, b);
      if (!keep_alive) a = Tensor();
      EXPECT_EQ(a_impl.expired(), !keep_alive);
      Tensor g = grad({(y * dy).sum()}, {w}, {}, {.create_graph = true})[0];
      EXPECT_LT(rel_error(g, dw), 1e-6);
      second.push_back(grad({(g * v).sum()}, {x})[0]);
    }
    EXPECT_GT((second[0] * second[0]).sum().item(), 0.0);
    EXPECT_EQ(rel_error(second[0], second[1]), 0.0);
  }
}

// Runs `forward` under autocast twice, as it is and inside a DualLevel (which keeps every input
// a backward may read), then backward from dout. The inputs `forward` made (the second thing it
// returns) are freed the first time only, and the leaves' gradients are the same bits both times.
void expect_freed_with_the_same_gradients(const std::vector<Tensor>& leaves, const Tensor& dout,
                                          const std::function<std::pair<Tensor, std::vector<Tensor>>()>& forward) {
  std::vector<std::vector<Tensor>> grads;
  for (bool in_dual_level : {false, true}) {
    for (Tensor leaf : leaves) leaf.zero_grad();
    std::optional<fwad::DualLevel> level;
    if (in_dual_level) level.emplace();
    Tensor out;
    std::vector<std::weak_ptr<TensorImpl>> made;
    {
      AutocastGuard autocast;
      auto [output, inputs] = forward();
      out = output;
      for (const Tensor& t : inputs) made.push_back(t.impl());
    }
    for (const auto& m : made) EXPECT_EQ(m.expired(), !in_dual_level);
    out.backward(dout);
    grads.emplace_back();
    for (const Tensor& leaf : leaves) grads.back().push_back(leaf.grad().clone());
  }
  for (std::size_t i = 0; i < leaves.size(); ++i) EXPECT_EQ(rel_error(grads[0][i], grads[1][i]), 0.0);
  EXPECT_GT((grads[0][0] * grads[0][0]).sum().item(), 0.0);
}

// Attention, as linear above: under autocast with a backward to come it keeps its forward's
// bf16 copies of q, k and v, and backward reads those alone. The float32 inputs are freed when the
// caller drops them, and the gradients are bit for bit those of a backward that reads the
// tensors and rounds them again (inside a DualLevel the inputs are kept). With one query block
// (Tq = 37) and with three (Tq = 150), T_q != T_k, a padding mask, causal or not; and packed.
TEST(Autocast, AttentionKeepsOnlyTheBf16CopiesOfItsInputs) {
  SKIP_WITHOUT_BF16();
  Generator gen(23);
  const std::int64_t B = 2, H = 3, d = 8, dv = 6;
  for (std::int64_t tq : {37, 150})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("Tq {} causal {}", tq, causal));
      std::int64_t tk = tq + 5;
      std::vector<double> keep(static_cast<std::size_t>(B * tk), 1.0);
      for (std::int64_t j = tk - 4; j < tk; ++j) keep[static_cast<std::size_t>(tk + j)] = 0.0;  // batch 1
      Tensor mask = tensor(keep, {B, 1, 1, tk}, kBool);
      Tensor x = leaf({B, H, tq, d}, gen), y = leaf({B, H, tk, d}, gen), z = leaf({B, H, tk, dv}, gen);
      Tensor dout = randn({B, H, tq, dv}, gen);
      expect_freed_with_the_same_gradients({x, y, z}, dout, [&] {
        Tensor q = x * 2.0, k = y * 2.0, v = z * 2.0;  // activations: temporaries with history
        return std::pair{scaled_dot_product_attention(q, k, v, mask, causal).output, std::vector{q, k, v}};
      });

      // A backward with create_graph reads the inputs themselves: the tensors while the caller
      // keeps them, else float32 tensors made from the copies. The fused rules keep the
      // forward's bf16 policy, whose products round both to the same values, so the gradient
      // and the second derivative agree exactly. The loss is not linear in out, so the second
      // pass runs the forward-mode rule on those inputs too.
      Tensor w = randn(x.shape(), gen);
      std::vector<Tensor> first, second;
      for (bool keep_alive : {true, false}) {
        Tensor q = x * 2.0, k = y * 2.0, v = z * 2.0, out;
        {
          AutocastGuard autocast;
          out = scaled_dot_product_attention(q, k, v, mask, causal).output;
        }
        std::weak_ptr<TensorImpl> k_impl = k.impl();
        if (!keep_alive) q = k = v = Tensor();
        EXPECT_EQ(k_impl.expired(), !keep_alive);
        first.push_back(grad({(out * out * dout).sum()}, {x}, {}, {.create_graph = true})[0]);
        second.push_back(grad({(first.back() * w).sum()}, {y})[0]);
      }
      EXPECT_GT((second[0] * second[0]).sum().item(), 0.0);
      EXPECT_EQ(rel_error(first[0], first[1]), 0.0);
      EXPECT_EQ(rel_error(second[0], second[1]), 0.0);
    }
  // One tensor as q, k and v, and a k that needs no gradient: freed too, the same gradients as
  // when kept. v with no columns (dv = 0): nothing to copy, and the gradients are float32's zeros.
  Tensor x = leaf({B, H, 40, d}, gen), y = leaf({B, H, 40, d}, gen);
  for (bool same : {true, false}) {
    SCOPED_TRACE(same ? "q = k = v" : "k needs no gradient");
    expect_freed_with_the_same_gradients({x}, randn({B, H, 40, d}, gen), [&] {
      Tensor q = x * 2.0, k = same ? q : y.detach() * 2.0, v = same ? q : y * 1.0;
      return std::pair{scaled_dot_product_attention(q, k, v, {}, true).output, std::vector{k}};
    });
  }
  Tensor no_columns = zeros({B, H, 40, 0}).requires_grad_();
  for (bool autocast_on : {true, false}) {
    x.zero_grad();
    std::optional<AutocastGuard> autocast;
    if (autocast_on) autocast.emplace();
    Tensor out = scaled_dot_product_attention(x * 2.0, y * 2.0, no_columns * 1.0, {}, true).output;
    autocast.reset();
    EXPECT_EQ(out.numel(), 0);
    out.sum().backward();
    EXPECT_EQ((x.grad() * x.grad()).sum().item(), 0.0);
  }
  // Packed: one [B, T, 3 H d] input, freed as well, the same gradient as when it is kept.
  Tensor xp = leaf({B, 150, 3 * H * d}, gen);
  expect_freed_with_the_same_gradients({xp}, randn({B, 150, H, d}, gen), [&] {
    Tensor qkv = xp * 2.0;
    return std::pair{scaled_dot_product_attention_packed(qkv, H, {}, true).output, std::vector{qkv}};
  });
}

// The fused attention in its three layouts, with padding and causal masks, B=2, H=3, Tq != Tk:
// output and dq, dk, dv within bf16's tolerance of float64, and measurably not float32's. With
// one query block (Tq = 37) the tiles round their own operands; with three (Tq = 150) q, k, v
// and dout are rounded whole once per call and the tiles read those copies.
void attention_within_bf16_tolerance(std::int64_t Tq) {
  Generator gen(13);
  const std::int64_t B = 2, H = 3, Tk = Tq + 8, d = 16, dv = 12;
  std::vector<double> keep(B * Tk, 1.0);
  for (std::int64_t j = Tk - 5; j < Tk; ++j) keep[static_cast<std::size_t>(Tk + j)] = 0.0;  // batch 1: 5 padded keys
  Tensor pad = tensor(keep, {B, 1, 1, Tk}, kBool);
  for (bool causal : {false, true})
    for (bool masked : {false, true}) {
      SCOPED_TRACE(fmt::format("causal {} masked {}", causal, masked));
      Tensor q = leaf({B, H, Tq, d}, gen), k = leaf({B, H, Tk, d}, gen), v = leaf({B, H, Tk, dv}, gen);
      Tensor mask = masked ? pad : Tensor();
      Tensor out;
      {
        AutocastGuard autocast;
        out = scaled_dot_product_attention(q, k, v, mask, causal).output;
      }
      Tensor dout = randn(out.shape(), gen);
      out.backward(dout);
      Tensor q64 = to64(q).requires_grad_(), k64 = to64(k).requires_grad_(), v64 = to64(v).requires_grad_();
      Tensor out64 = scaled_dot_product_attention(q64, k64, v64, mask, causal).output;
      out64.backward(to64(dout));
      Tensor fp32 = scaled_dot_product_attention(q, k, v, mask, causal).output;
      EXPECT_LT(rel_error(fp32, out64), 1e-5);  // float32 alone
      for (auto [got, want] : {std::pair{out, out64}, std::pair{q.grad(), q64.grad()}, std::pair{k.grad(), k64.grad()},
                               std::pair{v.grad(), v64.grad()}}) {
        double e = rel_error(got, want);
        EXPECT_LT(e, 3e-2);
        EXPECT_GT(e, 1e-4);  // bf16's rounding shows: the products did run in bf16
      }
    }
  // [B, T, H, d] and packed: the same numbers as [B, H, T, d], which is checked above.
  Tensor qkv = leaf({B, Tq, 3 * H * d}, gen);
  Tensor packed, split;
  {
    AutocastGuard autocast;
    packed = scaled_dot_product_attention_packed(qkv, H, {}, true).output;
    std::vector<Tensor> parts = ag::split(qkv.reshape({B, Tq, 3, H, d}), 1, 2);
    split = scaled_dot_product_attention_bthd(parts[0].squeeze(2), parts[1].squeeze(2), parts[2].squeeze(2), {}, true)
                .output;
  }
  EXPECT_EQ(rel_error(packed, split), 0.0);
  Tensor fp32 = scaled_dot_product_attention_packed(qkv, H, {}, true).output;
  EXPECT_GT(rel_error(packed, fp32), 1e-4);
  EXPECT_LT(rel_error(packed, fp32), 3e-2);
}

TEST(Autocast, AttentionIsWithinBf16ToleranceOfFloat64) {
  SKIP_WITHOUT_BF16();
  for (std::int64_t tq : {37, 150}) {
    SCOPED_TRACE(fmt::format("Tq {}", tq));
    attention_within_bf16_tolerance(tq);
  }
}

// Empty sizes: a product with M, N or K zero and a linear over no rows give under autocast what
// float32 gives (an empty result, or zeros where K = 0), and so do their gradients; attention
// refuses an empty input as float32 does. Never a crash inside the bf16 library.
TEST(Autocast, EmptySizesGiveWhatFloat32Gives) {
  SKIP_WITHOUT_BF16();
  Generator gen(16);
  for (auto [as, bs] : {std::pair{Shape{0, 5}, Shape{5, 3}}, std::pair{Shape{4, 0}, Shape{0, 3}},
                        std::pair{Shape{4, 5}, Shape{5, 0}}, std::pair{Shape{0, 4, 5}, Shape{5, 3}}}) {
    SCOPED_TRACE(shape_str(as) + " @ " + shape_str(bs));
    Tensor a = leaf(as, gen), b = leaf(bs, gen);
    Tensor out;
    {
      AutocastGuard autocast;
      out = a.matmul(b);
    }
    Tensor expect = a.detach().matmul(b.detach());
    ASSERT_EQ(out.shape(), expect.shape());
    EXPECT_EQ(out.to_vector<float>(), expect.to_vector<float>());
    out.sum().backward();
    EXPECT_EQ(a.grad().shape(), as);
    EXPECT_EQ(b.grad().shape(), bs);
    for (float g : a.grad().to_vector<float>()) EXPECT_EQ(g, 0.0f);  // N = 0: nothing flows back
    for (float g : b.grad().to_vector<float>()) EXPECT_EQ(g, 0.0f);  // or M = 0
  }
  Tensor x = leaf({0, 6}, gen), w = leaf({4, 6}, gen), bias = leaf({4}, gen);
  {
    AutocastGuard autocast;
    Tensor y = linear_gelu(x, w, bias);
    EXPECT_EQ(y.shape(), (Shape{0, 4}));
    y.sum().backward();
  }
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(24, 0.0f));
  // Attention refuses a query-less input in float32; under autocast it refuses it the same way.
  Tensor q = leaf({2, 3, 0, 8}, gen), k = leaf({2, 3, 5, 8}, gen), v = leaf({2, 3, 5, 4}, gen);
  std::string fp32_error, bf16_error;
  try {
    scaled_dot_product_attention(q, k, v, {}, false);
  } catch (const std::invalid_argument& e) {
    fp32_error = e.what();
  }
  try {
    AutocastGuard autocast;
    scaled_dot_product_attention(q, k, v, {}, false);
  } catch (const std::invalid_argument& e) {
    bf16_error = e.what();
  }
  EXPECT_NE(fp32_error.find("[2, 3, 0, 8]"), std::string::npos) << fp32_error;
  EXPECT_EQ(bf16_error, fp32_error);
}

TEST(Autocast, Float64NeverAutocastsAndGradcheckPasses) {
  SKIP_WITHOUT_BF16();
  Generator gen(14);
  Tensor a = randn({4, 5}, gen, kFloat64).requires_grad_(), w = randn({3, 5}, gen, kFloat64).requires_grad_();
  Tensor plain = linear(a, w).matmul(w);
  AutocastGuard autocast;
  Tensor under = linear(a, w).matmul(w);
  EXPECT_EQ(rel_error(under, plain), 0.0);
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]).matmul(in[1]).sum(); }, {a, w}));
  Tensor q = randn({2, 3, 4, 5}, gen, kFloat64).requires_grad_(),
         k = randn({2, 3, 6, 5}, gen, kFloat64).requires_grad_(),
         v = randn({2, 3, 6, 2}, gen, kFloat64).requires_grad_();
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return scaled_dot_product_attention(in[0], in[1], in[2], {}, true).output.sum();
      },
      {q, k, v}));
}

// A parameter is rounded once per version: forward and backward of a model that uses each
// weight twice cast each once; an optimizer step (a new version) casts again, once. The same
// under the reference kernels, whose linear reads W transposed where it lies
// (matmul_transposed), so that there too the weight is the parameter itself.
TEST(Autocast, EachParameterIsCastOncePerStep) {
  SKIP_WITHOUT_BF16();
  Generator gen(15);
  nn::Linear first(8, 16), second(16, 8);
  optim::SGD sgd(first.parameters(), {.lr = 0.1});
  Tensor x = randn({5, 8}, gen);
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard kernels(k);
    for (int step = 0; step < 3; ++step) {
      std::int64_t before = detail::autocast_casts();
      AutocastGuard autocast;
      Tensor h = first.forward(x);
      Tensor y = second.forward(first.forward(second.forward(h)));  // each weight used twice
      (y * y).mean().backward();
      EXPECT_EQ(detail::autocast_casts() - before, 2) << kernels_name(k) << ", step " << step;
      sgd.step();
      sgd.zero_grad();
    }
  }
  // A parameter multiplied by matmul, twice, with backward after the guard (and so its cache)
  // has ended: the forward's copy is kept for backward, which reads it for the gradient of the
  // other operand; still one rounding per step. With g = dL/dy = 1 and h = 1.5 u:
  //   dP = r(h)^T g + r(2h)^T g,   du = 1.5 (g r(P)^T + 2 g r(P)^T) = 4.5 g r(P)^T.
  Tensor p = leaf({8, 6}, gen), u = leaf({5, 8}, gen);
  optim::SGD sgd_p({p}, {.lr = 0.1});
  for (int step = 0; step < 2; ++step) {
    std::int64_t before = detail::autocast_casts();
    Tensor y, h;
    {
      AutocastGuard autocast;
      h = u * 1.5;  // an activation: rounded at every use, not cached
      y = h.matmul(p) + (h * 2.0).matmul(p);
    }
    u.zero_grad();
    y.sum().backward();
    EXPECT_EQ(detail::autocast_casts() - before, 1) << "step " << step;
    Tensor ones = ones_like(y).to(kFloat64);
    Tensor expect_dp = rounded64(h).t().matmul(ones) + rounded64(h * 2.0).t().matmul(ones);
    EXPECT_LT(rel_error(p.grad(), expect_dp), 2e-6);
    EXPECT_LT(rel_error(u.grad(), ones.matmul(rounded64(p).t()) * 4.5), 2e-6);
    sgd_p.step();
    sgd_p.zero_grad();
  }

  // The weights, and so the checkpoints, stay float32; so do the gradients.
  for (const Tensor& p : first.parameters()) EXPECT_EQ(p.dtype(), kFloat32);
  Tensor y;
  {
    AutocastGuard autocast;
    y = first.forward(x);
  }
  EXPECT_EQ(y.dtype(), kFloat32);
  y.sum().backward();
  EXPECT_EQ(first.weight.grad().dtype(), kFloat32);
}

}  // namespace
}  // namespace ag
