// kernels/naive/ against kernels/cpu/: every entry both backends' tables serve gives the same
// float64 result to 1e-12 (relative, or absolute below 1), on odd non-square sizes, with each
// optional pointer null and given; a few values worked out by hand; swiglu's backward against
// central differences of its forward; the float32 table close to the float64 one; and the naive
// kernels' call count (ops/call_counts.h).
//
// Outputs start as NaN: an element a kernel should write and does not shows up as NaN, which
// agrees with nothing, and an output that is not wanted must still be NaN afterwards.
#include "../../kernels/naive_calls.h"
#include "../../kernels/products.h"
#include "../../kernels/table.h"
#include "../../ops/call_counts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace ag::backends {
namespace {

using attention_kernels::Dims;
using attention_kernels::Layouts;
using attention_kernels::MaskReader;
using attention_kernels::View;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const Products kPlain;  // the BLAS policy: the only one the naive backend is handed

const Table<double>& naive64() { return naive_backend().f64; }
const Table<double>& cpu64() { return cpu_backend().f64; }

std::vector<double> uniform(std::int64_t size, std::mt19937& gen, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(size));
  for (double& x : v) x = dist(gen);
  return v;
}
std::vector<double> unwritten(std::int64_t size) { return std::vector<double>(static_cast<std::size_t>(size), kNaN); }

// Equal (equal infinities too), or within tol relatively, or absolutely below 1. NaN never agrees.
bool close(double a, double b, double tol) {
  return a == b || std::abs(a - b) <= tol * std::max({1.0, std::abs(a), std::abs(b)});
}

// Element by element, those marked in `wanted` (every one when it is empty) agree; the others
// are still NaN in both, as neither backend was asked to write them.
::testing::AssertionResult agree(const std::vector<double>& naive, const std::vector<double>& cpu,
                                 const std::vector<bool>& wanted = {}, double tol = 1e-12) {
  if (naive.size() != cpu.size())
    return ::testing::AssertionFailure() << "sizes differ: naive " << naive.size() << ", cpu " << cpu.size();
  for (std::size_t i = 0; i < naive.size(); ++i) {
    bool ok = wanted.empty() || wanted[i] ? close(naive[i], cpu[i], tol) : std::isnan(naive[i]) && std::isnan(cpu[i]);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << (wanted.empty() || wanted[i] ? "" : " (not wanted)")
                                           << ": naive " << naive[i] << ", cpu " << cpu[i];
  }
  return ::testing::AssertionSuccess();
}

template <class T>
T* data_or_null(std::vector<T>& v, bool wanted) {
  return wanted ? v.data() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// linear, linear_gelu, linear_backward and gelu

TEST(NaiveBackend, LinearMatchesCpu) {
  std::mt19937 gen(1);
  for (LinearSizes n : {LinearSizes{5, 7, 3}, LinearSizes{0, 7, 3}, LinearSizes{5, 0, 3}, LinearSizes{5, 7, 0}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << n.rows << ", in " << n.in << ", out " << n.out);
    std::vector<double> x = uniform(n.rows * n.in, gen), w = uniform(n.out * n.in, gen), b = uniform(n.out, gen);
    std::vector<double> dy = uniform(n.rows * n.out, gen), slope = uniform(n.rows * n.out, gen, 0.0, 1.2);
    for (bool with_bias : {false, true}) {
      const double* bias = with_bias ? b.data() : nullptr;
      std::vector<double> y1 = unwritten(n.rows * n.out), y2 = y1;
      naive64().linear(kPlain, n, x.data(), w.data(), bias, y1.data());
      cpu64().linear(kPlain, n, x.data(), w.data(), bias, y2.data());
      EXPECT_TRUE(agree(y1, y2)) << "linear, bias " << with_bias;
      for (GeluForm form : {GeluForm::Exact, GeluForm::Tanh})
        for (bool with_slope : {false, true}) {
          std::vector<double> g1 = unwritten(n.rows * n.out), g2 = g1, s1 = g1, s2 = g1;
          naive64().linear_gelu(kPlain, n, x.data(), w.data(), bias, g1.data(), data_or_null(s1, with_slope), form);
          cpu64().linear_gelu(kPlain, n, x.data(), w.data(), bias, g2.data(), data_or_null(s2, with_slope), form);
          EXPECT_TRUE(agree(g1, g2)) << "linear_gelu y, bias " << with_bias << ", tanh " << (form == GeluForm::Tanh);
          std::vector<bool> slope_wanted(s1.size(), with_slope);
          EXPECT_TRUE(agree(s1, s2, slope_wanted)) << "linear_gelu slope, tanh " << (form == GeluForm::Tanh);
        }
    }
    for (bool with_slope : {false, true})
      for (int want = 0; want < 8; ++want) {  // bits: dx, dw, db
        bool want_dx = want & 1, want_dw = want & 2, want_db = want & 4;
        std::vector<double> dx1 = unwritten(n.rows * n.in), dx2 = dx1, dw1 = unwritten(n.out * n.in), dw2 = dw1;
        std::vector<double> db1 = unwritten(n.out), db2 = db1;
        const double* s = with_slope ? slope.data() : nullptr;
        naive64().linear_backward(kPlain, n, dy.data(), s, x.data(), nullptr, w.data(), data_or_null(dx1, want_dx),
                                  data_or_null(dw1, want_dw), data_or_null(db1, want_db));
        cpu64().linear_backward(kPlain, n, dy.data(), s, x.data(), nullptr, w.data(), data_or_null(dx2, want_dx),
                                data_or_null(dw2, want_dw), data_or_null(db2, want_db));
        SCOPED_TRACE(::testing::Message()
                     << "slope " << with_slope << ", wanted dx " << want_dx << " dw " << want_dw << " db " << want_db);
        EXPECT_TRUE(agree(dx1, dx2, std::vector<bool>(dx1.size(), want_dx))) << "dx";
        EXPECT_TRUE(agree(dw1, dw2, std::vector<bool>(dw1.size(), want_dw))) << "dw";
        EXPECT_TRUE(agree(db1, db2, std::vector<bool>(db1.size(), want_db))) << "db";
      }
  }
}

TEST(NaiveBackend, GeluMatchesCpu) {
  std::mt19937 gen(2);
  std::vector<double> x = uniform(11, gen, -4.0, 4.0);
  for (GeluForm form : {GeluForm::Exact, GeluForm::Tanh})
    for (bool with_slope : {false, true}) {
      std::vector<double> y1 = unwritten(11), y2 = y1, s1 = y1, s2 = y1;
      naive64().gelu(11, x.data(), y1.data(), data_or_null(s1, with_slope), form);
      cpu64().gelu(11, x.data(), y2.data(), data_or_null(s2, with_slope), form);
      EXPECT_TRUE(agree(y1, y2)) << "tanh " << (form == GeluForm::Tanh);
      EXPECT_TRUE(agree(s1, s2, std::vector<bool>(11, with_slope))) << "tanh " << (form == GeluForm::Tanh);
    }
}

// ---------------------------------------------------------------------------------------------
// swiglu and swiglu_backward

// One swiglu problem: x in [-2, 2] so that h1 spreads over both arms of silu; dy is also the r
// of the finite-difference check's loss sum(y * r).
template <class T>
struct SwigluCase {
  SwigluSizes n;
  std::vector<T> x, w1, w3, w2, dy;
};
SwigluCase<double> swiglu_case(SwigluSizes n, std::mt19937& gen) {
  return {n,
          uniform(n.rows * n.in, gen, -2.0, 2.0),
          uniform(n.hidden * n.in, gen),
          uniform(n.hidden * n.in, gen),
          uniform(n.out * n.hidden, gen),
          uniform(n.rows * n.out, gen)};
}

template <class T>
std::vector<T> unwritten_as(std::int64_t size) {
  return std::vector<T>(static_cast<std::size_t>(size), std::numeric_limits<T>::quiet_NaN());
}
// The forward's outputs, NaN where not written.
template <class T>
struct SwigluForward {
  std::vector<T> y, h1, h3;
};
template <class T>
SwigluForward<T> swiglu_forward(const Table<T>& t, const SwigluCase<T>& c, bool keep_h1 = true, bool keep_h3 = true) {
  const SwigluSizes& n = c.n;
  SwigluForward<T> f{unwritten_as<T>(n.rows * n.out), unwritten_as<T>(n.rows * n.hidden),
                     unwritten_as<T>(n.rows * n.hidden)};
  t.swiglu(kPlain, n, c.x.data(), c.w1.data(), c.w3.data(), c.w2.data(), f.y.data(), data_or_null(f.h1, keep_h1),
           data_or_null(f.h3, keep_h3));
  return f;
}

// The backward's outputs from c.dy and the forward's h1 and h3, NaN where not written. `want`'s
// bits ask for dx, dW1, dW3, dW2.
template <class T>
struct SwigluGradients {
  std::vector<T> dx, dw1, dw3, dw2;
};
template <class T>
SwigluGradients<T> swiglu_gradients(const Table<T>& t, const SwigluCase<T>& c, const SwigluForward<T>& f,
                                    int want = 15) {
  const SwigluSizes& n = c.n;
  SwigluGradients<T> g{unwritten_as<T>(n.rows * n.in), unwritten_as<T>(n.hidden * n.in),
                       unwritten_as<T>(n.hidden * n.in), unwritten_as<T>(n.out * n.hidden)};
  t.swiglu_backward(kPlain, n, c.dy.data(), c.x.data(), c.w1.data(), c.w3.data(), c.w2.data(), f.h1.data(), f.h3.data(),
                    data_or_null(g.dx, want & 1), data_or_null(g.dw1, want & 2), data_or_null(g.dw3, want & 4),
                    data_or_null(g.dw2, want & 8));
  return g;
}

bool all_zero(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double e) { return e == 0.0; });
}

