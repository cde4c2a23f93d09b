// Checks autograd/engine.cpp: ordering, accumulation, graph release, grad mode, memory.
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;

TEST(Engine, ChainRuleThroughAnExpression) {
  // L = sum(tanh(x * w + b));  dL/dx = (1 - tanh^2(u)) w, dL/dw = (1 - tanh^2(u)) x, dL/db = sum of (1 - tanh^2(u))
  Tensor x = tensor({0.5, -1.0}, {2}, kFloat64).requires_grad_();
  Tensor w = tensor({2.0, 0.25}, {2}, kFloat64).requires_grad_();
  Tensor b = scalar(0.1, kFloat64).requires_grad_();
  (x * w + b).tanh().sum().backward();
  double s0 = 1 - std::pow(std::tanh(0.5 * 2.0 + 0.1), 2), s1 = 1 - std::pow(std::tanh(-1.0 * 0.25 + 0.1), 2);
  EXPECT_TRUE(all_close(x.grad(), {s0 * 2.0, s1 * 0.25}, 1e-15));
  EXPECT_TRUE(all_close(w.grad(), {s0 * 0.5, s1 * -1.0}, 1e-15));
  EXPECT_TRUE(all_close(b.grad(), {s0 + s1}, 1e-15));
}

TEST(Engine, TensorUsedTwiceAccumulates) {
  // y = x * x: both edges lead to x, so dy/dx = x + x = 2x.
  Tensor x = tensor({3.0}, {1}, kFloat64).requires_grad_();
  (x * x).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {6.0}, 0));
}

TEST(Engine, DiamondGraphRunsEachNodeOnce) {
  // a = 2x; L = a*a + a  => dL/dx = (2a + 1) * 2. The node for `a` must wait for both consumers.
  Tensor x = tensor({1.5}, {1}, kFloat64).requires_grad_();
  Tensor a = x * 2.0;
  (a * a + a).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {(2 * 3.0 + 1) * 2}, 0));
}

TEST(Engine, GradientsAccumulateUntilZeroGrad) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  (x * 3.0).sum().backward();
  (x * 3.0).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {6, 6}, 0));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  (x * 3.0).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {3, 3}, 0));
}

TEST(Engine, ExplicitUpstreamGradient) {
  Tensor x = tensor({1, 2, 3}, {3}, kFloat64).requires_grad_();
  Tensor y = x * x;  // not a scalar
  y.backward(tensor({1, 0, -1}, {3}, kFloat64));
  EXPECT_TRUE(all_close(x.grad(), {2, 0, -6}, 0));
}

TEST(Engine, BackwardOnALeaf) {
  Tensor x = tensor({4.0}, {1}, kFloat64).requires_grad_();
  x.backward();
  EXPECT_TRUE(all_close(x.grad(), {1.0}, 0));
}

TEST(Engine, GraphIsReleasedUnlessRetained) {
  Tensor x = tensor({2.0}, {1}, kFloat64).requires_grad_();
  Tensor loss = (x * x).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();  // allowed: the first call kept the graph
  EXPECT_TRUE(all_close(x.grad(), {8.0}, 0));
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] { loss.backward(); }, "backward: the graph through 'sum' was already freed by an earlier backward()"));
  EXPECT_TRUE(all_close(x.grad(), {8.0}, 0));  // the failed call changed nothing
}

TEST(Engine, GradientFromOneConsumerIsNotCopied) {
  // The first gradient to reach a leaf becomes its .grad() buffer when nothing else holds it;
  // one that is shared (here: the user's own upstream gradient) is copied, never aliased.
  Tensor x = ones({3}, kFloat64).requires_grad_();
  Tensor upstream = ones({3}, kFloat64);
  (x * 1.0).backward(upstream);
  EXPECT_NE(x.grad().raw_data(), upstream.raw_data());
  x.grad().mutable_data_ptr<double>()[0] = 5;
  EXPECT_EQ(upstream.at<double>({0}), 1.0);
}

