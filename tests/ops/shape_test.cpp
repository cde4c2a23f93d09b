// Checks ops/shape.cpp: reshape, permute, transpose, slice, cat, split, (un)squeeze.
#include <functional>
#include <numeric>
#include <set>

#include "../../ops/call_counts.h"
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

TEST(Shape, ReshapeSharesDataAndInfers) {
  Tensor x = arange(0, 6, 1, kFloat64);
  Tensor y = x.reshape({2, -1});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.raw_data(), x.raw_data());  // no copy
  EXPECT_EQ(y.at<double>({1, 0}), 3.0);
  Generator gen(1);
  Tensor leaf = normal_leaf({2, 3, 4}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].reshape({4, 6}); }, {leaf}));
}

TEST(Shape, PermuteMovesElements) {
  // x[i, j, k] = 100 i + 10 j + k, shape [2, 3, 4]; y = permute(x, {2, 0, 1}) has y[k, i, j] = x[i, j, k].
  std::vector<double> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) v.push_back(100 * i + 10 * j + k);
  Tensor x = tensor(v, {2, 3, 4}, kFloat64);
  Tensor y = x.permute({2, 0, 1});
  EXPECT_EQ(y.shape(), (Shape{4, 2, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(y.at<double>({k, i, j}), 100 * i + 10 * j + k);
  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.at<double>({3, 1, 1}), 113);
  Generator gen(2);
  Tensor leaf = normal_leaf({2, 3, 4}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].permute({2, 0, 1}); }, {leaf}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].transpose(-1, -2); }, {leaf}));
}

TEST(Shape, SliceWithStepAndNegativeBounds) {
  Tensor x = arange(0, 10, 1, kFloat64).reshape({2, 5});
  EXPECT_TRUE(all_close(x.slice(1, 1, 4), {1, 2, 3, 6, 7, 8}, 0));
  EXPECT_TRUE(all_close(slice(x, 1, 0, 5, 2), {0, 2, 4, 5, 7, 9}, 0));
  EXPECT_TRUE(all_close(x.slice(1, -2, 5), {3, 4, 8, 9}, 0));
  EXPECT_TRUE(all_close(x.slice(0, 1, 2), {5, 6, 7, 8, 9}, 0));
  EXPECT_EQ(x.slice(1, 2, 2).shape(), (Shape{2, 0}));
  Generator gen(3);
  Tensor leaf = normal_leaf({3, 5, 2}, gen);
  for (std::int64_t dim : {0, 1, 2})
    EXPECT_TRUE(testing::gradcheck(
        [&](const std::vector<Tensor>& in) { return slice(in[0], dim, 1, in[0].size(dim), 2); }, {leaf}));
}

// Many pieces are cut by halves (ops/shape.h): each is the same slice, the gradient is right,
// and backward writes a few times x, not n times (a recurrent network cuts its input into T
// steps). No sizes at all give no pieces.
TEST(Shape, SplitIntoManyPiecesIsCutByHalves) {
  Generator gen(9);
  Tensor x = normal_leaf({3, 37, 2}, gen);
  std::vector<Tensor> pieces = split(x, 1, 1);
  ASSERT_EQ(pieces.size(), 37u);
  for (std::int64_t t = 0; t < 37; ++t) {
    const Tensor& p = pieces[static_cast<std::size_t>(t)];
    EXPECT_TRUE(all_close(p, x.slice(1, t, t + 1), 0)) << "piece " << t;
  }
  // What backward writes: each slice's gradient is the size of the tensor it was cut from. Cut
  // straight from x that is 37 times x. By halves, 37 -> 18 + 19 -> four of 9 or 10, each cut
  // in two once more, then at most 5 straight: 2 + 2 + 2 + 5 = 11 times x, at most 12.
  std::set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> todo;
  for (const Tensor& p : pieces) todo.push_back(p.grad_fn());
  std::int64_t written = 0;
  while (!todo.empty()) {
    std::shared_ptr<Node> n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n.get()).second) continue;
    EXPECT_EQ(n->name(), "slice");
    const Edge& e = n->next_edges().at(0);
    written += std::accumulate(e.shape.begin(), e.shape.end(), std::int64_t{1}, std::multiplies<>());
    todo.push_back(e.node);
  }
  EXPECT_LE(written, 12 * x.numel());
  EXPECT_TRUE(split(zeros({2, 0}), std::vector<std::int64_t>{}, 1).empty());
  // One piece is a new tensor, not x itself: writing into it leaves x alone.
  Tensor one = split(x, std::vector<std::int64_t>{37}, 1).at(0);
  EXPECT_NE(one.impl(), x.impl());
  std::vector<std::int64_t> sizes{5, 1, 0, 9, 2, 7, 3, 10};
  EXPECT_TRUE(testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> parts = split(in[0], sizes, 1);
        for (std::size_t k = 0; k < parts.size(); ++k) parts[k] = parts[k] * static_cast<double>(k + 1);
        return cat(parts, 1);
      },
      {x}));
}

