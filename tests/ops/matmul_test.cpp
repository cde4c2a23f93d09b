// Checks ops/matmul.cpp against a hand computation, a naive triple loop, and finite differences,
// on the fast backend (BLAS) and the naive one (kernels/naive/matmul.cpp).
#include "../../ops/call_counts.h"
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

// The textbook definition, for comparison: C[b, m, n] = sum_k A[b, m, k] B[b, k, n], with A
// and B already broadcast to the full batch.
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  Shape batch = broadcast_shapes("naive", Shape(a.shape().begin(), a.shape().end() - 2),
                                 Shape(b.shape().begin(), b.shape().end() - 2));
  std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {m, k});
  sb.insert(sb.end(), {k, n});
  Tensor fa = broadcast_to(a.detach(), sa).to(kFloat64), fb = broadcast_to(b.detach(), sb).to(kFloat64);
  Shape sc = batch;
  sc.insert(sc.end(), {m, n});
  Tensor c = zeros(sc, kFloat64);
  const double *pa = fa.data_ptr<double>(), *pb = fb.data_ptr<double>();
  double* pc = c.mutable_data_ptr<double>();
  for (std::int64_t i = 0; i < shape_numel(batch); ++i)
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t col = 0; col < n; ++col)
        for (std::int64_t j = 0; j < k; ++j)
          pc[(i * m + r) * n + col] += pa[(i * m + r) * k + j] * pb[(i * k + j) * n + col];
  return c;
}

TEST(Matmul, HandComputed) {
  // [1 2 3]   [1 0]   [1+0+9  0+2+3 ]   [10  5]
  // [4 5 6] @ [0 1] = [4+0+18 0+5+6 ] = [22 11]
  //           [3 1]
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({1, 0, 0, 1, 3, 1}, {3, 2});
  EXPECT_TRUE(all_close(a.matmul(b), {10, 5, 22, 11}, 0));
  EXPECT_TRUE(all_close(matmul(a.to(kFloat64), b.to(kFloat64)), {10, 5, 22, 11}, 0));
}

TEST(Matmul, BatchedAndBroadcastMatchNaiveLoop) {
  Generator gen(9);
  std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},       {{2, 3, 4}, {4, 5}},          {{3, 4}, {2, 4, 5}},
      {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {1, 3, 4, 5}}, {{2, 2, 3, 4}, {4, 5}},
  };
  for (auto [sa, sb] : cases) {
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    Tensor a = randn(sa, gen), b = randn(sb, gen);
    EXPECT_TRUE(all_close(a.matmul(b), naive_matmul(a, b), 1e-5));
  }
}

TEST(Matmul, Gradcheck) {
  Generator gen(10);
  std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},              // plain 2-D, non-square
      {{2, 3, 4}, {4, 5}},           // a batch times one shared matrix (the Linear-layer path)
      {{3, 4}, {2, 4, 5}},           // one matrix times a batch
      {{2, 3, 4}, {2, 4, 5}},        // batch times batch
      {{2, 1, 3, 4}, {1, 3, 4, 2}},  // both broadcast
      {{2, 3, 1, 4}, {4, 1}},        // N = 1 and M = 1
  };
  for (auto [sa, sb] : cases) {
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    Tensor a = normal_leaf(sa, gen), b = normal_leaf(sb, gen);
    EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].matmul(in[1]); }, {a, b}));
  }
}

TEST(Matmul, EmptyDims) {
  // K = 0: an empty sum, so every entry is 0; gradients are empty too.
  Tensor a = ones({2, 0}, kFloat64).requires_grad_(), b = ones({0, 3}, kFloat64).requires_grad_();
  Tensor c = matmul(a, b);
  EXPECT_TRUE(all_close(c, {0, 0, 0, 0, 0, 0}, 0));
  c.sum().backward();
  EXPECT_EQ(a.grad().shape(), (Shape{2, 0}));
  EXPECT_EQ(b.grad().shape(), (Shape{0, 3}));
  // N = 0 and a batch of A's against a 2-D B: the shared-B gradient path.
  Tensor a3 = ones({2, 3, 4}, kFloat64).requires_grad_(), b0 = ones({4, 0}, kFloat64).requires_grad_();
  Tensor c0 = matmul(a3, b0);
  EXPECT_EQ(c0.shape(), (Shape{2, 3, 0}));
  c0.sum().backward();
  EXPECT_TRUE(all_close(a3.grad(), std::vector<double>(24, 0.0), 0));
  EXPECT_EQ(b0.grad().shape(), (Shape{4, 0}));
}

TEST(Matmul, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul(ones({2, 3}), ones({4, 5}));
      },
      "matmul: shapes [2, 3] and [4, 5]: inner dimensions 3 and 4 differ"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul(ones({3}), ones({3, 4}));
      },
      "matmul: shapes [3] and [3, 4]: both need at least 2 dims"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul(ones({2, 2, 3}), ones({3, 3, 4}));
      },
      "matmul: shapes [2, 2, 3] and [3, 3, 4]: batch dims [2] and [3] cannot be broadcast"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul(ones({2, 3}), ones({3, 4}, kFloat64));
      },
      "matmul: dtypes differ: float32 with shape [2, 3] and float64 with shape [3, 4]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul(arange(4).reshape({2, 2}), arange(4).reshape({2, 2}));
      },
      "matmul: expected a float32 or float64 tensor, got int64"));
}

// --- matmul_transposed: op(A) @ op(B), the transposes read by BLAS, never copied -----------------

