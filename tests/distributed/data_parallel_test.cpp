// Checks distributed/: the ordered sum across ranks, broadcast, the agreement checks, and
// DataParallel against the definition it implements (micro-batch gradients summed in order). Runs
// as one process in the ordinary suite and under mpirun -np 2, 3 and 4
// (tests/distributed/mpi_test.sh); every process runs every test, since each test's collectives
// need all of them.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/dispatch.h"

#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

// Rank r's values: the same on every rank that asks for them, so each rank can compute the
// expected sum of all ranks' values by itself.
Tensor values_of_rank(int r, std::int64_t n, DType dtype) {
  Generator gen(1000 + static_cast<std::uint64_t>(r));
  return randn({n}, gen, dtype) * 1e3;  // large, so that the order of the additions shows in the low bits
}

class SumInRankOrder : public ::testing::TestWithParam<std::tuple<DType, std::int64_t>> {};

TEST_P(SumInRankOrder, EqualsTheSequentialSumBitForBit) {
  auto [dtype, n] = GetParam();
  const int size = dist::world_size();
  Tensor mine = values_of_rank(dist::rank(), n, dtype);
  dist::sum_in_rank_order(const_cast<void*>(mine.raw_data()), n, dtype);
  // The definition: ((x_0 + x_1) + x_2) + ..., element by element, in the dtype.
  Tensor expected = values_of_rank(0, n, dtype);
  for (int r = 1; r < size; ++r) {
    Tensor x = values_of_rank(r, n, dtype);
    if (dtype == kFloat32)
      for (std::int64_t i = 0; i < n; ++i) expected.mutable_data_ptr<float>()[i] += x.data_ptr<float>()[i];
    else
      for (std::int64_t i = 0; i < n; ++i) expected.mutable_data_ptr<double>()[i] += x.data_ptr<double>()[i];
  }
  EXPECT_TRUE(same_bits(mine, expected)) << "n = " << n << ", " << size << " ranks";
}

// Sizes smaller than the world, not divisible by it, and large enough to need several messages.
INSTANTIATE_TEST_SUITE_P(Dist, SumInRankOrder,
                         ::testing::Combine(::testing::Values(kFloat32, kFloat64),
                                            ::testing::Values(std::int64_t{1}, std::int64_t{2}, std::int64_t{7},
                                                              std::int64_t{1001}, std::int64_t{300007})));

// Float addition is not associative: in float32, (1e8 + -1e8) + 1 = 1 but 1e8 + (-1e8 + 1) = 0
// (-1e8 + 1 rounds back to -1e8). With three ranks holding 1e8, -1e8 and 1, only the rank order
// gives 1; a tree or ring reduction that adds ranks 1 and 2 first gives 0.
TEST(Dist, SumInRankOrderKeepsTheOrderWhereItMatters) {
  float mine[4] = {0, 0, 0, 0};
  float by_rank[3] = {1e8f, -1e8f, 1.0f};
  if (dist::rank() < 3) mine[0] = by_rank[dist::rank()];
  mine[1] = static_cast<float>(dist::rank());  // a second element: 0 + 1 + 2 + ... in any order
  dist::sum_in_rank_order(mine, 4, kFloat32);
  if (dist::world_size() >= 3) {
    EXPECT_EQ(mine[0], 1.0f);
  }
  const int n = dist::world_size();
  EXPECT_EQ(mine[1], static_cast<float>(n * (n - 1) / 2));
}

TEST(Dist, BroadcastGivesEveryRankRank0sValues) {
  Generator gen(7 + static_cast<std::uint64_t>(dist::rank()));
  std::vector<Tensor> tensors{randn({3, 5}, gen, kFloat64), randn({4}, gen, kFloat32)};
  dist::broadcast(tensors);
  Generator rank0(7);
  EXPECT_TRUE(same_bits(tensors[0], randn({3, 5}, rank0, kFloat64)));
  EXPECT_TRUE(same_bits(tensors[1], randn({4}, rank0, kFloat32)));
}

