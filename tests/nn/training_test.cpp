// End-to-end: the pieces train together. A small GPT memorises one fixed batch.
#include "../test_util.h"

namespace ag {
namespace {

TEST(Training, SmallGPTOverfitsOneBatch) {
  Generator gen(1);
  nn::GPT model({.vocab_size = 16, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32}, gen);
  optim::AdamW opt(optim::decay_groups(model, 0.0), {.lr = 3e-3, .weight_decay = 0.0});
  data::TextDataset ds(
      [] {
        std::vector<std::int64_t> ids;
        Generator g(2);
        for (int i = 0; i < 400; ++i) ids.push_back(static_cast<std::int64_t>(g.next_u64() % 16));
        return ids;
      }(),
      0.1);
  auto batch = ds.sample(data::TextDataset::Split::Train, 4, 16, gen);  // random tokens: only memorising works
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor loss = model.loss(batch.x, batch.y);
    if (step == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
  }
  EXPECT_NEAR(first, std::log(16.0), 0.1);  // starts near uniform
  EXPECT_LT(last, 0.05);
}

}  // namespace
}  // namespace ag