// Odd sizes, each size 0 in turn, and one large enough for the cpu kernels to split their
// products and their elementwise pass across threads (when there are two).
TEST(NaiveBackend, SwigluMatchesCpu) {
  std::mt19937 gen(11);
  for (SwigluSizes n : {SwigluSizes{5, 7, 6, 3}, SwigluSizes{0, 7, 6, 3}, SwigluSizes{5, 0, 6, 3},
                        SwigluSizes{5, 7, 0, 3}, SwigluSizes{5, 7, 6, 0}, SwigluSizes{256, 32, 72, 24}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << n.rows << ", in " << n.in << ", hidden " << n.hidden << ", out "
                                      << n.out);
    SwigluCase<double> c = swiglu_case(n, gen);
    // With any size 0, y and every gradient are 0: an empty sum, or a factor that is one (h1 and
    // h3 when in = 0, da when out = 0).
    bool empty = n.rows * n.in * n.hidden * n.out == 0;
    for (int keep = 0; keep < 4; ++keep) {  // bits: h1, h3
      bool keep_h1 = keep & 1, keep_h3 = keep & 2;
      SCOPED_TRACE(::testing::Message() << "kept h1 " << keep_h1 << " h3 " << keep_h3);
      SwigluForward<double> f1 = swiglu_forward(naive64(), c, keep_h1, keep_h3);
      SwigluForward<double> f2 = swiglu_forward(cpu64(), c, keep_h1, keep_h3);
      EXPECT_TRUE(agree(f1.y, f2.y)) << "y";
      EXPECT_TRUE(agree(f1.h1, f2.h1, std::vector<bool>(f1.h1.size(), keep_h1))) << "h1";
      EXPECT_TRUE(agree(f1.h3, f2.h3, std::vector<bool>(f1.h3.size(), keep_h3))) << "h3";
      if (empty) {
        EXPECT_TRUE(all_zero(f2.y)) << "y";
      }
    }
    // Backward from the naive forward's h1 and h3, with every subset of dx, dW1, dW3, dW2 wanted.
    SwigluForward<double> f = swiglu_forward(naive64(), c);
    for (int want = 0; want < 16; ++want) {
      SCOPED_TRACE(::testing::Message() << "wanted dx " << (want & 1) << " dW1 " << (want & 2) << " dW3 " << (want & 4)
                                        << " dW2 " << (want & 8));
      SwigluGradients<double> g1 = swiglu_gradients(naive64(), c, f, want), g2 = swiglu_gradients(cpu64(), c, f, want);
      EXPECT_TRUE(agree(g1.dx, g2.dx, std::vector<bool>(g1.dx.size(), want & 1))) << "dx";
      EXPECT_TRUE(agree(g1.dw1, g2.dw1, std::vector<bool>(g1.dw1.size(), want & 2))) << "dW1";
      EXPECT_TRUE(agree(g1.dw3, g2.dw3, std::vector<bool>(g1.dw3.size(), want & 4))) << "dW3";
      EXPECT_TRUE(agree(g1.dw2, g2.dw2, std::vector<bool>(g1.dw2.size(), want & 8))) << "dW2";
      if (empty && want == 15) {
        for (const auto* grad : {&g2.dx, &g2.dw1, &g2.dw3, &g2.dw2}) EXPECT_TRUE(all_zero(*grad));
      }
    }
  }
}

