// The thread pool (runtime/parallel.h), and that a training step gives the same answer on one
// thread as on several. The GEMM split built on the pool is tested in tests/kernels/blas_test.cpp.
#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

#include "../test_util.h"

namespace ag {
namespace {

using test::ThreadCount;

struct Range {
  std::int64_t begin, end;
};

std::vector<Range> ranges_of(std::int64_t n, std::int64_t grain) {
  std::vector<Range> ranges;
  std::mutex m;
  parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    ranges.push_back({b, e});
  });
  std::sort(ranges.begin(), ranges.end(), [](Range x, Range y) { return x.begin < y.begin; });
  return ranges;
}

TEST(Parallel, ChunksCoverTheRangeOnceAndRespectTheGrain) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadCount tc(threads);
    for (std::int64_t n : {1, 2, 7, 64, 1000, 1001})
      for (std::int64_t grain : {1, 3, 100, 5000}) {
        std::vector<Range> r = ranges_of(n, grain);
        ASSERT_FALSE(r.empty());
        EXPECT_EQ(r.front().begin, 0);
        EXPECT_EQ(r.back().end, n);
        for (std::size_t i = 1; i < r.size(); ++i) EXPECT_EQ(r[i].begin, r[i - 1].end);
        std::int64_t expected_chunks = std::min<std::int64_t>(threads, std::max<std::int64_t>(n / grain, 1));
        EXPECT_EQ(static_cast<std::int64_t>(r.size()), expected_chunks) << "n " << n << " grain " << grain;
        if (r.size() > 1) {
          for (Range x : r) EXPECT_GE(x.end - x.begin, grain) << "n " << n << " grain " << grain;
        }
      }
  }
}

TEST(Parallel, ChunksRunOnMoreThanOneThread) {
  ThreadCount tc(2);
  std::atomic<int> inside{0}, most{0};
  // Each chunk waits (boundedly) until the other has started: only possible on two threads.
  parallel_for(2, 1, [&](std::int64_t, std::int64_t) {
    int now = ++inside;
    most = std::max(most.load(), now);
    for (int spins = 0; inside.load() < 2 && spins < 200000000; ++spins) {
    }
    most = std::max(most.load(), inside.load());
  });
  EXPECT_EQ(most.load(), 2);
}

TEST(Parallel, NestedLoopsRunSeriallyInsideTheirChunk) {
  ThreadCount tc(2);
  std::atomic<int> inner_calls{0};
  parallel_for(2, 1, [&](std::int64_t, std::int64_t) {
    EXPECT_TRUE(in_parallel_region());
    EXPECT_EQ(chunk_count(1000, 1), 1);
    parallel_for(1000, 1, [&](std::int64_t b, std::int64_t e) {
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 1000);
      ++inner_calls;
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
  EXPECT_FALSE(in_parallel_region());
}

TEST(Parallel, AnExceptionInAnyChunkReachesTheCallerAndThePoolStillWorks) {
  ThreadCount tc(2);
  for (std::int64_t failing : {0, 1}) {  // the first chunk, then the second (either thread may run either)
    EXPECT_TRUE(test::throws_with<std::runtime_error>(
        [&] {
          parallel_for(2, 1, [&](std::int64_t b, std::int64_t) {
            if (b == failing) throw std::runtime_error("chunk failed");
          });
        },
        "chunk failed"));
    EXPECT_FALSE(in_parallel_region());
  }
  std::atomic<std::int64_t> sum{0};
  parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(Parallel, ChunkIndicesMatchChunkCount) {
  ThreadCount tc(3);
  for (std::int64_t n : {5, 100, 12345}) {
    std::int64_t chunks = chunk_count(n, 4);
    std::vector<int> seen(static_cast<std::size_t>(chunks), 0);
    std::int64_t covered = 0;
    std::mutex m;
    parallel_for_chunks(n, 4, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
      std::lock_guard<std::mutex> lock(m);
      ASSERT_LT(c, chunks);
      ++seen[static_cast<std::size_t>(c)];
      covered += e - b;
    });
    EXPECT_EQ(covered, n);
    for (int s : seen) EXPECT_EQ(s, 1);
  }
}

// Each chunk's partials start on a cache line of their own, start at zero, and are added in
// chunk order. Widths around a line's 16 floats or 8 doubles catch a stride rounded the wrong way.
template <class T>
void check_chunk_partials() {
  for (std::int64_t n : {1, 7, 8, 15, 16, 17, 64, 65}) {
    ChunkPartials<T> partials(3, n);
    for (std::int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(partials[c]) % 64, 0u) << "chunk " << c << " of width " << n;
      if (c > 0) {
        EXPECT_GE(partials[c] - partials[c - 1], n) << "chunks overlap at width " << n;
      }
      for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(partials[c][j], T(0));
      for (std::int64_t j = 0; j < n; ++j) partials[c][j] = static_cast<T>((c + 1) * 100 + j);
    }
    std::vector<T> out(static_cast<std::size_t>(n), T(1));
    partials.add_to(out.data());
    for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(out[static_cast<std::size_t>(j)], static_cast<T>(601 + 3 * j));
  }
}

TEST(Parallel, ChunkPartialsSitOnTheirOwnCacheLines) {
  check_chunk_partials<float>();
  check_chunk_partials<double>();
}

TEST(Parallel, BadThreadCountsAreRejected) {
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([] { set_num_threads(0); }, "set_num_threads"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([] { set_num_threads(-2); }, "got -2"));
  ThreadCount tc(2);
  EXPECT_EQ(get_num_threads(), 2);
  parallel_for(2, 1, [&](std::int64_t, std::int64_t) { EXPECT_THROW(set_num_threads(1), std::logic_error); });
}

// A GPT training step's loss and gradients do not depend on how many threads computed them
// (beyond rounding), and repeat exactly for a given thread count.
TEST(Parallel, TrainingStepAgreesAcrossThreadCounts) {
  // 8 x 48 = 384 rows: enough that layer norm, the bias gradients and GELU split as well as the
  // matrix products and attention.
  nn::GPTConfig config{.vocab_size = 11, .block_size = 48, .n_layer = 2, .n_head = 3, .n_embd = 48};
  Generator data(4);
  std::vector<std::int64_t> ids(8 * 48), targets(8 * 48);
  for (auto& v : ids) v = static_cast<std::int64_t>(data.next_u64() % 11);
  for (auto& v : targets) v = static_cast<std::int64_t>(data.next_u64() % 11);
  auto run = [&](int threads) {
    ThreadCount tc(threads);
    Generator gen(3);
    nn::GPT model(config, gen);
    model.to(kFloat64);
    Tensor loss = model.loss(from_vector(ids, {8, 48}), from_vector(targets, {8, 48}));
    loss.backward();
    std::vector<Tensor> grads;
    for (auto& p : model.parameters()) grads.push_back(p.grad().clone());
    grads.push_back(loss.detach());
    return grads;
  };
  std::vector<Tensor> one = run(1), two = run(2), two_again = run(2), three = run(3);
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(test::all_close(two[i], one[i], 1e-12)) << "tensor " << i;
    EXPECT_TRUE(test::all_close(three[i], one[i], 1e-12)) << "tensor " << i;
    EXPECT_TRUE(test::all_close(two_again[i], two[i], 0.0)) << "tensor " << i;
  }
}

}  // namespace
}  // namespace ag