TEST(Engine, AGradientSharedBetweenNodesIsNeverAddedIntoInPlace) {
  // y = (p c + q e) + (p + q) with p = 2x, q = 3x. An add hands one gradient tensor to both of
  // its inputs, so several nodes' waiting gradients can be the very same tensor. Whichever of
  // p's and q's nodes gets its second gradient first must not add it into that shared tensor in
  // place: the other, still waiting, would see the sum. By hand: dx = g (2 c + 3 e + 5).
  Tensor c = tensor({5, 7}, {2}, kFloat64), e = tensor({11, 13}, {2}, kFloat64);
  for (bool products_first : {true, false}) {
    Tensor x = tensor({1, 2}, {2}, kFloat64).requires_grad_();
    Tensor p = x * 2.0, q = x * 3.0;
    Tensor products = p * c + q * e, sum = p + q;
    Tensor y = products_first ? products + sum : sum + products;
    Tensor upstream = tensor({1, -1}, {2}, kFloat64);
    y.backward(upstream);
    EXPECT_TRUE(all_close(x.grad(), {48, -58}, 0)) << "products first: " << products_first;
    EXPECT_TRUE(all_close(upstream, {1, -1}, 0)) << "the caller's gradient was written to";
  }
}

TEST(Engine, MisuseErrors) {
  Tensor x = ones({2, 3}, kFloat64).requires_grad_();
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { (x * 2.0).backward(); },
      "backward: output has shape [2, 3] (6 elements); backward() without a gradient needs a one-element tensor"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        (x * 2.0).backward(ones({3, 2}, kFloat64));
      },
      "backward: gradient is float64 with shape [3, 2], but the output is float64 with shape [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { ones({1}).backward(); },
                                                 "backward: tensor with shape [1] does not require grad"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { (x * 2.0).requires_grad_(); },
      "requires_grad_: tensor with shape [2, 3] was computed by 'mul' and is not a leaf"));
}

TEST(Engine, NoGradGuardRecordsNothing) {
  Tensor x = ones({2}, kFloat64).requires_grad_();
  {
    NoGradGuard guard;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    { NoGradGuard nested; }
    EXPECT_FALSE(is_grad_enabled());  // the inner guard restores "off", not "on"
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Engine, DetachStopsGradient) {
  Tensor x = tensor({3.0}, {1}, kFloat64).requires_grad_();
  // L = x * detach(x): only the first factor carries gradient, so dL/dx = detach(x) = 3.
  (x * x.detach()).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {3.0}, 0));
}

TEST(Engine, DeepGraphDoesNotOverflowTheStack) {
  // 300,000 chained ops: a recursive traversal, or a recursive chain of node destructors when
  // the graph is dropped, would overflow the call stack.
  std::int64_t nodes_before = memory_stats().live_nodes;
  Tensor x = tensor({1.0}, {1}, kFloat64).requires_grad_();
  {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = y * 1.0;
    y.sum().backward(Tensor(), /*retain_graph=*/true);
    EXPECT_TRUE(all_close(x.grad(), {1.0}, 0));
  }  // dropping y frees the whole chain here
  EXPECT_EQ(memory_stats().live_nodes, nodes_before);
  // And a graph that was never run backward through.
  {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = y.exp().log();
  }
  EXPECT_EQ(memory_stats().live_nodes, nodes_before);
}

TEST(Engine, DroppingTheLossFreesTheGraph) {
  MemoryStats before = memory_stats();
  {
    Tensor w = ones({3, 3}, kFloat64).requires_grad_();
    Tensor loss = (w.matmul(w).tanh() * w).sum();
    EXPECT_GT(memory_stats().live_nodes, before.live_nodes);
  }
  // No reference cycles: every node and buffer is gone with the last handle.
  MemoryStats after = memory_stats();
  EXPECT_EQ(after.live_nodes, before.live_nodes);
  EXPECT_EQ(after.live_tensors, before.live_tensors);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
}

TEST(Engine, TenThousandStepsHoldMemoryFlat) {
  // A training-style loop: forward, backward, update under NoGradGuard, zero_grad.
  Generator gen(3);
  Tensor w = (randn({8, 8}, gen, kFloat32) * 0.1).detach().requires_grad_();
  Tensor x = randn({4, 8}, gen, kFloat32);
  auto step = [&] {
    Tensor loss = (x.matmul(w).tanh() - 0.5).pow(2.0).mean();
    loss.backward();
    NoGradGuard no_grad;
    float* pw = w.mutable_data_ptr<float>();
    const float* g = w.grad().data_ptr<float>();
    for (std::int64_t i = 0; i < w.numel(); ++i) pw[i] -= 0.01f * g[i];
    w.zero_grad();
  };
  step();
  MemoryStats start = memory_stats();
  for (int i = 0; i < 10000; ++i) step();
  MemoryStats end = memory_stats();
  EXPECT_EQ(end.live_bytes, start.live_bytes);
  EXPECT_EQ(end.live_tensors, start.live_tensors);
  EXPECT_EQ(end.live_nodes, start.live_nodes);
  EXPECT_EQ(end.live_storages, start.live_storages);
}