// L = sum(y * r) has dL/dy = r, so swiglu_backward from dy = r gives dL/dx, dL/dW1, dL/dW3 and
// dL/dW2; each element is checked against (L(p + eps) - L(p - eps)) / (2 eps), one argument at a
// time, with the forward alone.
TEST(NaiveBackend, SwigluBackwardMatchesCentralDifferences) {
  std::mt19937 gen(12);
  const SwigluCase<double> c = swiglu_case(SwigluSizes{3, 4, 5, 2}, gen);
  const double eps = 1e-6;
  struct Argument {
    const char* name;
    std::vector<double> SwigluCase<double>::*values;
    std::vector<double> SwigluGradients<double>::*gradient;
  };
  const Argument arguments[] = {{"x", &SwigluCase<double>::x, &SwigluGradients<double>::dx},
                                {"W1", &SwigluCase<double>::w1, &SwigluGradients<double>::dw1},
                                {"W3", &SwigluCase<double>::w3, &SwigluGradients<double>::dw3},
                                {"W2", &SwigluCase<double>::w2, &SwigluGradients<double>::dw2}};
  for (const Backend* backend : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(backend->name);
    const Table<double>& t = backend->f64;
    auto loss = [&](const SwigluCase<double>& at) {
      std::vector<double> y = swiglu_forward(t, at, false, false).y;
      double sum = 0;
      for (std::size_t k = 0; k < y.size(); ++k) sum += y[k] * c.dy[k];
      return sum;
    };
    SwigluGradients<double> analytic = swiglu_gradients(t, c, swiglu_forward(t, c));
    for (const Argument& arg : arguments) {
      const std::vector<double>& grad = analytic.*arg.gradient;
      for (std::size_t k = 0; k < grad.size(); ++k) {
        SwigluCase<double> plus = c, minus = c;
        (plus.*arg.values)[k] += eps;
        (minus.*arg.values)[k] -= eps;
        double numeric = (loss(plus) - loss(minus)) / (2 * eps);
        EXPECT_TRUE(close(grad[k], numeric, 1e-8))
            << "d" << arg.name << "[" << k << "]: analytic " << grad[k] << ", central difference " << numeric;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// layer_norm and rms_norm

TEST(NaiveBackend, LayerNormMatchesCpu) {
  std::mt19937 gen(3);
  const std::int64_t rows = 5, d = 9;
  const double eps = 1e-5;
  std::vector<double> x = uniform(rows * d, gen, -2.0, 3.0), dy = uniform(rows * d, gen);
  std::vector<double> w = uniform(d, gen, 0.5, 1.5), b = uniform(d, gen);
  for (bool with_w : {false, true})
    for (bool with_b : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "w " << with_w << ", b " << with_b);
      const double *pw = with_w ? w.data() : nullptr, *pb = with_b ? b.data() : nullptr;
      std::vector<double> y1 = unwritten(rows * d), y2 = y1, mean1 = unwritten(rows), mean2 = mean1;
      std::vector<double> rstd1 = mean1, rstd2 = mean1;
      naive64().layer_norm(rows, d, eps, x.data(), pw, pb, y1.data(), mean1.data(), rstd1.data());
      cpu64().layer_norm(rows, d, eps, x.data(), pw, pb, y2.data(), mean2.data(), rstd2.data());
      EXPECT_TRUE(agree(y1, y2)) << "y";
      EXPECT_TRUE(agree(mean1, mean2)) << "mean";
      EXPECT_TRUE(agree(rstd1, rstd2)) << "rstd";
      if (with_b) continue;  // backward does not read b
      for (int want = 0; want < 8; ++want) {
        bool want_dx = want & 1, want_dw = want & 2, want_db = want & 4;
        std::vector<double> dx1 = unwritten(rows * d), dx2 = dx1, dw1 = unwritten(d), dw2 = dw1, db1 = dw1, db2 = dw1;
        naive64().layer_norm_backward(rows, d, x.data(), pw, mean1.data(), rstd1.data(), dy.data(),
                                      data_or_null(dx1, want_dx), data_or_null(dw1, want_dw),
                                      data_or_null(db1, want_db));
        cpu64().layer_norm_backward(rows, d, x.data(), pw, mean1.data(), rstd1.data(), dy.data(),
                                    data_or_null(dx2, want_dx), data_or_null(dw2, want_dw), data_or_null(db2, want_db));
        EXPECT_TRUE(agree(dx1, dx2, std::vector<bool>(dx1.size(), want_dx))) << "dx, wanted " << want;
        EXPECT_TRUE(agree(dw1, dw2, std::vector<bool>(dw1.size(), want_dw))) << "dw, wanted " << want;
        EXPECT_TRUE(agree(db1, db2, std::vector<bool>(db1.size(), want_db))) << "db, wanted " << want;
      }
    }
}

TEST(NaiveBackend, RmsNormMatchesCpu) {
  std::mt19937 gen(4);
  const std::int64_t rows = 5, d = 9;
  const double eps = 1e-6;
  std::vector<double> x = uniform(rows * d, gen, -2.0, 3.0), dy = uniform(rows * d, gen);
  std::vector<double> w = uniform(d, gen, 0.5, 1.5);
  for (bool with_w : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "w " << with_w);
    const double* pw = with_w ? w.data() : nullptr;
    std::vector<double> y1 = unwritten(rows * d), y2 = y1, rrms1 = unwritten(rows), rrms2 = rrms1;
    naive64().rms_norm(rows, d, eps, x.data(), pw, y1.data(), rrms1.data());
    cpu64().rms_norm(rows, d, eps, x.data(), pw, y2.data(), rrms2.data());
    EXPECT_TRUE(agree(y1, y2)) << "y";
    EXPECT_TRUE(agree(rrms1, rrms2)) << "rrms";
    for (int want = 0; want < 4; ++want) {
      bool want_dx = want & 1, want_dw = want & 2;
      std::vector<double> dx1 = unwritten(rows * d), dx2 = dx1, dw1 = unwritten(d), dw2 = dw1;
      naive64().rms_norm_backward(rows, d, x.data(), pw, rrms1.data(), dy.data(), data_or_null(dx1, want_dx),
                                  data_or_null(dw1, want_dw));
      cpu64().rms_norm_backward(rows, d, x.data(), pw, rrms1.data(), dy.data(), data_or_null(dx2, want_dx),
                                data_or_null(dw2, want_dw));
      EXPECT_TRUE(agree(dx1, dx2, std::vector<bool>(dx1.size(), want_dx))) << "dx, wanted " << want;
      EXPECT_TRUE(agree(dw1, dw2, std::vector<bool>(dw1.size(), want_dw))) << "dw, wanted " << want;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// embedding and cross_entropy

TEST(NaiveBackend, EmbeddingMatchesCpuWithRepeatedIds) {
  std::mt19937 gen(5);
  const std::int64_t vocab = 6, dim = 4, positions = 7;
  const std::int64_t ids[positions] = {2, 0, 2, 5, 2, 1, 0};  // 2 three times, 0 twice; 3 and 4 never
  std::vector<double> w = uniform(vocab * dim, gen), dy = uniform(positions * dim, gen);
  std::vector<double> y1 = unwritten(positions * dim), y2 = y1;
  naive64().embedding(positions, dim, w.data(), ids, y1.data());
  cpu64().embedding(positions, dim, w.data(), ids, y2.data());
  EXPECT_TRUE(agree(y1, y2));
  std::vector<double> dw1 = unwritten(vocab * dim), dw2 = dw1;  // written whole: rows 3 and 4 become 0
  naive64().embedding_backward(positions, dim, vocab, ids, dy.data(), dw1.data());
  cpu64().embedding_backward(positions, dim, vocab, ids, dy.data(), dw2.data());
  EXPECT_TRUE(agree(dw1, dw2));
  EXPECT_EQ(dw1[3 * dim], 0.0);
  EXPECT_DOUBLE_EQ(dw1[2 * dim + 1], dy[0 * dim + 1] + dy[2 * dim + 1] + dy[4 * dim + 1]);
}

TEST(NaiveBackend, CrossEntropyMatchesCpuWithIgnoredRows) {
  std::mt19937 gen(6);
  const std::int64_t rows = 6, classes = 5, ignore = -100;
  const std::int64_t targets[rows] = {3, ignore, 0, 4, ignore, 3};
  std::vector<double> x = uniform(rows * classes, gen, -30.0, 30.0);  // large logits: the max shift matters
  std::vector<double> lse1 = unwritten(rows), lse2 = lse1;
  double loss1 = naive64().cross_entropy(rows, classes, x.data(), targets, ignore, lse1.data());
  double loss2 = cpu64().cross_entropy(rows, classes, x.data(), targets, ignore, lse2.data());
  EXPECT_TRUE(close(loss1, loss2, 1e-12)) << loss1 << " vs " << loss2;
  std::vector<bool> counted(rows);
  for (std::int64_t r = 0; r < rows; ++r) counted[static_cast<std::size_t>(r)] = targets[r] != ignore;
  EXPECT_TRUE(agree(lse1, lse2, counted));  // an ignored row's lse is not written
  std::vector<double> dx1 = unwritten(rows * classes), dx2 = dx1;
  double g = 0.37 / 4;  // dloss over the 4 counted rows
  naive64().cross_entropy_backward(rows, classes, x.data(), targets, ignore, lse1.data(), g, dx1.data());
  cpu64().cross_entropy_backward(rows, classes, x.data(), targets, ignore, lse1.data(), g, dx2.data());
  EXPECT_TRUE(agree(dx1, dx2));
  for (std::int64_t c = 0; c < classes; ++c) EXPECT_EQ(dx1[static_cast<std::size_t>(1 * classes + c)], 0.0);
}

// ---------------------------------------------------------------------------------------------
// attention

// One attention problem: q, k and v live in one buffer (at q_at, k_at, v_at), their gradients in
// another of the same size at the same places, as the packed layout's do.
struct AttentionCase {
  std::string name;
  Dims n;
  Layouts L = {};
  std::int64_t q_at = 0, k_at = 0, v_at = 0, size = 0, out_size = 0;
  std::shared_ptr<bool[]> mask_data = nullptr;  // what `mask` reads, if anything
  MaskReader mask = {};
};

AttentionCase separate(std::string name, Dims n, bool last, MaskReader mask = {},
                       std::shared_ptr<bool[]> mask_data = nullptr) {
  auto view = last ? attention_kernels::heads_last : attention_kernels::heads_first;
  AttentionCase c{name + (last ? ", heads last" : ", heads first"), n};
  c.L = {view(n.h, n.tq, n.d), view(n.h, n.tk, n.d), view(n.h, n.tk, n.dv), view(n.h, n.tq, n.dv)};
  c.k_at = n.b * n.h * n.tq * n.d;
  c.v_at = c.k_at + n.b * n.h * n.tk * n.d;
  c.size = c.v_at + n.b * n.h * n.tk * n.dv;
  c.out_size = n.b * n.h * n.tq * n.dv;
  c.mask = mask;
  c.mask.shift = n.tk - n.tq;
  c.mask_data = std::move(mask_data);
  return c;
}

// [B, T, 3 H d]: each position's query, key and value are its row's three thirds.
AttentionCase packed(std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t d, bool causal) {
  std::int64_t width = h * d;
  View p{t * 3 * width, d, 3 * width};
  AttentionCase c{std::string("packed") + (causal ? ", causal" : ""), Dims{b, h, t, t, d, d}};
  c.L = {p, p, p, attention_kernels::heads_last(h, t, d)};
  c.q_at = 0, c.k_at = width, c.v_at = 2 * width;
  c.size = b * t * 3 * width;
  c.out_size = b * t * width;
  c.mask.causal = causal;
  return c;
}

// A bool mask of `size` elements, true with probability 0.7.
std::shared_ptr<bool[]> random_mask(std::int64_t size, std::mt19937& gen) {
  std::shared_ptr<bool[]> m(new bool[static_cast<std::size_t>(size)]);
  std::bernoulli_distribution keep(0.7);
  for (std::int64_t i = 0; i < size; ++i) m[i] = keep(gen);
  return m;
}

std::vector<AttentionCase> attention_cases() {
  std::mt19937 gen(7);
  std::vector<AttentionCase> cases;
  for (bool last : {false, true}) {
    Dims n{2, 3, 5, 7, 4, 3};
    cases.push_back(separate("no mask", n, last));
    cases.push_back(separate("causal", n, last, MaskReader{.causal = true}));
    // Tq > Tk under the causal rule: the first two queries see no key at all.
    cases.push_back(separate("causal, Tq > Tk", Dims{2, 3, 7, 5, 4, 3}, last, MaskReader{.causal = true}));
    // A [Tq, Tk] mask broadcast over batch and heads, with query 1 seeing no key.
    std::shared_ptr<bool[]> m = random_mask(n.tq * n.tk, gen);
    for (std::int64_t j = 0; j < n.tk; ++j) m[n.tk + j] = false;
    cases.push_back(separate("broadcast mask", n, last, MaskReader{.mask = m.get(), .si = n.tk, .sj = 1}, m));
    // A [B, 1, Tq, Tk] mask with causal on top: a fully masked row in batch 1 only.
    std::shared_ptr<bool[]> mb = random_mask(n.b * n.tq * n.tk, gen);
    for (std::int64_t j = 0; j < n.tk; ++j) mb[(1 * n.tq + 3) * n.tk + j] = false;
    cases.push_back(separate("per-batch mask and causal", n, last,
                             MaskReader{.mask = mb.get(), .sb = n.tq * n.tk, .si = n.tk, .sj = 1, .causal = true}, mb));
    cases.push_back(separate("no keys", Dims{2, 3, 5, 0, 4, 3}, last));
  }
  cases.push_back(packed(2, 3, 5, 4, false));
  cases.push_back(packed(2, 3, 5, 4, true));
  return cases;
}

// Which elements of a buffer of `size` the (rows x cols) matrices of every (b, h), seen through
// `view` from `offset`, cover.
std::vector<bool> covered(std::int64_t size, const Dims& n, const View& view, std::int64_t offset, std::int64_t rows,
                          std::int64_t cols) {
  std::vector<bool> c(static_cast<std::size_t>(size));
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t h = 0; h < n.h; ++h)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          c[static_cast<std::size_t>(offset + view.at(b, h) + i * view.ld + j)] = true;
  return c;
}

TEST(NaiveBackend, AttentionMatchesCpu) {
  std::mt19937 gen(8);
  const double scale = 0.37;
  for (const AttentionCase& a : attention_cases()) {
    SCOPED_TRACE(a.name);
    const Dims& n = a.n;
    std::vector<double> in = uniform(a.size, gen, -2.0, 2.0);
    std::vector<double> dout = uniform(a.out_size, gen);
    const double *q = in.data() + a.q_at, *k = in.data() + a.k_at, *v = in.data() + a.v_at;
    std::vector<double> lse1 = unwritten(n.b * n.h * n.tq), lse2 = lse1, out1 = unwritten(a.out_size), out2 = out1;
    std::vector<double> w1(static_cast<std::size_t>(n.b * n.h * n.tq * n.tk)), w2 = w1;  // zeroed by the caller
    for (bool with_weights : {false, true}) {
      naive64().attention(n, a.L, a.mask, scale, q, k, v, lse1.data(), data_or_null(w1, with_weights), out1.data(),
                          kPlain);
      cpu64().attention(n, a.L, a.mask, scale, q, k, v, lse2.data(), data_or_null(w2, with_weights), out2.data(),
                        kPlain);
      EXPECT_TRUE(agree(lse1, lse2)) << "lse, weights " << with_weights;
      EXPECT_TRUE(agree(out1, out2)) << "out, weights " << with_weights;
      EXPECT_TRUE(agree(w1, w2)) << "weights, weights " << with_weights;
    }
    // A row of weights sums to 1, or to 0 with lse = -inf where its query sees no key.
    for (std::int64_t row = 0; row < n.b * n.h * n.tq; ++row) {
      double sum = 0;
      for (std::int64_t j = 0; j < n.tk; ++j) sum += w1[static_cast<std::size_t>(row * n.tk + j)];
      EXPECT_NEAR(sum, lse1[static_cast<std::size_t>(row)] == -kInf ? 0.0 : 1.0, 1e-12) << "row " << row;
    }
    // Backward from the naive forward's lse, with every subset of dq, dk, dv wanted.
    std::vector<bool> region[3] = {covered(a.size, n, a.L.q, a.q_at, n.tq, n.d),
                                   covered(a.size, n, a.L.k, a.k_at, n.tk, n.d),
                                   covered(a.size, n, a.L.v, a.v_at, n.tk, n.dv)};
    for (int want = 1; want < 8; ++want) {
      std::vector<double> g1 = unwritten(a.size), g2 = g1;
      std::vector<bool> wanted(static_cast<std::size_t>(a.size));
      std::array<double*, 3> p1{}, p2{};
      std::int64_t at[3] = {a.q_at, a.k_at, a.v_at};
      for (int part = 0; part < 3; ++part) {
        if (!(want & (1 << part))) continue;
        p1[static_cast<std::size_t>(part)] = g1.data() + at[part];
        p2[static_cast<std::size_t>(part)] = g2.data() + at[part];
        for (std::size_t i = 0; i < wanted.size(); ++i) wanted[i] = wanted[i] || region[part][i];
      }
      naive64().attention_backward(n, a.L, a.mask, scale, q, k, v, lse1.data(), dout.data(), p1[0], p1[1], p1[2],
                                   kPlain);
      cpu64().attention_backward(n, a.L, a.mask, scale, q, k, v, lse1.data(), dout.data(), p2[0], p2[1], p2[2], kPlain);
      EXPECT_TRUE(agree(g1, g2, wanted)) << "gradients, wanted dq " << (want & 1) << " dk " << (want & 2) << " dv "
                                         << (want & 4);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// the optimizer

TEST(NaiveBackend, AdamAndClippingMatchCpu) {
  std::mt19937 gen(9);
  const std::int64_t n = 13;
  std::vector<double> w = uniform(n, gen), g = uniform(n, gen), m = uniform(n, gen, -0.1, 0.1);
  std::vector<double> v = uniform(n, gen, 0.0, 0.01);
  for (bool decoupled : {false, true}) {
    AdamSettings s{
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .decoupled = decoupled, .step = 3};
    std::vector<double> w1 = w, w2 = w, m1 = m, m2 = m, v1 = v, v2 = v;
    naive64().adam_update(n, w1.data(), g.data(), m1.data(), v1.data(), s);
    cpu64().adam_update(n, w2.data(), g.data(), m2.data(), v2.data(), s);
    EXPECT_TRUE(agree(w1, w2)) << "w, decoupled " << decoupled;
    EXPECT_TRUE(agree(m1, m2)) << "m, decoupled " << decoupled;
    EXPECT_TRUE(agree(v1, v2)) << "v, decoupled " << decoupled;
  }
  EXPECT_TRUE(close(naive64().sum_of_squares(n, g.data()), cpu64().sum_of_squares(n, g.data()), 1e-12));
  std::vector<double> x1 = g, x2 = g;
  naive64().scale(n, x1.data(), 0.3);
  cpu64().scale(n, x2.data(), 0.3);
  EXPECT_TRUE(agree(x1, x2));
}

// ---------------------------------------------------------------------------------------------
// Values worked out by hand, for both backends.

// ---------------------------------------------------------------------------------------------
// along one dim: sum, max and its gathers, softmax, dead rows; masked_fill

// Every entry on odd [outer, n, inner] views, one lane of each all -inf; the largest is split
// across threads by the cpu backend.
TEST(NaiveBackend, AlongDimMatchesCpu) {
  std::mt19937 gen(23);
  for (DimSizes n : {DimSizes{3, 5, 1}, DimSizes{2, 7, 3}, DimSizes{1, 1, 4}, DimSizes{4, 6, 2}, DimSizes{3, 40, 700}}) {
    SCOPED_TRACE(::testing::Message() << "outer " << n.outer << ", n " << n.n << ", inner " << n.inner);
    std::int64_t size = n.outer * n.n * n.inner, lanes = n.outer * n.inner;
    std::vector<double> x = uniform(size, gen, -3, 3);
    for (std::int64_t k = 0; k < n.n; ++k) x[static_cast<std::size_t>(k * n.inner)] = -kInf;  // lane (0, 0)
    std::vector<double> sum_n = unwritten(lanes), sum_c = unwritten(lanes);
    naive64().sum_dim(n, x.data(), sum_n.data());
    cpu64().sum_dim(n, x.data(), sum_c.data());
    EXPECT_TRUE(agree(std::vector<double>(sum_n.begin() + 1, sum_n.end()),
                      std::vector<double>(sum_c.begin() + 1, sum_c.end())));
    EXPECT_EQ(sum_n[0], -kInf);
    std::vector<double> max_n = unwritten(lanes), max_c = unwritten(lanes);
    std::vector<std::int64_t> at_n(static_cast<std::size_t>(lanes), -1), at_c(static_cast<std::size_t>(lanes), -1);
    naive64().max_dim(n, x.data(), max_n.data(), at_n.data());
    cpu64().max_dim(n, x.data(), max_c.data(), at_c.data());
    EXPECT_TRUE(agree(max_n, max_c));
    EXPECT_EQ(at_n, at_c);
    std::vector<double> taken_n = unwritten(lanes), taken_c = unwritten(lanes);
    naive64().take_along(n, x.data(), at_n.data(), taken_n.data());
    cpu64().take_along(n, x.data(), at_c.data(), taken_c.data());
    EXPECT_TRUE(agree(taken_n, max_n));  // the winners' values are the maxima
    EXPECT_TRUE(agree(taken_c, max_n));
    std::vector<double> g = uniform(lanes, gen), put_n(static_cast<std::size_t>(size), 0.0), put_c = put_n;
    naive64().put_along(n, g.data(), at_n.data(), put_n.data());
    cpu64().put_along(n, g.data(), at_c.data(), put_c.data());
    EXPECT_TRUE(agree(put_n, put_c));
    for (bool log : {false, true}) {
      SCOPED_TRACE(log ? "log_softmax" : "softmax");
      std::vector<double> y_n = unwritten(size), y_c = unwritten(size);
      EXPECT_TRUE(naive64().softmax(n, log, x.data(), y_n.data()));
      EXPECT_TRUE(cpu64().softmax(n, log, x.data(), y_c.data()));
      EXPECT_TRUE(agree(y_n, y_c));
      std::unique_ptr<bool[]> dead_n(new bool[static_cast<std::size_t>(size)]()), dead_c(new bool[static_cast<std::size_t>(size)]());
      EXPECT_EQ(naive64().dead_rows(n, y_n.data(), dead_n.get()), log);  // softmax's dead row is zeros
      EXPECT_EQ(cpu64().dead_rows(n, y_c.data(), dead_c.get()), log);
      for (std::int64_t j = 0; j < size; ++j) {
        bool in_lane_0 = j % n.inner == 0 && j / (n.n * n.inner) == 0;
        EXPECT_EQ(dead_n[static_cast<std::size_t>(j)], log && in_lane_0) << "element " << j;
        EXPECT_EQ(dead_c[static_cast<std::size_t>(j)], log && in_lane_0) << "element " << j;
      }
    }
    std::unique_ptr<bool[]> mask(new bool[static_cast<std::size_t>(size)]);
    for (std::int64_t j = 0; j < size; ++j) mask[static_cast<std::size_t>(j)] = gen() % 3 == 0;
    std::vector<double> f_n = unwritten(size), f_c = unwritten(size);
    naive64().masked_fill(size, x.data(), mask.get(), -0.5, f_n.data());
    cpu64().masked_fill(size, x.data(), mask.get(), -0.5, f_c.data());
    EXPECT_TRUE(agree(f_n, f_c));
    for (std::int64_t j = 0; j < size; ++j)
      EXPECT_EQ(f_n[static_cast<std::size_t>(j)], mask[static_cast<std::size_t>(j)] ? -0.5 : x[static_cast<std::size_t>(j)]);
  }
}

// Values worked out by hand, on both tables.
TEST(NaiveBackend, AlongDimByHand) {
  for (const Table<double>* t : {&naive64(), &cpu64()}) {
    SCOPED_TRACE(t == &naive64() ? "naive" : "cpu");
    // [1, 3, 2] viewed as [outer 1, n 3, inner 2]: columns (1, 2, 3) and (10, 20, 30)
    const double x[] = {1, 10, 2, 20, 3, 30};
    double y[2];
    std::int64_t at[2];
    t->sum_dim({1, 3, 2}, x, y);
    EXPECT_EQ(y[0], 6);
    EXPECT_EQ(y[1], 60);
    t->max_dim({1, 3, 2}, x, y, at);
    EXPECT_EQ(y[0], 3);
    EXPECT_EQ(y[1], 30);
    EXPECT_EQ(at[0], 2);
    EXPECT_EQ(at[1], 2);
    // A tie goes to the first; a NaN beats every number, the first NaN among them.
    const double tie[] = {4, 1, 4}, nan[] = {1, kNaN, 5, kNaN};
    t->max_dim({1, 3, 1}, tie, y, at);
    EXPECT_EQ(at[0], 0);
    t->max_dim({1, 4, 1}, nan, y, at);
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(at[0], 1);
    // softmax([0, ln 3]) = [1/4, 3/4]; log_softmax = [ln 1/4, ln 3/4]
    const double logits[] = {0, std::log(3.0)};
    double p[2];
    EXPECT_FALSE(t->softmax({1, 2, 1}, false, logits, p));
    EXPECT_NEAR(p[0], 0.25, 1e-16);
    EXPECT_NEAR(p[1], 0.75, 1e-16);
    EXPECT_FALSE(t->softmax({1, 2, 1}, true, logits, p));
    EXPECT_NEAR(p[0], std::log(0.25), 1e-15);
    EXPECT_NEAR(p[1], std::log(0.75), 1e-15);
    // A NaN with -inf: NaN, not a fully masked row
    const double nan_row[] = {-kInf, kNaN};
    EXPECT_FALSE(t->softmax({1, 2, 1}, false, nan_row, p));
    EXPECT_TRUE(std::isnan(p[0]) && std::isnan(p[1]));
    const double dead_row[] = {-kInf, -kInf};
    EXPECT_TRUE(t->softmax({1, 2, 1}, false, dead_row, p));
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[1], 0);
  }
}

// ---------------------------------------------------------------------------------------------
// unary_backward: dx = dy f'(saved)

// For every function, on both tables: f' against central differences of the table's own f, and
// naive against cpu on enough values for the cpu loop to split across threads. Each function's
// saved tensor is its input or its output, as kernels/table.h says.
TEST(NaiveBackend, UnaryBackwardIsTheSlopeOfUnary) {
  struct Case {
    Unary op;
    double p, lo, hi;
    bool saves_output;
  };
  const Case cases[] = {{Unary::Neg, 0, -2, 2, false},    {Unary::Pow, 2.5, 0.5, 2, false},
                        {Unary::Pow, 0, 0.5, 2, false},   {Unary::Exp, 0, -2, 2, true},
                        {Unary::Log, 0, 0.5, 3, false},   {Unary::Sqrt, 0, 0.5, 3, true},
                        {Unary::Tanh, 0, -2, 2, true},    {Unary::Sigmoid, 0, -3, 3, true},
                        {Unary::Erfc, 0, -2, 2, false},   {Unary::Relu, 0, -2, 2, false},
                        {Unary::Abs, 0, -2, 2, false}};
  std::mt19937 gen(29);
  const std::int64_t n = 3 * (1 << 15) + 7;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "Unary " << static_cast<int>(c.op) << ", p " << c.p);
    std::vector<double> x = uniform(n, gen, c.lo, c.hi), dy = uniform(n, gen);
    const bool kink = c.op == Unary::Relu || c.op == Unary::Abs;
    if (kink) x[0] = 0;  // the kink: slope 0, as PyTorch takes it
    std::vector<double> y(static_cast<std::size_t>(n)), saved;
    cpu64().unary(c.op, c.p, n, x.data(), y.data());
    saved = c.saves_output ? y : x;
    std::vector<double> dx_n = unwritten(n), dx_c = unwritten(n);
    naive64().unary_backward(c.op, c.p, n, saved.data(), dy.data(), dx_n.data());
    cpu64().unary_backward(c.op, c.p, n, saved.data(), dy.data(), dx_c.data());
    EXPECT_TRUE(agree(dx_n, dx_c));
    const double h = 1e-6;
    for (std::size_t i = 0; i < 200; ++i) {
      double up[1] = {x[i] + h}, down[1] = {x[i] - h}, f_up[1], f_down[1];
      naive64().unary(c.op, c.p, 1, up, f_up);
      naive64().unary(c.op, c.p, 1, down, f_down);
      double slope = kink && x[i] == 0 ? 0 : (f_up[0] - f_down[0]) / (2 * h);
      EXPECT_NEAR(dx_n[i], dy[i] * slope, 1e-7) << "element " << i << ", x " << x[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// moves: copy_along and permute, on elements of every width

// copy_along with and without steps, on 1-, 2- and 8-byte elements, against the move worked out
// element by element here; permute of a [2, 3, 4] tensor by every order of its dims likewise.
TEST(NaiveBackend, MovesMatchCpuAndTheirDefinition) {
  for (const Backend* b : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(b->name);
    // dst [3, 7, 2] takes src [3, 5, 2]'s rows 1, 3 (src step 2) at rows 2, 5 (dst step 3), in 8-byte elements
    std::vector<std::int64_t> src(3 * 5 * 2), dst(3 * 7 * 2, -1);
    std::iota(src.begin(), src.end(), 100);
    CopySizes n{.outer = 3, .inner = 2, .element = 8, .dst_n = 7, .dst_begin = 2, .dst_step = 3,
                .src_n = 5, .src_begin = 1, .src_step = 2, .count = 2};
    b->copy_along(n, src.data(), dst.data());
    std::vector<std::int64_t> expected(dst.size(), -1);
    for (std::int64_t o = 0; o < 3; ++o)
      for (std::int64_t j = 0; j < 2; ++j)
        for (std::int64_t i = 0; i < 2; ++i)
          expected[static_cast<std::size_t>((o * 7 + 2 + 3 * j) * 2 + i)] = src[static_cast<std::size_t>((o * 5 + 1 + 2 * j) * 2 + i)];
    EXPECT_EQ(dst, expected);
    // steps of 1 (cat's and slice's common case), 1-byte elements
    std::vector<std::uint8_t> a(2 * 3 * 4), c(2 * 6 * 4, 0);
    std::iota(a.begin(), a.end(), 1);
    b->copy_along({.outer = 2, .inner = 4, .element = 1, .dst_n = 6, .dst_begin = 3, .dst_step = 1,
                   .src_n = 3, .src_begin = 0, .src_step = 1, .count = 3}, a.data(), c.data());
    for (std::int64_t o = 0; o < 2; ++o)
      for (std::int64_t k = 0; k < 6; ++k)
        for (std::int64_t i = 0; i < 4; ++i)
          EXPECT_EQ(c[static_cast<std::size_t>((o * 6 + k) * 4 + i)], k < 3 ? 0 : a[static_cast<std::size_t>((o * 3 + k - 3) * 4 + i)]);
    // permute: y's element (p, q, r) is x's element whose coordinate along dims[d] is y's d-th
    const std::int64_t shape[] = {2, 3, 4}, strides[] = {12, 4, 1};
    std::vector<std::uint16_t> x(24);
    std::iota(x.begin(), x.end(), 7);
    std::array<std::int64_t, 3> dims{0, 1, 2};
    do {
      std::int64_t y_shape[3], y_strides[3];
      for (int d = 0; d < 3; ++d) {
        y_shape[d] = shape[dims[static_cast<std::size_t>(d)]];
        y_strides[d] = strides[dims[static_cast<std::size_t>(d)]];
      }
      std::vector<std::uint16_t> y(24, 0);
      b->permute({3, y_shape, y_strides, 2}, x.data(), y.data());
      for (std::int64_t p = 0, o = 0; p < y_shape[0]; ++p)
        for (std::int64_t q = 0; q < y_shape[1]; ++q)
          for (std::int64_t r = 0; r < y_shape[2]; ++r, ++o)
            EXPECT_EQ(y[static_cast<std::size_t>(o)], x[static_cast<std::size_t>(p * y_strides[0] + q * y_strides[1] + r * y_strides[2])])
                << "dims " << dims[0] << dims[1] << dims[2] << ", element " << o;
    } while (std::next_permutation(dims.begin(), dims.end()));
    // a 0-d tensor is one element; a shape with a 0 holds none (and y is not touched)
    const std::uint64_t one = 42;
    std::uint64_t out = 0;
    b->permute({0, nullptr, nullptr, 8}, &one, &out);
    EXPECT_EQ(out, 42u);
    const std::int64_t empty_shape[] = {2, 0}, empty_strides[] = {1, 2};
    b->permute({2, empty_shape, empty_strides, 8}, nullptr, nullptr);
  }
}

// convert, arange and fill by hand, on both backends. A float goes to int64 by dropping its
// fraction (toward zero), to bool as "not zero" (so -0.0 is false and NaN true), and back; an
// int64 past 2^53 rounds to even; the cpu backend's split of a long run (2^17 elements) across
// the pool gives each element its own conversion.
TEST(NaiveBackend, ConvertArangeAndFillByHand) {
  for (const Backend* b : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(b->name);
    const double from_double[] = {-2.7, 2.7, -0.0, 0.5, 3.0};
    std::int64_t as_int[5];
    bool as_bool[5];
    float as_float[5];
    b->convert(Scalar::Float64, Scalar::Int64, 5, from_double, as_int);
    b->convert(Scalar::Float64, Scalar::Bool, 5, from_double, as_bool);
    b->convert(Scalar::Float64, Scalar::Float32, 5, from_double, as_float);
    EXPECT_EQ(std::vector<std::int64_t>(as_int, as_int + 5), (std::vector<std::int64_t>{-2, 2, 0, 0, 3}));
    EXPECT_EQ(std::vector<bool>(as_bool, as_bool + 5), (std::vector<bool>{true, true, false, true, true}));
    EXPECT_EQ(as_float[0], -2.7f);
    EXPECT_EQ(as_float[3], 0.5f);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    bool nan_bool = false;
    b->convert(Scalar::Float64, Scalar::Bool, 1, &nan, &nan_bool);
    EXPECT_TRUE(nan_bool);
    const bool flags[] = {true, false, true};
    double flag_values[3];
    b->convert(Scalar::Bool, Scalar::Float64, 3, flags, flag_values);
    EXPECT_EQ(std::vector<double>(flag_values, flag_values + 3), (std::vector<double>{1, 0, 1}));
    // 2^53 + 1 has no double: int64 -> float64 rounds it to the even neighbour, 2^53
    const std::int64_t big = (std::int64_t{1} << 53) + 1;
    double big_double = 0;
    b->convert(Scalar::Int64, Scalar::Float64, 1, &big, &big_double);
    EXPECT_EQ(big_double, 9007199254740992.0);
    // a long run, split across the pool on the cpu backend: i - 65536.5 truncates toward zero
    std::vector<double> run(1 << 17);
    for (std::size_t i = 0; i < run.size(); ++i) run[i] = static_cast<double>(i) - 65536.5;
    std::vector<std::int64_t> truncated(run.size());
    b->convert(Scalar::Float64, Scalar::Int64, static_cast<std::int64_t>(run.size()), run.data(), truncated.data());
    for (std::size_t i = 0; i < run.size(); i += 997)
      EXPECT_EQ(truncated[i], static_cast<std::int64_t>(i) - (i <= 65536 ? 65536 : 65537)) << i;
    EXPECT_EQ(b->convert(Scalar::Float64, Scalar::Int64, 0, nullptr, nullptr), -1);  // nothing to convert
    // A float int64 cannot hold is stored as 0 and the first such index returned: NaN, an
    // infinity, 2^63 (one past the largest int64); -2^63 fits. In the long run, elements 30,001
    // and 100,000 go bad, one in each half the pool splits it into: 30,001 is the first, whichever
    // half finishes first.
    const double edges[] = {-0x1p63, 5.5, nan, std::numeric_limits<double>::infinity(), 0x1p63};
    std::int64_t edge_ints[5];
    EXPECT_EQ(b->convert(Scalar::Float64, Scalar::Int64, 5, edges, edge_ints), 2);
    EXPECT_EQ(std::vector<std::int64_t>(edge_ints, edge_ints + 5),
              (std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), 5, 0, 0, 0}));
    const float big_float = 0x1p70f;
    EXPECT_EQ(b->convert(Scalar::Float32, Scalar::Int64, 1, &big_float, edge_ints), 0);
    EXPECT_EQ(b->convert(Scalar::Float64, Scalar::Float32, 5, edges, as_float), -1);  // every float holds these
    run[100000] = -nan;
    run[30001] = 1e300;
    EXPECT_EQ(b->convert(Scalar::Float64, Scalar::Int64, static_cast<std::int64_t>(run.size()), run.data(),
                         truncated.data()),
              30001);
    EXPECT_EQ(truncated[30001], 0);
    EXPECT_EQ(truncated[100000], 0);
    EXPECT_EQ(truncated[100001], 100001 - 65537);
    // arange: start + i step in double, then stored as the type, so int64 truncates each value
    float steps[5];
    b->arange(Scalar::Float32, 0.5, -0.25, 5, steps);
    EXPECT_EQ(std::vector<float>(steps, steps + 5), (std::vector<float>{0.5f, 0.25f, 0.0f, -0.25f, -0.5f}));
    std::int64_t counts[4];
    b->arange(Scalar::Int64, -1.5, 1.0, 4, counts);
    EXPECT_EQ(std::vector<std::int64_t>(counts, counts + 4), (std::vector<std::int64_t>{-1, 0, 0, 1}));
    std::vector<std::int64_t> positions(1 << 17, -1);
    b->arange(Scalar::Int64, 3.0, 2.0, static_cast<std::int64_t>(positions.size()), positions.data());
    for (std::size_t i = 0; i < positions.size(); i += 991) EXPECT_EQ(positions[i], 3 + 2 * static_cast<std::int64_t>(i));
    EXPECT_EQ(positions.back(), 3 + 2 * static_cast<std::int64_t>(positions.size() - 1));
    // fill: every element the value as the type; -0.0 keeps its sign, 0.5 is a true bool
    b->fill(Scalar::Int64, -7.0, static_cast<std::int64_t>(positions.size()), positions.data());
    EXPECT_EQ(std::count(positions.begin(), positions.end(), -7), static_cast<std::ptrdiff_t>(positions.size()));
    float signed_zero[3] = {1, 1, 1};
    b->fill(Scalar::Float32, -0.0, 3, signed_zero);
    for (float z : signed_zero) EXPECT_TRUE(z == 0.0f && std::signbit(z));
    bool halves[2] = {false, false};
    b->fill(Scalar::Bool, 0.5, 2, halves);
    EXPECT_TRUE(halves[0] && halves[1]);
  }
}

// The masks by hand: a causal mask with more keys than queries (the last query sees them all,
// as with a cache) and with fewer, key padding with an empty and a full sequence, and the two
// logical ops, on a run long enough for the pool.
TEST(NaiveBackend, MasksByHand) {
  for (const Backend* b : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(b->name);
    bool wide[2 * 4], tall[4 * 2];
    b->causal_mask(2, 4, wide);  // j <= i + 2
    EXPECT_EQ(std::vector<bool>(wide, wide + 8), (std::vector<bool>{1, 1, 1, 0, 1, 1, 1, 1}));
    b->causal_mask(4, 2, tall);  // j <= i - 2: the first two queries see nothing
    EXPECT_EQ(std::vector<bool>(tall, tall + 8), (std::vector<bool>{0, 0, 0, 0, 1, 0, 1, 1}));
    const std::int64_t lengths[] = {0, 3, 2};
    bool padding[3 * 3];
    b->key_padding_mask(3, 3, lengths, padding);
    EXPECT_EQ(std::vector<bool>(padding, padding + 9), (std::vector<bool>{0, 0, 0, 1, 1, 1, 1, 1, 0}));
    const std::size_t n = (1 << 17) + 3;
    std::unique_ptr<bool[]> x(new bool[n]), y(new bool[n]), out(new bool[n]);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = i % 2 == 0;
      y[i] = i % 3 == 0;
    }
    b->logical(Logical::Not, static_cast<std::int64_t>(n), x.get(), nullptr, out.get());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], i % 2 == 1) << i;
    b->logical(Logical::And, static_cast<std::int64_t>(n), x.get(), y.get(), out.get());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], i % 6 == 0) << i;
    b->causal_mask(0, 5, nullptr);  // nothing to write
  }
}

// The comparisons by hand on both backends. a [2, 1] = {1, NaN} against b [3] = {0.5, 1, NaN}
// broadcasts to [2, 3]; a NaN on either side makes every comparison false but Ne. -0 equals 0.
// Two int64 values a double cannot tell apart (2^63 - 1 and 2^63 - 2 both round to 2^63) stay
// apart. false orders before true. A long same-shape run (split across the pool on the cpu
// backend) is checked element by element against C++'s own operators.
TEST(NaiveBackend, CompareByHand) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<Comparison, std::vector<bool>>> expected = {
      {Comparison::Eq, {0, 1, 0, 0, 0, 0}}, {Comparison::Ne, {1, 0, 1, 1, 1, 1}}, {Comparison::Lt, {0, 0, 0, 0, 0, 0}},
      {Comparison::Le, {0, 1, 0, 0, 0, 0}}, {Comparison::Gt, {1, 0, 0, 0, 0, 0}}, {Comparison::Ge, {1, 1, 0, 0, 0, 0}},
  };
  for (const Backend* b : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(b->name);
    const std::int64_t shape[] = {2, 3}, a_strides[] = {1, 0}, b_strides[] = {0, 1};
    const BroadcastSizes grid{2, shape, a_strides, b_strides};
    const double a64[] = {1, nan}, b64[] = {0.5, 1, nan};
    const float a32[] = {1, static_cast<float>(nan)}, b32[] = {0.5f, 1, static_cast<float>(nan)};
    for (const auto& [op, want] : expected) {
      SCOPED_TRACE(static_cast<int>(op));
      bool y[6];
      b->compare(op, Scalar::Float64, grid, a64, b64, y);
      EXPECT_EQ(std::vector<bool>(y, y + 6), want);
      b->compare(op, Scalar::Float32, grid, a32, b32, y);
      EXPECT_EQ(std::vector<bool>(y, y + 6), want);
    }
    const BroadcastSizes one{0, nullptr, nullptr, nullptr};  // 0-d against 0-d
    const float minus_zero = -0.0f, zero = 0.0f;
    bool y = false;
    b->compare(Comparison::Eq, Scalar::Float32, one, &minus_zero, &zero, &y);
    EXPECT_TRUE(y);
    b->compare(Comparison::Lt, Scalar::Float32, one, &minus_zero, &zero, &y);
    EXPECT_FALSE(y);
    const std::int64_t top = std::numeric_limits<std::int64_t>::max(), below = top - 1;
    b->compare(Comparison::Gt, Scalar::Int64, one, &top, &below, &y);
    EXPECT_TRUE(y);
    b->compare(Comparison::Eq, Scalar::Int64, one, &top, &below, &y);
    EXPECT_FALSE(y);
    const bool no = false, yes = true;
    b->compare(Comparison::Lt, Scalar::Bool, one, &no, &yes, &y);
    EXPECT_TRUE(y);
    b->compare(Comparison::Ge, Scalar::Bool, one, &no, &yes, &y);
    EXPECT_FALSE(y);
    const std::int64_t empty_shape[] = {3, 0}, unit[] = {0, 1};
    b->compare(Comparison::Eq, Scalar::Float64, {2, empty_shape, unit, unit}, nullptr, nullptr, nullptr);  // none
    const std::int64_t n = (1 << 17) + 3, flat[] = {1};
    std::vector<std::int64_t> u(n), v(n);
    for (std::int64_t i = 0; i < n; ++i) {
      u[i] = i % 5 - 2;
      v[i] = i % 3 - 1;
    }
    std::unique_ptr<bool[]> out(new bool[n]);
    const BroadcastSizes run{1, &n, flat, flat};
    b->compare(Comparison::Le, Scalar::Int64, run, u.data(), v.data(), out.get());
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], u[i] <= v[i]) << i;
  }
}

