// kernels/cpu/blas.h: the matrix views and the GEMM split across threads.
#include "kernels/cpu/blas.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "../test_util.h"

namespace ag {
namespace {

using test::ThreadCount;

// C = alpha op(A) op(B) + beta C by three loops, in long double.
std::vector<double> naive_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const std::vector<double>& a,
                               int lda, const std::vector<double>& b, int ldb, double beta, std::vector<double> c,
                               int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      long double s = 0;
      for (int p = 0; p < k; ++p) {
        double av = ta ? a[static_cast<std::size_t>(p * lda + i)] : a[static_cast<std::size_t>(i * lda + p)];
        double bv = tb ? b[static_cast<std::size_t>(j * ldb + p)] : b[static_cast<std::size_t>(p * ldb + j)];
        s += static_cast<long double>(av) * bv;
      }
      double& out = c[static_cast<std::size_t>(i * ldc + j)];
      out = static_cast<double>(alpha * s + static_cast<long double>(beta) * out);
    }
  return c;
}

// Tall (split by rows) and wide (split by columns) products with every transpose, a strided
// C and beta != 0, split over 1, 2 and 3 threads: each equals the three-loop product.
TEST(Parallel, SplitGemmEqualsTheThreeLoopProduct) {
  Generator gen(5);
  struct Case {
    int m, n, k;
  };
  for (Case s : {Case{301, 37, 53}, Case{29, 333, 61}, Case{130, 130, 17}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        int lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 2, ldc = s.n + 5;
        auto fill = [&](std::size_t size) {
          std::vector<double> v(size);
          for (double& x : v) x = gen.normal();
          return v;
        };
        std::vector<double> a = fill(static_cast<std::size_t>((ta ? s.k : s.m) * lda));
        std::vector<double> b = fill(static_cast<std::size_t>((tb ? s.n : s.k) * ldb));
        std::vector<double> c0 = fill(static_cast<std::size_t>(s.m * ldc));
        std::vector<double> expected = naive_gemm(ta, tb, s.m, s.n, s.k, 0.7, a, lda, b, ldb, -0.5, c0, ldc);
        for (int threads : {1, 2, 3}) {
          ThreadCount tc(threads);
          std::vector<double> c = c0;
          blas::Matrix<const double> va{a.data(), ta ? s.k : s.m, ta ? s.m : s.k, lda};
          blas::Matrix<const double> vb{b.data(), tb ? s.n : s.k, tb ? s.k : s.n, ldb};
          blas::gemm(ta ? va.t() : va, tb ? vb.t() : vb, blas::Matrix<double>{c.data(), s.m, s.n, ldc}, -0.5, 0.7);
          double worst = 0;
          for (std::size_t i = 0; i < c.size(); ++i) worst = std::max(worst, std::abs(c[i] - expected[i]));
          EXPECT_LT(worst, 1e-12) << s.m << "x" << s.n << "x" << s.k << " ta " << ta << " tb " << tb << " threads "
                                  << threads;
        }
      }
}

// A view's bands read the right elements, transposed or not.
TEST(Blas, BandsOfAViewAreViews) {
  std::vector<double> x(4 * 6);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  blas::Matrix<const double> m{x.data(), 3, 5, 6};  // 3 x 5 inside rows of 6
  EXPECT_EQ(m.m(), 3);
  EXPECT_EQ(m.n(), 5);
  EXPECT_EQ(m.t().m(), 5);
  EXPECT_EQ(*m.row_band(2, 3).data, 12.0);     // row 2 starts at 2 * 6
  EXPECT_EQ(*m.col_band(4, 5).data, 4.0);      // column 4 of row 0
  EXPECT_EQ(*m.t().row_band(4, 5).data, 4.0);  // row 4 of the transpose is column 4
  EXPECT_EQ(*m.t().col_band(1, 2).data, 6.0);  // column 1 of the transpose is row 1
  EXPECT_EQ(m.t().row_band(1, 3).n(), 3);
}

// Sizes past BLAS's int are an error naming the size, and views that do not fit are a bug.
TEST(Blas, SizesAreChecked) {
  std::vector<float> x(4);
  blas::Matrix<const float> big{x.data(), std::int64_t{INT_MAX} + 1, 1};
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [&] {
        blas::gemm(big, blas::Matrix<const float>{x.data(), 1, 1},
                   blas::Matrix<float>{x.data(), std::int64_t{INT_MAX} + 1, 1});
      },
      "matrix product: a size of 2147483648 exceeds what BLAS can index"));
  EXPECT_THROW(blas::gemm(blas::Matrix<const float>{x.data(), 2, 2}, blas::Matrix<const float>{x.data(), 1, 2},
                          blas::Matrix<float>{x.data(), 2, 2}),
               std::logic_error);
}

}  // namespace
}  // namespace ag