// A freed buffer goes to the block cache (runtime/allocator.h), counted in cached_bytes at its
// size rounded up to 64 bytes; the next buffer of that size takes it back out.
TEST(Memory, FreedBuffersAreCountedInTheCacheAndReused) {
  empty_cache();
  EXPECT_EQ(memory_stats().cached_bytes, 0);
  const void* first = nullptr;
  {
    Tensor t = zeros({1000});  // 4,000 bytes: 63 blocks of 64, 4,032
    first = t.data_ptr<float>();
  }
  EXPECT_EQ(memory_stats().cached_bytes, 4032);
  {
    Tensor again = zeros({1000});
    EXPECT_EQ(again.data_ptr<float>(), first);
    EXPECT_EQ(memory_stats().cached_bytes, 0);
  }
  empty_cache();
  EXPECT_EQ(memory_stats().cached_bytes, 0);
}

TEST(Engine, SavedTensorsAreReleasedAfterBackward) {
  Tensor x = ones({100, 100}, kFloat64).requires_grad_();
  Tensor loss = x.exp().sum();  // exp saves its input and its output
  std::int64_t with_graph = memory_stats().live_bytes;
  loss.backward();
  // After backward: exp's saved output (80,000 bytes) is gone, x.grad (80,000 bytes) has arrived.
  EXPECT_EQ(memory_stats().live_bytes, with_graph);
  EXPECT_TRUE(loss.grad_fn()->released());
}

// A user-defined op: record() attaches any hand-written backward.
Tensor cube(const Tensor& x) {
  Tensor y = x.detach() * x.detach() * x.detach();
  // y = x^3:  dx = 3 x^2 dy
  return record("cube", y, {x}, [x = x.detach()](const Tensor& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{dy * x * x * 3.0};
  });
}

TEST(Engine, UserDefinedOp) {
  Generator gen(4);
  Tensor x = test::normal_leaf({2, 3}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return cube(in[0]); }, {x}));
  EXPECT_EQ(cube(x).grad_fn()->name(), "cube");
}

TEST(Engine, WrongGradientShapeFromAnOpIsCaught) {
  Tensor x = ones({2, 3}, kFloat64).requires_grad_();
  Tensor y = record("broken", x.detach() * 1.0, {x}, [](const Tensor&, const std::vector<bool>&) {
    return std::vector<Tensor>{ones({3, 2}, kFloat64)};
  });
  EXPECT_TRUE(throws_with<std::logic_error>([&] { y.sum().backward(); },
                                            "backward of 'broken' returned a float64 gradient of shape [3, 2] for "
                                            "input 0, which is float64 with shape [2, 3]"));
}

TEST(Engine, RetainGradKeepsANonLeafsGradient) {
  // y = x * w, L = sum(y^2):  dL/dy = 2y,  dL/dx = 2y * w.
  Tensor x = tensor({1, 2, 3}, {3}, kFloat64).requires_grad_();
  Tensor w = tensor({0.5, -1, 2}, {3}, kFloat64);
  Tensor y = x * w;  // [0.5, -2, 6]
  EXPECT_FALSE(y.retains_grad());
  y.retain_grad();
  EXPECT_TRUE(y.retains_grad());
  EXPECT_FALSE(y.grad().defined());  // nothing yet, as for a leaf before backward
  Tensor loss = (y * y).sum();
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_TRUE(all_close(y.grad(), {1, -4, 12}, 0));
  EXPECT_TRUE(all_close(x.grad(), {0.5, 4, 24}, 0));
  loss.backward();  // a second pass adds into it, as for a leaf
  EXPECT_TRUE(all_close(y.grad(), {2, -8, 24}, 0));
  y.zero_grad();
  EXPECT_FALSE(y.grad().defined());
}