// The exact sums of bool and int64 elements by hand, on both backends: a count along either dim
// of a [2, 3] bool; an int64 lane whose partial sum passes 2^63 - 1 and comes back (exact); a lane
// whose sum does not fit (reported). On a long run of lanes (split across the pool on the cpu
// backend), lanes 40,000 and 50,000 overflow: 40,000 is reported, whichever thread meets it.
TEST(NaiveBackend, SumIntegersByHand) {
  for (const Backend* b : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(b->name);
    const bool flags[] = {1, 0, 1, 1, 1, 1};
    std::int64_t rows[2], cols[3];
    EXPECT_EQ(b->sum_integers(Scalar::Bool, {2, 3, 1}, flags, rows), -1);
    EXPECT_EQ(std::vector<std::int64_t>(rows, rows + 2), (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(b->sum_integers(Scalar::Bool, {1, 2, 3}, flags, cols), -1);
    EXPECT_EQ(std::vector<std::int64_t>(cols, cols + 3), (std::vector<std::int64_t>{2, 1, 2}));
    const std::int64_t top = std::numeric_limits<std::int64_t>::max(), bottom = std::numeric_limits<std::int64_t>::min();
    const std::int64_t back[] = {top, 1, -2}, over[] = {5, -5, bottom, -1};
    std::int64_t sum[2];
    EXPECT_EQ(b->sum_integers(Scalar::Int64, {1, 3, 1}, back, sum), -1);
    EXPECT_EQ(sum[0], top - 1);
    EXPECT_EQ(b->sum_integers(Scalar::Int64, {2, 2, 1}, over, sum), 1);  // lane 1: -2^63 - 1
    EXPECT_EQ(sum[0], 0);
    const std::int64_t lanes = 1 << 16;
    std::vector<std::int64_t> x(3 * lanes), y(lanes);
    for (std::int64_t j = 0; j < lanes; ++j) {
      x[3 * j] = j;
      x[3 * j + 1] = -j;
      x[3 * j + 2] = j == 40000 || j == 50000 ? top : j;
    }
    for (std::int64_t j : {40000, 50000}) x[3 * j] = x[3 * j + 1] = 1;  // 2 + (2^63 - 1)
    EXPECT_EQ(b->sum_integers(Scalar::Int64, {lanes, 3, 1}, x.data(), y.data()), 40000);
    for (std::int64_t j = 0; j < lanes; j += 991) {
      if (j == 40000 || j == 50000) continue;
      ASSERT_EQ(y[j], j) << j;
    }
  }
}

// SGD's step by hand, w = 1, g = 0.5, lr 0.1, weight decay 0.1, momentum 0.9, dampening 0.5:
// d = 0.5 + 0.1 = 0.6 and the new buffer takes it, w = 1 - 0.06 = 0.94; a second step with the
// same g has d = 0.5 + 0.094 = 0.594, buf = 0.54 + 0.297 = 0.837, w = 0.94 - 0.0837 = 0.8563.
// Nesterov's first step moves by d + 0.9 buf = 1.14: w = 0.886; no momentum: w = 0.94. On a run
// long enough for the pool, both backends give the same bits.
TEST(NaiveBackend, SgdByHand) {
  for (const Backend* b : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(b->name);
    double w = 1, g = 0.5, buf = 0;
    SgdSettings s{.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.1, .nesterov = false, .first = true};
    b->f64.sgd_update(1, &w, &g, &buf, s);
    EXPECT_NEAR(w, 0.94, 1e-15);
    EXPECT_NEAR(buf, 0.6, 1e-15);
    s.first = false;
    b->f64.sgd_update(1, &w, &g, &buf, s);
    EXPECT_NEAR(buf, 0.837, 1e-15);
    EXPECT_NEAR(w, 0.8563, 1e-15);
    double wn = 1, bn = 0;
    b->f64.sgd_update(1, &wn, &g, &bn, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.1,
                                        .nesterov = true, .first = true});
    EXPECT_NEAR(wn, 0.886, 1e-15);
    double plain = 1;
    b->f64.sgd_update(1, &plain, &g, nullptr, {.lr = 0.1, .momentum = 0, .dampening = 0, .weight_decay = 0.1,
                                               .nesterov = false, .first = true});
    EXPECT_NEAR(plain, 0.94, 1e-15);
  }
  const std::int64_t n = 20011;
  std::vector<float> w(n), g(n), buf(n);
  for (std::int64_t i = 0; i < n; ++i) {
    w[static_cast<std::size_t>(i)] = std::sin(0.1f * static_cast<float>(i));
    g[static_cast<std::size_t>(i)] = std::cos(0.3f * static_cast<float>(i));
    buf[static_cast<std::size_t>(i)] = 0.01f * static_cast<float>(i % 7);
  }
  std::vector<float> w2 = w, buf2 = buf;
  SgdSettings s{.lr = 0.05, .momentum = 0.8, .dampening = 0.1, .weight_decay = 0.01, .nesterov = true, .first = false};
  naive_backend().f32.sgd_update(n, w.data(), g.data(), buf.data(), s);
  cpu_backend().f32.sgd_update(n, w2.data(), g.data(), buf2.data(), s);
  EXPECT_EQ(w, w2);
  EXPECT_EQ(buf, buf2);
}

TEST(NaiveBackend, LinearByHand) {
  for (const Backend* backend : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(backend->name);
    const Table<double>& t = backend->f64;
    // x = [1 2], W = [[1 0] [0 1] [1 1]], b = [0.5 -1 0]:  y = x W^T + b = [1.5 1 3]
    LinearSizes n{1, 2, 3};
    const double x[] = {1, 2}, w[] = {1, 0, 0, 1, 1, 1}, b[] = {0.5, -1, 0};
    std::vector<double> y(3);
    t.linear(kPlain, n, x, w, b, y.data());
    EXPECT_EQ(y, (std::vector<double>{1.5, 1, 3}));
    // dy = [1 2 3]:  dx = dy W = [1 + 3, 2 + 3],  dW = dy^T x = [[1 2] [2 4] [3 6]],  db = dy
    const double dy[] = {1, 2, 3};
    std::vector<double> dx(2), dw(6), db(3);
    t.linear_backward(kPlain, n, dy, nullptr, x, nullptr, w, dx.data(), dw.data(), db.data());
    EXPECT_EQ(dx, (std::vector<double>{4, 5}));
    EXPECT_EQ(dw, (std::vector<double>{1, 2, 2, 4, 3, 6}));
    EXPECT_EQ(db, (std::vector<double>{1, 2, 3}));
    // GELU(0) = 0 and GELU'(0) = 1/2 in both forms; GELU(1) = Phi(1) = 0.8413447460685429.
    const double at[] = {0, 1};
    std::vector<double> g(2), slope(2);
    for (GeluForm form : {GeluForm::Exact, GeluForm::Tanh}) {
      t.gelu(2, at, g.data(), slope.data(), form);
      EXPECT_EQ(g[0], 0.0);
      EXPECT_DOUBLE_EQ(slope[0], 0.5);
    }
    t.gelu(2, at, g.data(), nullptr, GeluForm::Exact);
    EXPECT_NEAR(g[1], 0.8413447460685429, 1e-15);
  }
}

TEST(NaiveBackend, SwigluByHand) {
  // x = [1 2], W1 = [1 0], W3 = [1 0.5], W2 = [3]:  h1 = 1, h3 = 2, a = silu(1) h3 = 2 s, y = 3 a = 6 s,
  // with s = sigmoid(1) = silu(1), and silu'(1) = s (1 + 1 (1 - s)) = s (2 - s).
  const double s = 1 / (1 + std::exp(-1.0)), slope = s * (2 - s);
  // dy = 0.5:  da = dy W2 = 1.5,  dW2 = dy a = s,  dh3 = da silu(1) = 1.5 s,  dh1 = da h3 silu'(1) = 3 silu'(1)
  //   dx = dh1 W1 + dh3 W3 = [dh1 + dh3, dh3 / 2],  dW1 = dh1 x = [dh1, 2 dh1],  dW3 = dh3 x = [dh3, 2 dh3]
  const double dh1 = 3 * slope, dh3 = 1.5 * s;
  const SwigluCase<double> c{SwigluSizes{1, 2, 1, 1}, {1, 2}, {1, 0}, {1, 0.5}, {3}, {0.5}};
  for (const Backend* backend : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(backend->name);
    SwigluForward<double> f = swiglu_forward(backend->f64, c);
    EXPECT_EQ(f.h1, (std::vector<double>{1}));
    EXPECT_EQ(f.h3, (std::vector<double>{2}));
    EXPECT_NEAR(f.y[0], 6 * s, 1e-15);
    SwigluGradients<double> g = swiglu_gradients(backend->f64, c, f);
    EXPECT_NEAR(g.dw2[0], s, 1e-15);
    EXPECT_NEAR(g.dx[0], dh1 + dh3, 1e-15);
    EXPECT_NEAR(g.dx[1], dh3 / 2, 1e-15);
    EXPECT_NEAR(g.dw1[0], dh1, 1e-15);
    EXPECT_NEAR(g.dw1[1], 2 * dh1, 1e-15);
    EXPECT_NEAR(g.dw3[0], dh3, 1e-15);
    EXPECT_NEAR(g.dw3[1], 2 * dh3, 1e-15);
  }
}

// h1 far out, finite or not: silu and silu' take their limits (0 below; v and 1 above) where
// v sigmoid(v) would be inf * 0 = NaN, and a finite h1 never gives NaN.
template <class T>
void check_swiglu_far_out(const Table<T>& t) {
  const T inf = std::numeric_limits<T>::infinity();
  // x = [1], W1 = [-inf -1000 1000], W3 = [2 2 2], W2 = [1 1 1]:  h1 = W1, h3 = 2, a = [0 -0 2000], y = 2000
  SwigluCase<T> c{SwigluSizes{1, 1, 3, 1}, {1}, {-inf, -1000, 1000}, {2, 2, 2}, {1, 1, 1}, {1}};
  SwigluForward<T> f = swiglu_forward(t, c);
  EXPECT_EQ(f.h1, (std::vector<T>{-inf, -1000, 1000}));
  EXPECT_EQ(f.y, (std::vector<T>{2000}));
  // Backward at h1 = [-inf -1000 1000 inf], h3 = 2, with W1 = W3 = W2 = [1 1 1 1], x = 1, dy = 1:
  //   da = [1 1 1 1],  silu(h1) = [0 -0 1000 inf],  silu'(h1) = [0 -0 1 1]
  //   dh1 = da h3 silu'(h1) = [0 0 2 2],  dh3 = da silu(h1) = [0 0 1000 inf],  a = [0 0 2000 inf]
  //   dW1 = dh1 x,  dW3 = dh3 x,  dW2 = dy a,  dx = sum of dh1 + sum of dh3 = inf
  c = {SwigluSizes{1, 1, 4, 1}, {1}, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}, {1}};
  f.h1 = {-inf, -1000, 1000, inf};
  f.h3 = {2, 2, 2, 2};
  SwigluGradients<T> g = swiglu_gradients(t, c, f);
  EXPECT_EQ(g.dw1, (std::vector<T>{0, 0, 2, 2}));
  EXPECT_EQ(g.dw3, (std::vector<T>{0, 0, 1000, inf}));
  EXPECT_EQ(g.dw2, (std::vector<T>{0, 0, 2000, inf}));
  EXPECT_EQ(g.dx, (std::vector<T>{inf}));
}