TEST(Dist, CheckInSyncNamesTheRankThatDiffers) {
  Tensor w = full({6}, 0.5, kFloat64);
  EXPECT_NO_THROW(dist::check_in_sync("the weights", {w}));
  if (dist::rank() == dist::world_size() - 1 && dist::world_size() > 1) {
    w.mutable_data_ptr<double>()[3] = 0.25;
  }
  if (dist::world_size() == 1) return;
  std::string expected = fmt::format("rank {} has other values than rank 0", dist::world_size() - 1);
  EXPECT_TRUE(throws_with<dist::Mismatch>([&] { dist::check_in_sync("the weights", {w}); }, expected));
}

TEST(Dist, CheckSameNamesTheFirstLineThatDiffers) {
  EXPECT_NO_THROW(dist::check_same("the options", "steps 10\nlr 0.1\n"));
  if (dist::world_size() == 1) return;
  std::string mine = dist::rank() == 1 ? "steps 10\nlr 0.2\n" : "steps 10\nlr 0.1\n";
  EXPECT_TRUE(
      throws_with<dist::Mismatch>([&] { dist::check_same("the options", mine); },
                                  "the options differs between ranks: rank 0 has 'lr 0.1', rank 1 has 'lr 0.2'"));
}

// --- DataParallel ----------------------------------------------------------------------------

nn::GPTConfig small_gpt() { return {.vocab_size = 13, .block_size = 7, .n_layer = 2, .n_head = 3, .n_embd = 12}; }

// Micro-batch k of the step: its own token ids and targets, [2, 7] each.
std::pair<Tensor, Tensor> micro_batch(std::int64_t k) {
  Generator gen(500 + static_cast<std::uint64_t>(k));
  return {randint(13, {2, 7}, gen), randint(13, {2, 7}, gen)};
}

// The definition: g = g_0 + g_1 + ... + g_(M-1), each g_k the gradient of (1/M) loss_k, added
// in order k, element by element. Computed here with nothing but backward and a loop.
std::vector<Tensor> gradient_by_definition(nn::GPT& model, std::int64_t micro) {
  std::vector<Tensor> params = model.parameters(), sum;
  for (std::int64_t k = 0; k < micro; ++k) {
    for (Tensor& p : params) p.zero_grad();
    auto [x, y] = micro_batch(k);
    Tensor loss = model.loss(x, y);
    loss.backward(full(loss.shape(), 1.0 / static_cast<double>(micro), loss.dtype()));
    for (std::size_t j = 0; j < params.size(); ++j) {
      Tensor g = params[j].grad();
      if (k == 0) {
        sum.push_back(g.detach() * 1.0);  // a copy
        continue;
      }
      dispatch_floating(g.dtype(), "test", [&](auto tag) {
        using T = decltype(tag);
        for (std::int64_t i = 0; i < g.numel(); ++i) sum[j].mutable_data_ptr<T>()[i] += g.data_ptr<T>()[i];
      });
    }
  }
  return sum;
}

class DataParallelEquality : public ::testing::TestWithParam<DType> {};

// Under mpirun -np N each rank runs micro-batch `rank`; alone, one process runs all N... of a
// step of 3 (the ordinary suite). Either way every gradient equals the definition's, bit for bit.
TEST_P(DataParallelEquality, GradientsEqualTheOrderedSumOfMicroBatchGradients) {
  DType dtype = GetParam();
  const bool alone = dist::world_size() == 1;
  const std::int64_t micro = alone ? 3 : dist::world_size();
  Generator init(11);
  nn::GPT model(small_gpt(), init);
  model.to(dtype);
  // Tiny buckets: several per model, so hooks, order and the thread all take part.
  dist::DataParallel dp(model.parameters(), {.micro_batches = alone ? micro : 1, .bucket_bytes = 2048});
  ASSERT_EQ(dp.micro_batches(), micro);
  std::vector<double> losses;
  for (std::int64_t k : dp.my_micro_batches()) {
    auto [x, y] = micro_batch(k);
    dp.begin_micro_batch();
    Tensor loss = model.loss(x, y);
    loss.backward(dp.loss_weight(loss));
    dp.end_micro_batch();
    losses.push_back(loss.item() / static_cast<double>(micro));
  }
  double step_loss = dp.sum_over_micro_batches(losses);
  std::vector<Tensor> got;
  for (const Tensor& p : model.parameters()) got.push_back(p.grad().detach() * 1.0);

  // The reference, on every rank, from the same weights.
  std::vector<Tensor> expected = gradient_by_definition(model, micro);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(same_bits(got[j], expected[j])) << "parameter " << j;
  double expected_loss = 0;
  for (std::int64_t k = 0; k < micro; ++k) {
    auto [x, y] = micro_batch(k);
    expected_loss += model.loss(x, y).item() / static_cast<double>(micro);
  }
  EXPECT_EQ(step_loss, expected_loss);
  if (!alone) {
    const dist::CommunicationStats& s = dp.last_step();
    EXPECT_GT(s.buckets, 2);
    // Every bucket was started by the engine's hooks, before backward returned.
    EXPECT_EQ(s.buckets_started_during_backward, s.buckets);
    // 2 (N - 1) / N of the gradient's bytes, give or take the rounding of the parts.
    double bytes = static_cast<double>(model.parameter_count() * static_cast<std::int64_t>(dtype_size(dtype)));
    double n = dist::world_size();
    EXPECT_NEAR(static_cast<double>(s.bytes_sent), 2 * (n - 1) / n * bytes, 2.0 * s.buckets * n * 8);
  }
}

