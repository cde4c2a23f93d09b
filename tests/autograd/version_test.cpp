// Version counters (autograd/tensor.h, Storage::version): every in-place write the library
// makes bumps the version of the storage it writes, each op notes the versions of what its
// backward reads, and backward refuses to run on values that changed since. Without this, an
// optimizer step between two backward calls, or a write through data_ptr, gives a gradient
// computed from values the forward never used, silently.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;

Tensor leaf(std::vector<double> values, Shape shape) { return tensor(values, shape, kFloat64).requires_grad_(); }

TEST(Version, MutableAccessBumpsAndReadingDoesNot) {
  Tensor t = zeros({3}, kFloat64);
  std::uint64_t v = t.version();
  const Tensor& ct = t;
  (void)ct.data_ptr<double>();
  (void)t.data_ptr<double>();  // through a non-const handle too: data_ptr reads
  (void)t.const_data_ptr<double>();
  (void)t.raw_data();
  (void)t.at<double>({0});
  (void)t.to_vector<double>();
  EXPECT_EQ(t.version(), v) << "reading is not a write";
  t.mutable_data_ptr<double>()[0] = 1;
  EXPECT_EQ(t.version(), v + 1);
  (void)t.mutable_raw_data();
  EXPECT_EQ(t.version(), v + 2);
  // Views and detached handles share the storage, and so its version.
  Tensor view = t.reshape({3, 1}), alias = t.detach();
  alias.mutable_data_ptr<double>()[1] = 2;
  EXPECT_EQ(view.version(), v + 3);
  EXPECT_EQ(t.version(), v + 3);
}

TEST(Version, WriteThroughDataPtrAfterSaveIsCaught) {
  Tensor a = leaf({1, 2, 3}, {3}), b = leaf({4, 5, 6}, {3});
  Tensor y = (a * b).sum();  // mul saves a and b: da = dy * b
  b.mutable_data_ptr<double>()[0] = 100;
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { y.backward(); },
                                              "input 1 of 'mul' (float64 [3], a leaf) was changed in place"));
  EXPECT_FALSE(a.grad().defined()) << "nothing accumulated before the check";
  // The forward run again sees the new value, and backward works.
  Tensor again = (a * b).sum();
  again.backward();
  EXPECT_TRUE(all_close(a.grad(), {100, 5, 6}, 0));
}

// Reading a saved tensor between forward and backward (a non-const handle, as user code has)
// leaves backward free to run; writing it still stops backward.
// The in-place methods a libtorch user reaches for (mul_, fill_, zero_, copy_) write through
// the storage like any other write: each bumps the version once, every handle sees the values,
// and a graph that saved the tensor refuses them.
TEST(Version, InPlaceMethodsAreWrites) {
  Tensor t = tensor({1, 2, 3}, {3}, kFloat64);
  Tensor view = t.reshape({3, 1});
  std::uint64_t v = t.version();
  t.mul_(tensor({2}, {1}, kFloat64));
  EXPECT_TRUE(all_close(view, {2, 4, 6}, 0));
  t.mul_(0.5);
  EXPECT_TRUE(all_close(t, {1, 2, 3}, 0));
  t.copy_(tensor({7, 8, 9}, {3}, kFloat32));  // converted to float64
  EXPECT_TRUE(all_close(view, {7, 8, 9}, 0));
  t.copy_(scalar(4.0, kFloat64));  // broadcast
  EXPECT_TRUE(all_close(t, {4, 4, 4}, 0));
  t.fill_(-1.5);
  EXPECT_TRUE(all_close(view, {-1.5, -1.5, -1.5}, 0));
  t.zero_();
  EXPECT_TRUE(all_close(t, {0, 0, 0}, 0));
  t.copy_(t);  // from itself: unchanged
  EXPECT_TRUE(all_close(t, {0, 0, 0}, 0));
  EXPECT_EQ(t.version(), v + 7);
  Tensor ids = arange(4);
  ids.fill_(9.0);
  EXPECT_EQ(ids.to_vector<std::int64_t>(), (std::vector<std::int64_t>{9, 9, 9, 9}));
  ids.copy_(from_vector<std::int64_t>({1, 2, 3, 4}, {4}));
  EXPECT_EQ(ids.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3, 4}));

  Tensor a = leaf({1, 2}, {2}), b = tensor({3, 4}, {2}, kFloat64);
  Tensor y = (a * b).sum();  // saves b
  b.fill_(0.0);
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { y.backward(); }, "input 1 of 'mul' (float64 [2]"));
  Tensor z = (a * b).sum();
  b.copy_(tensor({5, 6}, {2}, kFloat64));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { z.backward(); }, "was changed in place"));
}

