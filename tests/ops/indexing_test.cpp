// Checks ops/indexing.cpp: index_select, index_add, gather, scatter_add, Tensor::index, stack and
// randperm, on the fast backend and on the naive one.
#include "../../ops/call_counts.h"
#include "../test_util.h"

#include <algorithm>

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;

Tensor ids(const std::vector<std::int64_t>& v, const Shape& shape) { return from_vector<std::int64_t>(v, shape); }

// x = [[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23]]: picking by hand.
TEST(Indexing, SelectAndGatherByHand) {
  Tensor x = tensor({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {3, 4}, kFloat64);
  EXPECT_TRUE(all_close(index_select(x, 0, ids({2, 0, 2}, {3})), {20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23}, 0));
  EXPECT_TRUE(all_close(x.index_select(-1, ids({3, 1}, {2})), {3, 1, 13, 11, 23, 21}, 0));
  EXPECT_EQ(x.index_select(1, ids({}, {0})).shape(), (Shape{3, 0}));
  // gather along dim 1: row r takes columns idx[r, :]
  Tensor g = gather(x, 1, ids({3, 0, 1, 1, 2, 2}, {3, 2}));
  EXPECT_EQ(g.shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_close(g, {3, 0, 11, 11, 22, 22}, 0));
  // along dim 0: column c takes rows idx[:, c]
  EXPECT_TRUE(all_close(x.gather(0, ids({2, 0, 1, 2}, {1, 4})), {20, 1, 12, 23}, 0));
  // x.index(idx): idx's shape, then x's other sizes
  Tensor picked = x.index(ids({1, 1, 0, 2}, {2, 2}));
  EXPECT_EQ(picked.shape(), (Shape{2, 2, 4}));
  EXPECT_TRUE(all_close(picked.index_select(2, ids({0}, {1})).reshape({4}), {10, 10, 0, 20}, 0));
  // int64 and bool tensors are picked too (batches of token ids)
  Tensor tokens = ids({5, 6, 7, 8, 9, 10}, {3, 2});
  EXPECT_EQ(tokens.index(ids({2, 0}, {2})).to_vector<std::int64_t>(), (std::vector<std::int64_t>{9, 10, 5, 6}));
}

// The adds: a repeated index adds each value (by hand).
TEST(Indexing, AddsByHand) {
  Tensor self = tensor({1, 1, 1, 1, 1, 1}, {2, 3}, kFloat64);
  Tensor src = tensor({1, 2, 3, 4}, {2, 2}, kFloat64);
  // index_add along dim 1: columns 2 and 2 of each row get src's two columns added
  EXPECT_TRUE(all_close(index_add(self, 1, ids({2, 2}, {2}), src), {1, 1, 4, 1, 1, 8}, 0));
  // along dim 0 with src [1, 3]: row 1 gets it
  EXPECT_TRUE(all_close(index_add(self, 0, ids({1}, {1}), tensor({5, 6, 7}, {1, 3}, kFloat64)), {1, 1, 1, 6, 7, 8}, 0));
  // scatter_add along dim 1: row r adds src[r, j] at column idx[r, j]
  Tensor s = scatter_add(self, 1, ids({0, 0, 2, 1}, {2, 2}), src);
  EXPECT_TRUE(all_close(s, {4, 1, 1, 1, 5, 4}, 0));
  EXPECT_TRUE(all_close(self, {1, 1, 1, 1, 1, 1}, 0));  // self is not changed
}

// gather and scatter_add are adjoint, and so are index_select and index_add: for every x and g,
// <select(x), g> = <x, add(0, g)>. Checked by gradcheck (both modes) and second order.
TEST(Indexing, GradcheckBothModesAndSecondOrder) {
  Generator gen(41);
  Tensor x = normal_leaf({3, 5, 2}, gen);
  Tensor idx1 = ids({4, 0, 4, 2, 1, 4, 3}, {7});  // repeats: their gradients add
  Tensor idx3 = randint(0, 5, {3, 4, 2}, gen);
  Tensor src = normal_leaf({3, 7, 2}, gen), src3 = normal_leaf({3, 4, 2}, gen);
  using F = std::function<Tensor(const std::vector<Tensor>&)>;
  std::vector<std::pair<std::string, std::pair<F, std::vector<Tensor>>>> cases = {
      {"index_select", {[&](const std::vector<Tensor>& in) { return index_select(in[0] * in[0], 1, idx1); }, {x}}},
      {"index_add", {[&](const std::vector<Tensor>& in) { return index_add(in[0] * in[0], 1, idx1, in[1].exp()); }, {x, src}}},
      {"gather", {[&](const std::vector<Tensor>& in) { return gather(in[0] * in[0], 1, idx3); }, {x}}},
      {"scatter_add", {[&](const std::vector<Tensor>& in) { return scatter_add(in[0].tanh(), 1, idx3, in[1] * in[1]); }, {x, src3}}},
      {"index", {[&](const std::vector<Tensor>& in) { return in[0].index(ids({2, 0, 2, 1}, {2, 2})).exp(); }, {x}}},
      {"stack", {[&](const std::vector<Tensor>& in) { return stack({in[0], in[0] * in[0], in[0].exp()}, -2); }, {x}}},
  };
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(testing::gradcheck(c.first, c.second, {.check_forward_ad = true}));
    EXPECT_TRUE(testing::gradgradcheck(c.first, c.second));
  }
}