INSTANTIATE_TEST_SUITE_P(Dist, DataParallelEquality, ::testing::Values(kFloat32, kFloat64));

TEST(DataParallel, RefusesBadSettings) {
  Tensor w = full({3}, 1.0).requires_grad_();
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { dist::DataParallel({w}, {.micro_batches = 0}); },
                                                 "micro_batches must be at least 1, got 0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { dist::DataParallel({w * 2}); },
                                                 "parameter 0 is not a floating-point leaf that requires grad"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        dist::DataParallel({w, w});
      },
      "parameter 1 (shape [3]) is listed twice"));
  dist::DataParallel dp({w});
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { dp.loss_weight(w.sum(), 1.5); }, "must be in [0, 1], got 1.5"));
  if (dist::world_size() > 1) {
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { dist::DataParallel({w}, {.micro_batches = 2}); },
                                                   "under mpirun each process is one micro-batch"));
  }
}

TEST(DataParallel, RefusesAGradientWithAGraph) {
  if (dist::world_size() > 1) GTEST_SKIP() << "checked in one process";
  Tensor w = full({3}, 2.0, kFloat64).requires_grad_();
  dist::DataParallel dp({w}, {.micro_batches = 2});  // summed over two micro-batches, outside the graph
  dp.begin_micro_batch();
  Tensor loss = (w * w).sum();
  loss.backward(dp.loss_weight(loss), std::nullopt, /*create_graph=*/true);
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] { dp.end_micro_batch(); },
      "parameter 0 (shape [3]) received a gradient with a graph (backward with create_graph)"));
  w.zero_grad();  // the gradient's graph refers back to w
}

TEST(DataParallel, NoParametersAtAllIsAStepWithNothingToSum) {
  dist::DataParallel dp({});
  for (std::int64_t k : dp.my_micro_batches()) {
    (void)k;
    dp.begin_micro_batch();
    dp.end_micro_batch();
  }
  EXPECT_EQ(dp.last_step().bytes_sent, 0);
}

TEST(DataParallel, AParameterNoMicroBatchReachesGetsZerosOnEveryRank) {
  Tensor used = full({4}, 2.0, kFloat64).requires_grad_(), unused = full({3}, 1.0, kFloat64).requires_grad_();
  std::int64_t micro = dist::world_size() == 1 ? 2 : 1;
  dist::DataParallel dp({used, unused}, {.micro_batches = micro});
  for (std::int64_t k : dp.my_micro_batches()) {
    dp.begin_micro_batch();
    Tensor loss = (used * static_cast<double>(k + 1)).sum();
    loss.backward(dp.loss_weight(loss));
    dp.end_micro_batch();
  }
  // d/dused of sum_k (k + 1) sum(used) / M = (1 + 2 + ... + M) / M.
  double m = static_cast<double>(dp.micro_batches());
  EXPECT_TRUE(test::all_close(used.grad(), std::vector<double>(4, (m + 1) / 2), 1e-15));
  EXPECT_TRUE(test::all_close(unused.grad(), std::vector<double>(3, 0.0), 0));
}

}  // namespace
}  // namespace ag

// The test program's main: under mpirun, MPI first.
int main(int argc, char** argv) {
  ag::dist::Environment mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS();
  // Every rank's verdict: a failure on any rank fails the program on rank 0.
  return ag::dist::any(failed != 0) ? 1 : 0;
}