TEST(Version, InPlaceMethodsRefuseWhatTheyCannotDo) {
  Tensor w = leaf({1, 2}, {2});
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { w.fill_(0.0); }, "fill_: the float64 tensor of shape [2] requires grad"));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { w.mul_(2.0); }, "mul_: the float64 tensor of shape [2] requires grad"));
  {
    NoGradGuard no_grad;
    w.mul_(2.0).zero_();  // with grad mode off, as an optimizer step
  }
  EXPECT_TRUE(all_close(w, {0, 0}, 0));
  EXPECT_TRUE(w.is_leaf());
  Tensor t = zeros({2, 3}, kFloat64);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { t.copy_(ones({3, 3})); },
                                                 "copy_: shapes [3, 3] and [2, 3] cannot be broadcast"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { t.copy_(ones({1, 2, 3})); },
                                                 "copy_: src of shape [1, 2, 3] does not broadcast to this tensor's shape [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { t.mul_(ones({2, 3})); }, "mul_: dtypes differ"));
  Tensor ids = arange(3);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { ids.fill_(1e300); }, "fill_: value 1e+300 cannot be stored in int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { ids.copy_(from_vector<std::int64_t>({1}, {1})); },
                                                 "copy_: the int64 tensor of shape [3] is copied only from one of its shape, got [1]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { ids.mul_(2.0); }, "mul_: expected a float32 or float64 tensor, got int64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { Tensor().zero_(); }, "fill_: got an undefined tensor"));
}

TEST(Version, AReadBetweenForwardAndBackwardIsNotAWrite) {
  Tensor a = leaf({1, 2, 3}, {3}), b = leaf({4, 5, 6}, {3});
  Tensor y = (a * b).sum();
  EXPECT_EQ(b.data_ptr<double>()[0], 4.0);  // reads through the non-const handle b
  EXPECT_NE(b.raw_data(), nullptr);
  y.backward();
  EXPECT_TRUE(all_close(a.grad(), {4, 5, 6}, 0));
  Tensor z = (a * b).sum();
  b.mutable_data_ptr<double>()[0] = 7;
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { z.backward(); },
                                              "input 1 of 'mul' (float64 [3], a leaf) was changed in place"));
}

TEST(Version, AnOpThatReadsNothingIgnoresChanges) {
  // add's gradient is dy itself: a change to its inputs cannot make it wrong.
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  Tensor y = (a + b).sum();
  a.mutable_data_ptr<double>()[0] = 7;
  y.backward();
  EXPECT_TRUE(all_close(a.grad(), {1, 1}, 0));
  EXPECT_TRUE(all_close(b.grad(), {1, 1}, 0));
}

TEST(Version, OutputsAndCapturedMasksAreChecked) {
  Tensor x = leaf({0.5, -1, 2}, {3});
  Tensor e = x.exp();  // exp saves its output: dx = dy * e
  Tensor loss = e.sum();
  e.mutable_data_ptr<double>()[0] = 0;
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { loss.backward(); }, "its output of 'exp'"));
  Tensor mask = from_vector<bool>({true, false, false}, {3});
  Tensor filled = masked_fill(x, mask, 0.0).sum();
  mask.mutable_data_ptr<bool>()[1] = true;  // the mask is not an input, but its backward reads it
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { filled.backward(); }, "a tensor it saved of 'masked_fill'"));
}

