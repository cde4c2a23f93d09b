// Checks what the example programs do around a run (examples/common/): the memory budget
// against the models' own parameter counts and against the memory a real step takes, the
// overflow-checked sizes, the run lock, stopping between ops on a signal, and the --precision
// option's choice.
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "../test_util.h"
#include "memory_budget.h"
#include "precision_option.h"
#include "preflight.h"
#include "run_lock.h"
#include "stop.h"

namespace ag::examples {
namespace {

using test::throws_with;

TEST(Size, OverflowIsKeptNotWrapped) {
  Size big = Size(1537228672809129301) * 1537228672809129301;
  EXPECT_TRUE(big.overflowed());
  EXPECT_NEAR(big.approx(), 2.363e36, 1e33);
  EXPECT_TRUE((big + 1).overflowed());  // it stays too large
  EXPECT_TRUE(big > 0);
  EXPECT_TRUE((Size(INT64_MAX) + 1).overflowed());
  Size fine = Size(3) * 4 + 5;
  EXPECT_FALSE(fine.overflowed());
  EXPECT_EQ(fine.value(), 17);
  EXPECT_EQ(format_count(Size(5154048704512)), "5,154,048,704,512");
  EXPECT_EQ(format_bytes(Size(3) * 1024 * 1024 * 1024), "3.0 GiB");
  EXPECT_EQ(format_bytes(Size(100)), "100 bytes");
  EXPECT_EQ(format_bytes(big), "2.4e+36 bytes (more than int64 can count)");
}

TEST(MemoryBudget, ParameterCountsAreTheModels) {
  for (nn::GPTConfig c :
       {nn::GPTConfig{.vocab_size = 7, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8},
        nn::GPTConfig{.vocab_size = 65, .block_size = 32, .n_layer = 3, .n_head = 4, .n_embd = 24},
        nn::GPTConfig{.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 6, .bias = false}}) {
    nn::GPT model(c);
    Size counted = gpt_parameter_count(c);
    ASSERT_FALSE(counted.overflowed());
    EXPECT_EQ(counted.value(), model.parameter_count()) << "layers " << c.n_layer << ", bias " << c.bias;
  }
  nn::TransformerConfig base{.src_vocab = 13,
                             .tgt_vocab = 11,
                             .d_model = 16,
                             .n_heads = 2,
                             .d_ff = 32,
                             .n_encoder_layers = 2,
                             .n_decoder_layers = 1,
                             .max_len = 10};
  nn::TransformerConfig learned = base, post_ln = base;
  learned.positions = nn::Positions::Learned;
  post_ln.norm_first = false;
  for (const nn::TransformerConfig& c : {base, learned, post_ln}) {
    nn::Transformer model(c);
    EXPECT_EQ(transformer_parameter_count(c).value(), model.parameter_count());
  }
}

// The memory one training step takes above what was live before it, as the library counts it.
template <class Step>
std::int64_t measured_step_bytes(Step&& step) {
  step();  // the first step creates the optimizer's moments; measure the second
  std::int64_t before = memory_stats().live_bytes;
  reset_peak_bytes();
  step();
  return memory_stats().peak_bytes - before;
}

struct KernelsGuard {
  Kernels saved = kernels();
  ~KernelsGuard() { set_kernels(saved); }
};

// The activation estimate is a fit (examples/common/memory_budget.cpp); it must stay near the
// truth on both kernel routes, or the refusals it drives are wrong.
TEST(MemoryBudget, ActivationEstimatesFollowMeasuredSteps) {
  KernelsGuard guard;
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    set_kernels(k);
    for (nn::GPTConfig c :
         {nn::GPTConfig{.vocab_size = 65, .block_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 64},
          nn::GPTConfig{.vocab_size = 300, .block_size = 128, .n_layer = 1, .n_head = 4, .n_embd = 32}}) {
      Generator gen(1);
      nn::GPT model(c, gen);
      optim::AdamW opt(optim::decay_groups(model, 0.1), {.lr = 1e-3});
      const std::int64_t batch = 8;
      std::vector<std::int64_t> ids;
      for (int i = 0; i < 5000; ++i) ids.push_back(static_cast<std::int64_t>(gen.next_u64() % c.vocab_size));
      data::TextDataset ds(ids, 0.1);
      std::int64_t measured = measured_step_bytes([&] {
        auto b = ds.sample(data::TextDataset::Split::Train, batch, c.block_size, gen);
        Tensor loss = model.loss(b.x, b.y);
        opt.zero_grad();
        loss.backward();
        opt.step();
      });
      double estimate = gpt_training_memory(c, batch).activation_bytes.approx();
      EXPECT_GE(estimate, 0.7 * static_cast<double>(measured)) << kernels_name(k) << " GPT, embd " << c.n_embd;
      EXPECT_LE(estimate, 1.6 * static_cast<double>(measured)) << kernels_name(k) << " GPT, embd " << c.n_embd;
      EXPECT_EQ(gpt_training_memory(c, batch).parameter_bytes.value(), 16 * model.parameter_count());
    }
    nn::TransformerConfig c{.src_vocab = 13,
                            .tgt_vocab = 13,
                            .d_model = 64,
                            .n_heads = 4,
                            .d_ff = 128,
                            .n_encoder_layers = 2,
                            .n_decoder_layers = 2,
                            .max_len = 18};
    Generator gen(2);
    nn::Transformer model(c, gen);
    optim::AdamW opt(optim::decay_groups(model, 0.01), {.lr = 1e-3});
    const std::int64_t batch = 32, s = 16;
    std::vector<std::int64_t> src, tgt;
    for (std::int64_t i = 0; i < batch * s; ++i) src.push_back(static_cast<std::int64_t>(gen.next_u64() % 10));
    for (std::int64_t i = 0; i < batch * (s + 1); ++i) tgt.push_back(static_cast<std::int64_t>(gen.next_u64() % 10));
    Tensor x = from_vector(src, {batch, s}), y = from_vector(tgt, {batch, s + 1});
    std::int64_t measured = measured_step_bytes([&] {
      Tensor loss = cross_entropy(model.forward(x, y), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    });
    double estimate = transformer_training_memory(c, batch, s).activation_bytes.approx();
    EXPECT_GE(estimate, 0.7 * static_cast<double>(measured)) << kernels_name(k) << " Transformer";
    EXPECT_LE(estimate, 1.6 * static_cast<double>(measured)) << kernels_name(k) << " Transformer";
  }
}

TEST(MemoryBudget, RefusesWhatCannotFit) {
  EXPECT_GT(memory_limit_bytes(), 0);
  nn::GPTConfig huge{.vocab_size = 24, .block_size = 64, .n_layer = 4, .n_head = 1, .n_embd = 1537228672809129301};
  EXPECT_TRUE(throws_with<Refused>([&] { check_fits_in_memory("the model", gpt_training_memory(huge, 16)); },
                                   "the model is too large for this machine: it would need about"));
  nn::GPTConfig small{.vocab_size = 24, .block_size = 16, .n_layer = 1, .n_head = 2, .n_embd = 16};
  EXPECT_NO_THROW(check_fits_in_memory("the model", gpt_training_memory(small, 4)));
}

TEST(RunLock, ASecondLockOnTheDirectoryIsRefused) {
  std::string dir = (std::filesystem::temp_directory_path() / fmt::format("attograd_lock_{}", ::getpid())).string();
  {
    RunLock first(dir, "run.lock");
    // flock locks belong to an open file: a second open, even in this process, conflicts.
    EXPECT_TRUE(throws_with<Refused>([&] { RunLock second(dir, "run.lock"); },
                                     fmt::format("{} is in use by another run (pid {})", dir, ::getpid())));
  }
  EXPECT_NO_THROW(RunLock again(dir, "run.lock"));  // released with the first
  std::filesystem::remove_all(dir);
}

TEST(StopBetweenOps, OpsThrowOnceAStopIsRequested) {
  StopOnSignal stop;
  Tensor a = ones({2, 2});
  {
    StopBetweenOps points;
    EXPECT_NO_THROW(a + a);
  }
  std::raise(SIGTERM);  // the first signal only sets the flag
  EXPECT_TRUE(StopOnSignal::requested());
  EXPECT_STREQ(StopOnSignal::signal_name(), "SIGTERM");
  EXPECT_NO_THROW(a + a);  // outside a StopBetweenOps, ops run on
  {
    StopBetweenOps points;
    EXPECT_THROW(a + a, Interrupted);
  }
  // The backward pass stops too: a graph recorded before the request, run after it.
  Tensor w = ones({2}).requires_grad_();
  Tensor loss = (w * w).sum();
  StopBetweenOps points;
  EXPECT_THROW(loss.backward(), Interrupted);
}

// --precision takes three names; fp32 always runs; auto takes bf16 exactly where the library says
// bf16 products run here, and says why; bf16 where they cannot is refused (status 2), not emulated.
TEST(PrecisionOption, TheChoiceFollowsTheLibrarysSupport) {
  EXPECT_EQ(parse_precision("fp32"), Precision::Fp32);
  EXPECT_EQ(parse_precision("bf16"), Precision::Bf16);
  EXPECT_EQ(parse_precision("auto"), Precision::Auto);
  EXPECT_TRUE(
      throws_with<Refused>([] { parse_precision("fp16"); }, "--precision must be fp32, bf16 or auto, got 'fp16'"));
  EXPECT_FALSE(choose_precision(Precision::Fp32).bf16);
  EXPECT_NE(choose_precision(Precision::Fp32).why.find("fp32"), std::string::npos);
  const Bf16Support& support = bf16_support();
  if (support.available) {
    EXPECT_TRUE(choose_precision(Precision::Auto).bf16);
    EXPECT_TRUE(choose_precision(Precision::Bf16).bf16);
    EXPECT_NE(choose_precision(Precision::Auto).why.find(support.unit), std::string::npos);
  } else {
    PrecisionChoice choice = choose_precision(Precision::Auto);
    EXPECT_FALSE(choice.bf16);
    EXPECT_NE(choice.why.find(support.reason), std::string::npos);
    EXPECT_TRUE(throws_with<Refused>([] { choose_precision(Precision::Bf16); }, "--precision bf16: " + support.reason));
  }
  // A whole run's choice: fp32 leaves autocast off.
  EXPECT_FALSE(apply_precision("fp32", false).bf16);
  EXPECT_FALSE(is_autocast_enabled());
}

// A bad name is a usage error of the command line, as every other bad option value is.
TEST(PrecisionOption, ABadNameIsAnOptionError) {
  namespace po = boost::program_options;
  std::string precision;
  po::options_description options;
  options.add_options()("precision", precision_value(&precision), kPrecisionHelp);
  const char* argv[] = {"program", "--precision", "half"};
  po::variables_map vm;
  po::store(po::parse_command_line(3, argv, options), vm);
  EXPECT_TRUE(throws_with<po::error>([&] { po::notify(vm); }, "--precision must be fp32, bf16 or auto, got 'half'"));
}

}  // namespace
}  // namespace ag::examples