TEST(Shape, CatAndSplitAreInverse) {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}, kFloat64);
  Tensor b = tensor({5, 6}, {2, 1}, kFloat64);
  Tensor c = cat({a, b}, 1);
  EXPECT_TRUE(all_close(c, {1, 2, 5, 3, 4, 6}, 0));
  EXPECT_TRUE(all_close(cat({a, a}, 0), {1, 2, 3, 4, 1, 2, 3, 4}, 0));
  auto pieces = split(c, std::vector<std::int64_t>{2, 1}, 1);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_TRUE(all_close(pieces[0], a, 0));
  EXPECT_TRUE(all_close(pieces[1], b, 0));
  auto chunks = split(arange(0, 7, 1, kFloat64), 3, 0);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[2].shape(), (Shape{1}));
  EXPECT_EQ(split(zeros({0, 2}), 3, 0).size(), 1u);  // an empty dim gives one empty piece

  Generator gen(4);
  Tensor x = normal_leaf({2, 3, 4}, gen);
  Tensor y = normal_leaf({2, 1, 4}, gen);
  Tensor z = normal_leaf({2, 2, 4}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return cat(in, 1); }, {x, y, z}));
  for (std::int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(fmt::format("dim {}", dim));
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return cat({in[0], in[0] * 2.0}, dim); }, {x}));
    EXPECT_TRUE(testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          auto p = split(in[0], 1, dim);
          return p.back() * 3.0 + p.front();
        },
        {x}));
  }
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return cat({in[0], in[0]}, -1); }, {x}));
  // Pieces of a split used differently: gradient reaches each part of x.
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        auto p = split(in[0], 2, 1);
        return cat({p[1] * 2.0, p[0].exp()}, 1);
      },
      {x}));
}

TEST(Shape, SqueezeUnsqueeze) {
  Tensor x = ones({2, 3});
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(x.unsqueeze(2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3}));
  Generator gen(6);
  Tensor leaf = normal_leaf({2, 1, 3}, gen);
  for (std::int64_t dim : {0, 1, 2, 3})
    EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return in[0].unsqueeze(dim); }, {leaf}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].squeeze(1); }, {leaf}));
}

TEST(Shape, WorksOnIndexAndMaskTensors) {
  Tensor ids = arange(6).reshape({2, 3});
  EXPECT_EQ(ids.transpose(0, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(ids.slice(1, 1, 3).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 4, 5}));
  Tensor mask = from_vector<bool>({true, false, false, true}, {2, 2});
  EXPECT_EQ(cat({mask, mask}, 0).to_vector<bool>(),
            (std::vector<bool>{true, false, false, true, true, false, false, true}));
}

TEST(Shape, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).reshape({4, 2});
      },
      "reshape: cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).reshape({-1, -1});
      },
      "reshape: shape [-1, -1] has more than one -1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).reshape({4, -1});
      },
      "reshape: cannot infer the -1 in [4, -1] for 6 elements"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).permute({0, 0});
      },
      "permute: dims [0, 0] repeat dim 0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).permute({0});
      },
      "permute: got 1 dims [0] for a tensor of shape [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).transpose(0, 2);
      },
      "transpose: dim 2 is out of range"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).slice(1, 1, 4);
      },
      "slice: range [1, 4) is out of bounds for dim 1 of size 3 (shape [2, 3])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).slice(1, 2, 1);
      },
      "slice: range [2, 1) is out of bounds"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        slice(ones({2, 3}), 1, 0, 3, 0);
      },
      "slice: step must be positive, got 0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        cat({ones({2, 3}), ones({3, 3})}, 1);
      },
      "cat: tensor 1 has shape [3, 3] but tensor 0 has shape [2, 3]: all sizes but dim 1 must agree"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        cat({ones({2}), ones({2}, kFloat64)}, 0);
      },
      "cat: tensor 1 is float64 but tensor 0 is float32"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { cat({}, 0); }, "cat: needs at least one tensor"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        split(ones({5}), std::vector<std::int64_t>{2, 2}, 0);
      },
      "split: sizes [2, 2] add up to 4, but dim 0 of shape [5] has size 5"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { split(ones({5}), 0, 0); }, "split: split_size must be positive, got 0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        ones({2, 3}).squeeze(0);
      },
      "squeeze: dim 0 of shape [2, 3] has size 2, not 1"));
}