// The case from the issue that motivated the counters: backward with retain_graph, an
// optimizer step, and a second backward through the same graph.
TEST(Version, EveryOptimizerStepIsAnInPlaceWrite) {
  for (const char* which : {"SGD", "Adam", "AdamW"}) {
    SCOPED_TRACE(which);
    manual_seed(3);
    nn::Linear layer(3, 2);
    Tensor x = randn({4, 3});
    std::unique_ptr<optim::Optimizer> opt;
    if (std::string(which) == "SGD")
      opt = std::make_unique<optim::SGD>(layer.parameters(), optim::SGDOptions{.lr = 0.1});
    if (std::string(which) == "Adam") opt = std::make_unique<optim::Adam>(layer.parameters());
    if (std::string(which) == "AdamW") opt = std::make_unique<optim::AdamW>(layer.parameters());
    Tensor loss = layer.forward(x).pow(2).sum();
    loss.backward({}, /*retain_graph=*/true);
    std::uint64_t before = layer.weight.version();
    opt->step();
    EXPECT_GT(layer.weight.version(), before);
    EXPECT_TRUE(throws_with<std::runtime_error>([&] { loss.backward(); }, "of 'linear' (float32 [2, 3], a leaf)"));
  }
}

TEST(Version, GradientWritesBumpTheGradient) {
  Tensor w = leaf({1, 2}, {2});
  (w * w).sum().backward();
  Tensor g = w.grad();
  std::uint64_t v = g.version();
  (w * w).sum().backward();  // accumulates into the same .grad, in place
  EXPECT_GT(g.version(), v);
  v = g.version();
  optim::clip_grad_norm({w}, 1e-3);  // scales the gradient in place
  EXPECT_GT(g.version(), v);
  // zero_grad drops the gradient rather than writing zeros into it: a graph that read the old
  // one still sees it unchanged.
  Tensor u = leaf({3, 4}, {2});
  Tensor y = (u * g).sum();
  w.zero_grad();
  std::vector<double> expected = g.to_vector<double>();
  y.backward();
  EXPECT_TRUE(all_close(u.grad(), expected, 0));
}

TEST(Version, NewDataFromSetDataAfterSaveIsCaught) {
  // embedding's backward reads the indices through the caller's handle.
  Tensor table = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor ids = from_vector<std::int64_t>({0, 2}, {2});
  Tensor y = embedding(table, ids).sum();
  ids.set_data(from_vector<std::int64_t>({1, 1}, {2}));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { y.backward(); }, "was given new data by set_data"));
}

// Backward from several threads: passes over separate graphs that share leaves are supported,
// and their gradients all arrive (run this test under ThreadSanitizer: scripts/tsan).
TEST(ConcurrentBackward, SeparateGraphsAccumulateIntoSharedLeaves) {
  Tensor w = leaf({1, -2, 3}, {3});
  constexpr int kThreads = 4, kSteps = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&w, t] {
      for (int i = 0; i < kSteps; ++i) {
        Tensor x = full({3}, t + 1.0, kFloat64);
        (w * x).sum().backward();  // d/dw = x = t + 1 in every element
      }
    });
  for (auto& th : threads) th.join();
  double expected = kSteps * (1 + 2 + 3 + 4);  // sum over threads of kSteps * (t + 1)
  EXPECT_TRUE(all_close(w.grad(), {expected, expected, expected}, 0));
}

TEST(ConcurrentBackward, OneGraphFromTwoThreadsAtOnceIsRefused) {
  // A custom op whose backward waits until the main thread has tried its own backward through
  // the same graph, so the two passes certainly overlap.
  std::mutex m;
  std::condition_variable cv;
  bool inside = false, tried = false;
  Tensor x = leaf({1, 2}, {2});
  Tensor y = record("wait", x.detach().clone(), {x}, [&](const Tensor& dy, const std::vector<bool>&) {
    std::unique_lock lock(m);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return tried; });
    return std::vector<Tensor>{dy};
  });
  Tensor loss = y.sum();
  std::thread first([&] { loss.backward({}, /*retain_graph=*/true); });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return inside; });
  }
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { loss.backward({}, true); },
                                              "is being differentiated by another thread at the same time"));
  {
    std::lock_guard lock(m);
    tried = true;
  }
  cv.notify_all();
  first.join();
  EXPECT_TRUE(all_close(x.grad(), {1, 1}, 0));
  loss.backward();  // after the first pass is over, the graph is free again
  EXPECT_TRUE(all_close(x.grad(), {2, 2}, 0));
}

}  // namespace
}  // namespace ag
