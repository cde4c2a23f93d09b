// Long runs hold their memory: training steps of a small GPT (the full loop of `minigpt train`:
// fresh batches, zero_grad, backward, gradient clipping, AdamW, and a no-grad evaluation now and
// then) with the process's resident memory read ten times. After the first tenth (caches, the
// allocator's free lists and the thread pool all warm), it may not grow. scripts/test runs
// 1,000 steps; `scripts/test --full` also runs 5,000 (the meson suite `long`).
//
// Under AddressSanitizer the resident size says little (freed memory sits in a quarantine), so
// that build runs 200 steps and leaves the verdict on leaks to LeakSanitizer at exit.
#include <unistd.h>

#include <fstream>

#include "../test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define AG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AG_ASAN 1
#endif
#endif

namespace ag {
namespace {

double resident_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

void expect_flat_over(int steps) {
#ifdef AG_ASAN
  steps = 200;
#endif
  const int interval = steps / 10;
  Generator gen(1);
  // The "tiny" configuration of bench/gpt_train_step.
  nn::GPT model({.vocab_size = 65, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 64}, gen);
  optim::AdamW opt(optim::decay_groups(model, 0.1), {.lr = 1e-3});
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 20000; ++i) ids.push_back(static_cast<std::int64_t>(gen.next_u64() % 65));
  data::TextDataset ds(ids, 0.1);

  std::vector<double> rss;
  for (int step = 1; step <= steps; ++step) {
    auto batch = ds.sample(data::TextDataset::Split::Train, 16, 32, gen);
    Tensor loss = model.loss(batch.x, batch.y);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    ASSERT_TRUE(std::isfinite(loss.item()));
    if (step % interval == 0) {
      NoGradGuard no_grad;
      model.eval();
      auto val = ds.sample(data::TextDataset::Split::Validation, 16, 32, gen);
      ASSERT_TRUE(std::isfinite(model.loss(val.x, val.y).item()));
      model.train();
      rss.push_back(resident_mb());
    }
  }
  std::string table;
  for (std::size_t i = 0; i < rss.size(); ++i) table += fmt::format(" {}:{:.1f}", (i + 1) * interval, rss[i]);
  std::printf("resident MB by step:%s\n", table.c_str());
  ::testing::Test::RecordProperty("resident_mb", table);
#ifndef AG_ASAN
  // From the first reading to the last: at most 1 MB more (a page or two of bookkeeping may settle).
  double after_warmup = rss.front(), peak = *std::max_element(rss.begin(), rss.end());
  EXPECT_LE(peak - after_warmup, 1.0) << "resident memory grew from " << after_warmup << " MB to " << peak << " MB";
#endif
}

TEST(Memory, AThousandTrainingStepsStayFlat) { expect_flat_over(1000); }
TEST(Memory, FiveThousandTrainingStepsStayFlat) { expect_flat_over(5000); }

}  // namespace
}  // namespace ag