TEST(Engine, RetainGradOfTheRootAndOfAMiddleTensorMatchesFiniteDifferences) {
  // loss = sum(tanh(h)), h = x^2 + 1: dloss/dh = 1 - tanh(h)^2, checked against a central
  // difference in h itself.
  Tensor x = tensor({0.3, -0.7, 1.1, 0.2, -0.4}, {5}, kFloat64).requires_grad_();
  Tensor h = x * x + 1.0;
  h.retain_grad();
  Tensor loss = h.tanh().sum();
  loss.retain_grad();
  loss.backward();
  EXPECT_TRUE(all_close(loss.grad(), {1}, 0));
  std::vector<double> hv = h.detach().to_vector<double>(), numeric;
  const double eps = 1e-6;
  for (double v : hv) numeric.push_back((std::tanh(v + eps) - std::tanh(v - eps)) / (2 * eps));
  EXPECT_TRUE(all_close(h.grad(), numeric, 1e-9));
}

TEST(Engine, RetainGradOnALeafIsANoOpAndWithoutGradIsRefused) {
  Tensor x = tensor({1, 2}, {2}, kFloat64).requires_grad_();
  x.retain_grad();
  EXPECT_FALSE(x.retains_grad());  // a leaf keeps its gradient anyway
  (x * x).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {2, 4}, 0));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { ones({2}).retain_grad(); },
      "retain_grad: the float32 tensor of shape [2] does not require grad, so it will get no gradient to keep"));
}

TEST(Engine, GradientOfAnotherDtypeSuggestsTo) {
  Tensor x = ones({2}, kFloat64).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { y.backward(ones({2})); },
      "backward: gradient is float32 with shape [2], but the output is float64 with shape [2] (convert the gradient "
      "with .to(ag::kFloat64))"));
}

// The post-accumulate hook runs once per pass, after the leaf's last gradient, even when the
// leaf is used by several ops that the pass reaches at different times.
TEST(Engine, PostAccumulateHookRunsOnceWhenTheLeafsGradientIsComplete) {
  Tensor w = tensor({1.5, -2.0}, {2}, kFloat64).requires_grad_();
  Tensor x = tensor({0.5, 3.0}, {2}, kFloat64).requires_grad_();
  std::vector<std::vector<double>> seen;
  std::vector<std::string> order;
  w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    seen.push_back(t.grad().to_vector<double>());
    order.push_back("w");
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("x"); });
  // L = sum(w * x) + sum((w * w).exp()): three uses of w, one of x, on paths of different depth.
  ((w * x).sum() + (w * w).exp().sum()).backward();
  ASSERT_EQ(seen.size(), 1u);
  // dL/dw = x + 2 w exp(w^2), by hand: the hook saw the whole of it.
  EXPECT_DOUBLE_EQ(seen[0][0], 0.5 + 2 * 1.5 * std::exp(1.5 * 1.5));
  EXPECT_DOUBLE_EQ(seen[0][1], 3.0 + 2 * -2.0 * std::exp(4.0));
  EXPECT_EQ(std::count(order.begin(), order.end(), "w"), 1);
  EXPECT_EQ(std::count(order.begin(), order.end(), "x"), 1);
  // A second pass calls it again, after adding into the kept gradient.
  (w * x).sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(seen[1][0], seen[0][0] + 0.5);
}

// The hook of a leaf that is finished early runs while the rest of backward is still to come.
TEST(Engine, PostAccumulateHookRunsBeforeTheRestOfBackward) {
  Tensor a = scalar(2.0, kFloat64).requires_grad_();
  Tensor b = scalar(3.0, kFloat64).requires_grad_();
  std::vector<std::string> order;
  a.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("a"); });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("b"); });
  // L = h(a) * b with h ten ops deep: b's gradient is complete after the first node, a's after the last.
  Tensor h = a;
  for (int i = 0; i < 10; ++i) h = (h * 0.5).tanh();
  (h * b).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"b", "a"}));
}

TEST(Engine, PostAccumulateHookCanBeRemovedAndIsOnlyForLeaves) {
  Tensor w = tensor({1.0}, {1}, kFloat64).requires_grad_();
  int calls = 0;
  std::uint64_t handle = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  (w * 2).sum().backward();
  w.remove_post_accumulate_grad_hook(handle);
  (w * 2).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { (w * 2).register_post_accumulate_grad_hook([](const Tensor&) {}); }, "the output of an op"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { tensor({1.0}, {1}).register_post_accumulate_grad_hook([](const Tensor&) {}); }, "does not require grad"));
}

}  // namespace
}  // namespace ag