TEST(NaiveBackend, SwigluFarOutIsNeverNaN) {
  for (const Backend* backend : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(backend->name);
    {
      SCOPED_TRACE("float64");
      check_swiglu_far_out(backend->f64);
    }
    SCOPED_TRACE("float32");
    check_swiglu_far_out(backend->f32);
  }
}

TEST(NaiveBackend, LayerNormByHand) {
  for (const Backend* backend : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(backend->name);
    const Table<double>& t = backend->f64;
    // Row 0: [0 0 2 2], mean 1, variance 1, xhat [-1 -1 1 1]. Row 1: [3 -1 3 -1], mean 1,
    // variance 4, rstd 1/2, xhat [1 -1 1 -1]. eps = 0 keeps the numbers round.
    const double x[] = {0, 0, 2, 2, 3, -1, 3, -1}, w[] = {1, 2, 3, 4}, b[] = {0, 0, 0, 1};
    std::vector<double> y(8), mean(2), rstd(2);
    t.layer_norm(2, 4, 0.0, x, w, b, y.data(), mean.data(), rstd.data());
    EXPECT_EQ(mean, (std::vector<double>{1, 1}));
    EXPECT_EQ(rstd, (std::vector<double>{1, 0.5}));
    EXPECT_EQ(y, (std::vector<double>{-1, -2, 3, 5, 1, -2, 3, -3}));  // xhat w + b
    // dy = e_0 on row 0, 0 on row 1. g = dy w = [1 0 0 0], mean(g) = 1/4, mean(g xhat) = -1/4:
    // dx = rstd (g - 1/4 + xhat / 4) = [1/2 -1/2 0 0]; dw = dy xhat = [-1 0 0 0]; db = dy.
    const double dy[] = {1, 0, 0, 0, 0, 0, 0, 0};
    std::vector<double> dx(8), dw(4), db(4);
    t.layer_norm_backward(2, 4, x, w, mean.data(), rstd.data(), dy, dx.data(), dw.data(), db.data());
    std::vector<double> expected_dx{0.5, -0.5, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < 8; ++i) EXPECT_NEAR(dx[i], expected_dx[i], 1e-15) << "dx " << i;
    EXPECT_EQ(dw, (std::vector<double>{-1, 0, 0, 0}));
    EXPECT_EQ(db, (std::vector<double>{1, 0, 0, 0}));
  }
}