// t with its last two dims swapped, copied: the independent way to build op(t).
Tensor swapped(const Tensor& t, bool transposed) { return transposed ? t.transpose(-2, -1) : t; }

// The shape of op(a) @ op(b).
Shape product_shape(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  return naive_matmul(swapped(a, ta), swapped(b, tb)).shape();
}

// Calls check(a, ta, b, tb) for every pair of flags and every batch arrangement of the Gradcheck
// cases above, op(A) [.., 3, 4] and op(B) [.., 4, 2], with a and b float64 leaves as stored.
template <class Check>
void for_each_transposed_case(Generator& gen, Check&& check) {
  auto stored = [](Shape s, bool t) {
    if (t) std::swap(s[s.size() - 2], s[s.size() - 1]);
    return s;
  };
  std::vector<std::pair<Shape, Shape>> logical = {
      {{3, 4}, {4, 2}}, {{2, 3, 4}, {4, 2}}, {{3, 4}, {2, 4, 2}}, {{2, 3, 4}, {2, 4, 2}}, {{2, 1, 3, 4}, {1, 3, 4, 2}},
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [la, lb] : logical) {
        Shape sa = stored(la, ta), sb = stored(lb, tb);
        SCOPED_TRACE(shape_str(sa) + (ta ? "^T" : "") + " @ " + shape_str(sb) + (tb ? "^T" : ""));
        check(normal_leaf(sa, gen), ta, normal_leaf(sb, gen), tb);
      }
}

TEST(MatmulTransposed, EqualsMatmulOfTheCopiedTransposesAndItsGradients) {
  Generator gen(11);
  for_each_transposed_case(gen, [&](const Tensor& a, bool ta, const Tensor& b, bool tb) {
    Tensor c = matmul_transposed(a, ta, b, tb);
    EXPECT_TRUE(all_close(c, naive_matmul(swapped(a, ta), swapped(b, tb)), 1e-12));
    // The gradients against those of matmul on the copied transposes (the chain rule through
    // transpose), for one random upstream gradient.
    Tensor g = randn(c.shape(), gen, kFloat64);
    std::vector<Tensor> got = grad({c}, {a, b}, {g});
    std::vector<Tensor> want = grad({swapped(a, ta).matmul(swapped(b, tb))}, {a, b}, {g});
    EXPECT_TRUE(all_close(got[0], want[0], 1e-12));
    EXPECT_TRUE(all_close(got[1], want[1], 1e-12));
  });
}

// Both modes and the second derivative (its backward is made of matmul_transposed, so the
// double backward runs it with the other flags), over odd shapes and every flag.
TEST(MatmulTransposed, GradcheckForwardAndSecondOrder) {
  Generator gen(12);
  for_each_transposed_case(gen, [](const Tensor& a, bool ta, const Tensor& b, bool tb) {
    auto f = [ta, tb](const std::vector<Tensor>& in) { return matmul_transposed(in[0], ta, in[1], tb); };
    EXPECT_TRUE(testing::gradcheck(f, {a, b}, {.check_forward_ad = true}));
    EXPECT_TRUE(testing::gradgradcheck(f, {a, b}));
  });
}

// The naive backend serves matmul with its own loops (no BLAS), every flag and batch
// arrangement: the product equals the test's triple loop, the gradients equal the fast
// backend's, finite differences and the forward-mode rule agree, and the naive kernel is the
// one that ran (the fast route runs none).
TEST(MatmulTransposed, NaiveBackendRunsItsOwnLoops) {
  Generator gen(13);
  for_each_transposed_case(gen, [&](const Tensor& a, bool ta, const Tensor& b, bool tb) {
    Tensor g = randn(product_shape(a, ta, b, tb), gen, kFloat64);
    testing::CountCalls counting;
    Tensor fast = matmul_transposed(a, ta, b, tb);
    std::vector<Tensor> fast_grads = grad({fast}, {a, b}, {g});
    EXPECT_EQ(counting.naive(), 0);
    KernelGuard naive(Kernels::Naive);
    Tensor c = matmul_transposed(a, ta, b, tb);
    std::vector<Tensor> grads = grad({c}, {a, b}, {g});
    EXPECT_GE(counting.naive(), 3);  // at least one product forward and one for each gradient
    EXPECT_TRUE(all_close(c, naive_matmul(swapped(a, ta), swapped(b, tb)), 1e-12));
    EXPECT_TRUE(all_close(grads[0], fast_grads[0], 1e-12));
    EXPECT_TRUE(all_close(grads[1], fast_grads[1], 1e-12));
    auto f = [ta, tb](const std::vector<Tensor>& in) { return matmul_transposed(in[0], ta, in[1], tb); };
    EXPECT_TRUE(testing::gradcheck(f, {a, b}, {.check_forward_ad = true}));
  });
}

TEST(MatmulTransposed, ErrorsNameTheOperandsAsRead) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul_transposed(ones({2, 3}), false, ones({3, 4}), true);
      },
      "matmul_transposed: shapes [2, 3] and [3, 4] read transposed: inner dimensions 3 and 4 differ"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul_transposed(ones({3}), true, ones({3, 4}), false);
      },
      "matmul_transposed: shapes [3] and [3, 4]: both need at least 2 dims"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        matmul_transposed(ones({2, 3, 2}), true, ones({3, 3, 4}), false);
      },
      "matmul_transposed: shapes [2, 3, 2] and [3, 3, 4]: batch dims [2] and [3] cannot be broadcast"));
}

}  // namespace
}  // namespace ag