TEST(Indexing, NaiveBackendServesIt) {
  testing::CountCalls counting;
  Generator gen(42);
  Tensor x = randn({4, 6, 3}, gen, kFloat64), src = randn({4, 5, 3}, gen, kFloat64);
  Tensor idx1 = ids({5, 0, 5, 2, 1}, {5}), idx3 = randint(0, 6, {4, 5, 3}, gen);
  auto all = [&] {
    return std::vector<Tensor>{index_select(x, 1, idx1), index_add(x, 1, idx1, src), gather(x, 1, idx3),
                               scatter_add(x, 1, idx3, src)};
  };
  std::vector<Tensor> fast = all();
  KernelGuard naive(Kernels::Naive);
  counting.reset();
  std::vector<Tensor> loops = all();
  EXPECT_GE(counting.naive(), 4);
  for (std::size_t i = 0; i < fast.size(); ++i)
    EXPECT_EQ(loops[i].to_vector<double>(), fast[i].to_vector<double>()) << "op " << i;
}

TEST(Indexing, StackByHand) {
  Tensor a = tensor({1, 2, 3}, {3}, kFloat64), b = tensor({4, 5, 6}, {3}, kFloat64);
  EXPECT_EQ(stack({a, b}).shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(stack({a, b}), {1, 2, 3, 4, 5, 6}, 0));
  EXPECT_EQ(stack({a, b}, 1).shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_close(stack({a, b}, -1), {1, 4, 2, 5, 3, 6}, 0));
}

// randperm: every number once, the same order for the same seed, and every order of three
// reached (6 orders in 600 draws: each about 100 times).
TEST(Indexing, RandpermIsAPermutation) {
  Generator gen(43);
  std::vector<std::int64_t> p = randperm(50, gen).to_vector<std::int64_t>();
  std::vector<std::int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[static_cast<std::size_t>(i)], i);
  Generator again(43);
  EXPECT_EQ(randperm(50, again).to_vector<std::int64_t>(), p);
  std::map<std::vector<std::int64_t>, int> seen;
  for (int draw = 0; draw < 600; ++draw) ++seen[randperm(3, gen).to_vector<std::int64_t>()];
  EXPECT_EQ(seen.size(), 6u);
  for (const auto& [order, count] : seen) EXPECT_GT(count, 50);  // 100 expected; below 50 is ~1e-8 likely
  EXPECT_EQ(randperm(0, gen).numel(), 0);
}

TEST(Indexing, Errors) {
  Tensor x = ones({2, 3}, kFloat64);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { index_select(x, 1, ids({0, 3}, {2})); },
                                                 "index_select: index 3 at position 1 is outside 0..2 (dim 1 of shape [2, 3])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { index_select(x, 0, ids({-1}, {1})); },
                                                 "index_select: index -1 at position 0 is outside 0..1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { index_select(x, 0, ones({1})); },
                                                 "index_select: index must be int64, got float32"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { index_select(x, 0, ids({0, 1}, {1, 2})); },
                                                 "index_select: index must be 1-d, got shape [1, 2]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { index_select(x, 2, ids({0}, {1})); },
                                                 "index_select: dim 2 is out of range"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gather(x, 1, ids({0, 1}, {1, 2})); },
                                                 "gather: index of shape [1, 2] must match [2, 3] in every dim but dim 1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gather(x, 0, ids({0, 1, 2, 0, 1, 1}, {2, 3})); },
                                                 "gather: index 2 at position 2 is outside 0..1 (dim 0 of shape [2, 3])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { scatter_add(x, 1, ids({0, 1, 0, 1}, {2, 2}), ones({2, 3}, kFloat64)); },
      "scatter_add: src of shape [2, 3] must have index's shape [2, 2]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { index_add(x, 1, ids({0}, {1}), ones({2, 2}, kFloat64)); },
                                                 "index_add: src of shape [2, 2] must be self's shape [2, 3] with 1 in dim 1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { index_add(x, 1, ids({0}, {1}), ones({2, 1})); },
                                                 "index_add: dtypes differ"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { stack({}, 0); }, "stack: needs at least one tensor"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { stack({x, ones({3, 2}, kFloat64)}, 0); },
                                                 "stack: tensor 1 has shape [3, 2], tensor 0 has [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { stack({x}, 3); }, "stack: dim 3 is out of range"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { randperm(-2); }, "randperm: n must be non-negative, got -2"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { scalar(1.0).index(ids({0}, {1})); },
                                                 "index: a 0-d tensor has no dim to index"));
}

}  // namespace
}  // namespace ag