TEST(NaiveBackend, CrossEntropyByHand) {
  for (const Backend* backend : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(backend->name);
    const Table<double>& t = backend->f64;
    // Row 0: [0 ln 3], softmax [1/4 3/4], lse ln 4, target 1: loss ln 4 - ln 3.
    // Row 1: ignored. Row 2: [5 5], softmax [1/2 1/2], lse 5 + ln 2, target 0: loss ln 2.
    const double x[] = {0, std::log(3.0), 7, -7, 5, 5};
    const std::int64_t targets[] = {1, -1, 0};
    std::vector<double> lse(3, kNaN);
    double loss = t.cross_entropy(3, 2, x, targets, -1, lse.data());
    EXPECT_NEAR(loss, std::log(4.0 / 3.0) + std::log(2.0), 1e-15);
    EXPECT_NEAR(lse[0], std::log(4.0), 1e-15);
    EXPECT_NEAR(lse[2], 5 + std::numbers::ln2, 1e-15);
    // g = 1/2:  dx = g (softmax - onehot) = [1/8 -1/8], [0 0], [-1/4 1/4]
    std::vector<double> dx(6, kNaN);
    t.cross_entropy_backward(3, 2, x, targets, -1, lse.data(), 0.5, dx.data());
    std::vector<double> expected{0.125, -0.125, 0, 0, -0.25, 0.25};
    for (std::size_t i = 0; i < 6; ++i) EXPECT_NEAR(dx[i], expected[i], 1e-15) << "dx " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// float32 and the call count

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The float32 table computes what the float64 one does, up to float32's rounding.
TEST(NaiveBackend, Float32AgreesWithFloat64) {
  std::mt19937 gen(10);
  AttentionCase a = separate("causal", Dims{2, 3, 5, 7, 4, 3}, true, MaskReader{.causal = true});
  const Dims& n = a.n;
  std::vector<double> in = uniform(a.size, gen), dout = uniform(a.out_size, gen);
  std::vector<float> in32 = to_float(in), dout32 = to_float(dout);
  std::vector<double> lse(static_cast<std::size_t>(n.b * n.h * n.tq)), out(static_cast<std::size_t>(a.out_size));
  std::vector<double> grad(static_cast<std::size_t>(a.size));
  std::vector<float> lse32(lse.size()), out32(out.size()), grad32(grad.size());
  const Table<double>& t64 = naive_backend().f64;
  const Table<float>& t32 = naive_backend().f32;
  t64.attention(n, a.L, a.mask, 0.5, in.data() + a.q_at, in.data() + a.k_at, in.data() + a.v_at, lse.data(), nullptr,
                out.data(), kPlain);
  t32.attention(n, a.L, a.mask, 0.5, in32.data() + a.q_at, in32.data() + a.k_at, in32.data() + a.v_at, lse32.data(),
                nullptr, out32.data(), kPlain);
  t64.attention_backward(n, a.L, a.mask, 0.5, in.data() + a.q_at, in.data() + a.k_at, in.data() + a.v_at, lse.data(),
                         dout.data(), grad.data() + a.q_at, grad.data() + a.k_at, grad.data() + a.v_at, kPlain);
  t32.attention_backward(n, a.L, a.mask, 0.5, in32.data() + a.q_at, in32.data() + a.k_at, in32.data() + a.v_at,
                         lse32.data(), dout32.data(), grad32.data() + a.q_at, grad32.data() + a.k_at,
                         grad32.data() + a.v_at, kPlain);
  EXPECT_TRUE(agree(to_double(lse32), lse, {}, 1e-5)) << "lse";
  EXPECT_TRUE(agree(to_double(out32), out, {}, 1e-5)) << "out";
  EXPECT_TRUE(agree(to_double(grad32), grad, {}, 1e-5)) << "dq, dk, dv";

  LinearSizes ln{5, 7, 3};
  std::vector<double> x = uniform(35, gen), w = uniform(21, gen), b = uniform(3, gen), y(15), slope(15);
  std::vector<float> x32 = to_float(x), w32 = to_float(w), b32 = to_float(b), y32(15), slope32(15);
  t64.linear_gelu(kPlain, ln, x.data(), w.data(), b.data(), y.data(), slope.data(), GeluForm::Exact);
  t32.linear_gelu(kPlain, ln, x32.data(), w32.data(), b32.data(), y32.data(), slope32.data(), GeluForm::Exact);
  EXPECT_TRUE(agree(to_double(y32), y, {}, 1e-5)) << "linear_gelu y";
  EXPECT_TRUE(agree(to_double(slope32), slope, {}, 1e-5)) << "linear_gelu slope";
}

SwigluCase<float> to_float(const SwigluCase<double>& c) {
  return {c.n, to_float(c.x), to_float(c.w1), to_float(c.w3), to_float(c.w2), to_float(c.dy)};
}

// swiglu's float32 table, each backend's, computes what its float64 one does up to float32's
// rounding; each backward starts from its own forward's h1 and h3.
TEST(NaiveBackend, SwigluFloat32AgreesWithFloat64) {
  std::mt19937 gen(13);
  const SwigluCase<double> c = swiglu_case(SwigluSizes{5, 7, 6, 3}, gen);
  const SwigluCase<float> c32 = to_float(c);
  for (const Backend* backend : {&naive_backend(), &cpu_backend()}) {
    SCOPED_TRACE(backend->name);
    SwigluForward<double> f = swiglu_forward(backend->f64, c);
    SwigluForward<float> f32 = swiglu_forward(backend->f32, c32);
    EXPECT_TRUE(agree(to_double(f32.y), f.y, {}, 1e-5)) << "y";
    EXPECT_TRUE(agree(to_double(f32.h1), f.h1, {}, 1e-5)) << "h1";
    EXPECT_TRUE(agree(to_double(f32.h3), f.h3, {}, 1e-5)) << "h3";
    SwigluGradients<double> g = swiglu_gradients(backend->f64, c, f);
    SwigluGradients<float> g32 = swiglu_gradients(backend->f32, c32, f32);
    EXPECT_TRUE(agree(to_double(g32.dx), g.dx, {}, 1e-5)) << "dx";
    EXPECT_TRUE(agree(to_double(g32.dw1), g.dw1, {}, 1e-5)) << "dW1";
    EXPECT_TRUE(agree(to_double(g32.dw3), g.dw3, {}, 1e-5)) << "dW3";
    EXPECT_TRUE(agree(to_double(g32.dw2), g.dw2, {}, 1e-5)) << "dW2";
  }
}

// While counting is on, every naive kernel adds one to the naive count per call; the cpu ones add
// nothing. Off, nothing is counted.
TEST(NaiveBackend, CallsAreCounted) {
  const double x[] = {1, 2}, w[] = {3, 4};
  double y = 0;
  {
    testing::CountCalls counting;
    EXPECT_EQ(counting.naive(), 0);
    naive64().linear(kPlain, LinearSizes{1, 2, 1}, x, w, nullptr, &y);
    EXPECT_EQ(counting.naive(), 1);
    cpu64().linear(kPlain, LinearSizes{1, 2, 1}, x, w, nullptr, &y);
    EXPECT_EQ(counting.naive(), 1);
    EXPECT_EQ(naive64().sum_of_squares(2, x), 5.0);
    naive_backend().f32.scale(0, nullptr, 2.0);
    EXPECT_EQ(counting.naive(), 3);
    const SwigluSizes one{1, 1, 1, 1};
    naive64().swiglu(kPlain, one, x, x, x, x, &y, nullptr, nullptr);
    naive64().swiglu_backward(kPlain, one, x, x, x, x, x, x, x, &y, nullptr, nullptr, nullptr);
    EXPECT_EQ(counting.naive(), 5);
    counting.reset();
    EXPECT_EQ(counting.naive(), 0);
  }
  naive64().linear(kPlain, LinearSizes{1, 2, 1}, x, w, nullptr, &y);
  EXPECT_EQ(naive::calls(), 0);  // counting off: the call was not counted
  testing::CountCalls counting;
  EXPECT_THROW(testing::CountCalls{}, std::logic_error);  // one counter at a time
  naive64().linear(kPlain, LinearSizes{1, 2, 1}, x, w, nullptr, &y);
  EXPECT_EQ(counting.naive(), 1);  // and the refused one left counting on
}

}  // namespace
}  // namespace ag::backends
