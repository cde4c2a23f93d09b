// Checks runtime/profile.h: the families' times partition the recorded wall time (a scope's
// time is not counted again in the scope around it), each op is charged to its family, a
// backward pass's own bookkeeping to the engine, and nothing is recorded when it is off or on
// another thread.
#include <set>
#include <thread>

#include "../test_util.h"

namespace ag {
namespace {

using profile::Family;

double seconds(const profile::Totals& t, Family f) { return t.seconds[static_cast<int>(f)]; }
std::int64_t entries(const profile::Totals& t, Family f) { return t.entries[static_cast<int>(f)]; }

TEST(Profile, OffRecordsNothingAndStopWithoutStartIsEmpty) {
  Generator gen(1);
  Tensor a = randn({64, 64}, gen);
  a.matmul(a).sum();
  profile::Totals t = profile::stop();
  for (int f = 0; f < profile::kFamilies; ++f) {
    EXPECT_EQ(t.seconds[f], 0.0);
    EXPECT_EQ(t.entries[f], 0);
  }
  EXPECT_EQ(t.wall, 0.0);
}

TEST(Profile, EachOpIsChargedToItsFamily) {
  Generator gen(2);
  Tensor x = randn({32, 48}, gen), w = randn({48}, gen), b = randn({48}, gen);
  Tensor m = randn({48, 40}, gen);
  profile::start();
  Tensor y = layer_norm(x, w, b, 1e-5);
  profile::Totals after_norm = profile::stop();
  EXPECT_EQ(entries(after_norm, Family::Normalisation), 1);
  EXPECT_EQ(entries(after_norm, Family::Products), 0);
  EXPECT_GT(seconds(after_norm, Family::Normalisation), 0.0);

  profile::start();
  Tensor z = (y.tanh() + 1.0).matmul(m).softmax(-1).sum();
  profile::Totals t = profile::stop();
  EXPECT_GE(entries(t, Family::Products), 1);                 // the GEMM (and the matmul op around it)
  EXPECT_EQ(entries(t, Family::Softmax), 1);
  EXPECT_GE(entries(t, Family::Elementwise), 2);               // tanh and the add
  EXPECT_EQ(entries(t, Family::Reduction), 1);                 // the sum
  EXPECT_EQ(entries(t, Family::Normalisation), 0);
  EXPECT_EQ(entries(t, Family::Engine), 0);                    // no backward ran
}

TEST(Profile, TheFamiliesPartitionTheWallTimeAndBackwardIsTheEngines) {
  Generator gen(3);
  nn::GPT model({.vocab_size = 11, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32}, gen);
  optim::AdamW opt(model.parameters(), {.lr = 1e-3});
  Tensor ids = randint(0, 11, {4, 16}, gen), targets = randint(0, 11, {4, 16}, gen);
  profile::start();
  opt.zero_grad();
  Tensor loss = model.loss(ids, targets);
  loss.backward();
  opt.step();
  profile::Totals t = profile::stop();
  double covered = 0.0;
  for (int f = 0; f < profile::kFamilies; ++f) {
    EXPECT_GE(t.seconds[f], 0.0);
    covered += t.seconds[f];
  }
  // Exclusive times: nested scopes are not counted twice, so together they fit in the wall time.
  EXPECT_LE(covered, t.wall * (1 + 1e-9));
  EXPECT_GT(covered, 0.0);
  for (Family f : {Family::Products, Family::Elementwise, Family::Normalisation, Family::Softmax,
                   Family::Reduction, Family::Optimizer, Family::Engine})
    EXPECT_GT(entries(t, f), 0) << profile::name(f);
  EXPECT_EQ(entries(t, Family::Engine), 1);  // one backward pass
  EXPECT_EQ(entries(t, Family::Optimizer), 2);  // zero_grad and step
}

TEST(Profile, OnlyTheThreadThatStartedRecords) {
  Generator gen(4);
  Tensor a = randn({64, 64}, gen);
  profile::start();
  std::thread other([&] { a.matmul(a); });  // while recording is on, but on another thread
  other.join();
  profile::Totals t = profile::stop();
  EXPECT_EQ(entries(t, Family::Products), 0);
}

// Each op names its family where it is defined, and its node carries it: the node's name plays
// no part (a name that starts like another op's, "logsumexp_mine" beside "log", is not theirs).
TEST(Profile, EachNodeCarriesItsOpsFamily) {
  Generator gen(5);
  Tensor x = randn({3, 5}, gen, kFloat64).requires_grad_(), w = randn({5}, gen, kFloat64).requires_grad_();
  Tensor m = randn({5, 4}, gen, kFloat64).requires_grad_(), bias = randn({4}, gen, kFloat64).requires_grad_();
  auto family = [](const Tensor& t) { return t.grad_fn()->family(); };
  EXPECT_EQ(family(layer_norm(x, w, w, 1e-5)), Family::Normalisation);
  EXPECT_EQ(family(rms_norm(x, w, 1e-5)), Family::Normalisation);
  EXPECT_EQ(family(x.log_softmax(-1)), Family::Softmax);
  EXPECT_EQ(family((x * x + 1.0).log()), Family::Elementwise);
  EXPECT_EQ(family(linear_gelu(x, m.transpose(0, 1), bias)), Family::Elementwise);
  EXPECT_EQ(family(x.matmul(m)), Family::Products);
  EXPECT_EQ(family(x.permute({1, 0})), Family::Reduction);
  Tensor q = randn({1, 2, 5, 4}, gen, kFloat64).requires_grad_();
  EXPECT_EQ(family(scaled_dot_product_attention(q, q, q, {}, true).output), Family::Softmax);

  // An op of one's own: a name alone is charged with what is not named, or it names its family.
  auto twice = [](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy * 2.0}; };
  Tensor plain;
  {
    NoGradGuard no_grad;
    plain = x * 2.0;
  }
  EXPECT_EQ(family(record("logsumexp_mine", plain.clone(), {x}, twice, Saved{})), Family::Reduction);
  Tensor named = record({"twice", Family::Elementwise}, plain.clone(), {x}, twice, Saved{});
  EXPECT_EQ(named.grad_fn()->name(), "twice");
  EXPECT_EQ(family(named), Family::Elementwise);

  // The node that holds an op's fused gradients under create_graph is of the op's family.
  Tensor loss = scaled_dot_product_attention(q, q, q, {}, true).output.pow(2.0).sum();
  std::vector<Tensor> g = grad({loss}, {q}, {}, {.create_graph = true});
  std::vector<Node*> stack{g[0].grad_fn().get()};
  std::set<Node*> seen;
  int fused = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n).second) continue;
    if (n->name() == "scaled_dot_product_attention_backward") {
      ++fused;
      EXPECT_EQ(n->family(), Family::Softmax);
    }
    for (const Edge& e : n->next_edges()) stack.push_back(e.node.get());
  }
  EXPECT_GE(fused, 1);
  EXPECT_EQ(profile::name(Family::Products), "products");
  EXPECT_EQ(profile::name(Family::Pool), "pool");
}

}  // namespace
}  // namespace ag