TEST(Shape, TTransposesAMatrixAndLeavesVectorsAlone) {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64);
  Tensor xt = x.t();
  EXPECT_EQ(xt.shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_close(xt, {1, 4, 2, 5, 3, 6}, 0));
  EXPECT_TRUE(all_close(xt.t(), x, 0));  // (x^T)^T = x
  Tensor v = tensor({7, 8, 9}, {3}, kFloat64);
  EXPECT_EQ(v.t().shape(), (Shape{3}));
  EXPECT_TRUE(all_close(v.t(), v, 0));
  EXPECT_TRUE(all_close(scalar(2.5).t(), {2.5}, 0));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        zeros({2, 3, 4}).t();
      },
      "t: expects a tensor with at most 2 dims, got shape [2, 3, 4]; use transpose"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { Tensor().t(); }, "t: got an undefined tensor"));
}

TEST(Shape, TGradcheck) {
  Generator gen(21);
  Tensor x = normal_leaf({3, 5}, gen), w = normal_leaf({5, 3}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].t() * in[1]; }, {x, w}));
  Tensor v = normal_leaf({7}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].t() * 2.0; }, {v}));
}

TEST(Shape, ViewIsReshapeUnderItsLibtorchName) {
  Tensor x = arange(0, 12, 1, kFloat64);
  Tensor v = x.view({3, -1});
  EXPECT_EQ(v.shape(), (Shape{3, 4}));
  EXPECT_TRUE(all_close(v, x.reshape({3, 4}), 0));
  v.mutable_data_ptr<double>()[5] = 100;  // shares the data, as a view does
  EXPECT_EQ(x.at<double>({5}), 100);
  // Storage is always contiguous, so even the result of a transpose views without a copy.
  EXPECT_EQ(v.t().view({12}).shape(), (Shape{12}));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        x.view({5, 2});
      },
      "view: cannot reshape [12] (12 elements) to [5, 2] (10 elements)"));
  Generator gen(22);
  Tensor y = normal_leaf({3, 5}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].view({5, 3}).t() * in[0]; }, {y}));
}

// On the naive backend's moves (kernels/naive/moves.cpp): the same hand values for float64,
// int64 and bool, gradients through permute, slice with a step and cat, and the naive loops ran.
TEST(Shape, NaiveBackendMovesTheSameElements) {
  testing::CountCalls counting;
  Tensor x = arange(0, 24, 1, kFloat64).reshape({2, 3, 4});  // x[i, j, k] = 12 i + 4 j + k
  Tensor fast_permuted = x.permute({2, 0, 1}), fast_sliced = slice(x, 2, 1, 4, 2), fast_cat = cat({x, x * 2}, 1);
  EXPECT_EQ(counting.naive(), 0);
  KernelGuard naive(Kernels::Naive);
  Tensor y = x.permute({2, 0, 1});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(y.at<double>({k, i, j}), 12 * i + 4 * j + k);
  EXPECT_TRUE(all_close(y, fast_permuted, 0));
  EXPECT_TRUE(all_close(slice(x, 2, 1, 4, 2), fast_sliced, 0));
  EXPECT_TRUE(all_close(cat({x, x * 2}, 1), fast_cat, 0));
  Tensor ids = arange(6).reshape({2, 3});
  EXPECT_EQ(ids.transpose(0, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(ids.slice(1, 1, 3).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 4, 5}));
  Tensor mask = from_vector<bool>({true, false, false, true}, {2, 2});
  EXPECT_EQ(cat({mask, mask.transpose(0, 1)}, 1).to_vector<bool>(),
            (std::vector<bool>{true, false, true, false, false, true, false, true}));
  Generator gen(5);
  Tensor leaf = normal_leaf({3, 5, 2}, gen), other = normal_leaf({3, 2, 2}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].permute({2, 0, 1}); }, {leaf},
                                 {.check_forward_ad = true}));
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) { return cat({slice(in[0], 1, 1, 5, 2), in[1]}, 2); }, {leaf, other},
      {.check_forward_ad = true}));
  EXPECT_GE(counting.naive(), 8);
}

}  // namespace
}  // namespace ag
