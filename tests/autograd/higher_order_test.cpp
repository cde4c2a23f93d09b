// Checks higher-order gradients: ag::grad and backward with create_graph (autograd/grad.h,
// grad.cpp, composition.cpp, engine.cpp), gradgradcheck on every differentiable op and on the
// modules, and the products of autograd/functional.h against closed forms. docs/higher_order.md
// explains the design.
#include <cmath>
#include <numbers>
#include <set>
#include <string>

#include "../../ops/call_counts.h"
#include "../test_util.h"
#include "fused_op_cases.h"

namespace ag {
namespace {

using test::all_close;
using test::normal_leaf;
using test::throws_with;
using test::uniform_leaf;

// Every element of `t` (float64) as a vector, for closed forms computed by hand below.
std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(kFloat64);
  return d.to_vector<double>();
}

// --- ag::grad and backward(create_graph) -------------------------------------------------------

TEST(Grad, ReturnsTheGradientWithoutTouchingDotGrad) {
  Tensor x = tensor({1.0, -2.0, 0.5}, {3}, kFloat64).requires_grad_();
  Tensor y = (x * x * x).sum();
  std::vector<Tensor> g = grad({y}, {x});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_TRUE(all_close(g[0], {3.0, 12.0, 0.75}, 1e-15));  // 3 x^2
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(g[0].requires_grad());  // no create_graph: a plain tensor
}

TEST(Grad, CreateGraphGivesSecondAndThirdDerivatives) {
  Tensor x = tensor({1.0, -2.0, 0.5}, {3}, kFloat64).requires_grad_();
  Tensor y = (x * x * x).sum();
  Tensor g = grad({y}, {x}, {}, {.create_graph = true})[0];  // 3 x^2
  ASSERT_TRUE(g.requires_grad());
  Tensor h = grad({g.sum()}, {x}, {}, {.create_graph = true})[0];  // 6 x
  EXPECT_TRUE(all_close(h, {6.0, -12.0, 3.0}, 1e-15));
  Tensor third = grad({h.sum()}, {x})[0];  // 6
  EXPECT_TRUE(all_close(third, {6.0, 6.0, 6.0}, 1e-15));
}

TEST(Grad, BackwardWithCreateGraphLeavesADifferentiableGrad) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  Tensor y = (x.pow(4.0)).sum();
  y.backward({}, std::nullopt, /*create_graph=*/true);
  Tensor g = x.grad();  // 4 x^3, with a graph
  EXPECT_TRUE(all_close(g, {4.0, 32.0}, 1e-14));
  ASSERT_TRUE(g.requires_grad());
  x.zero_grad();
  g.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), {12.0, 48.0}, 1e-13));  // 12 x^2
}

TEST(Grad, TotalDerivativeThroughAnotherInputAndNonLeafInputs) {
  Tensor x = tensor({1.0, 2.0, 3.0}, {3}, kFloat64).requires_grad_();
  Tensor z = x * 2.0;                          // a non-leaf input
  Tensor y = (z * z).sum() + (x * 3.0).sum();  // dy/dz = 2z; dy/dx = 2z * 2 + 3 = 8x + 3
  std::vector<Tensor> g = grad({y}, {x, z});
  EXPECT_TRUE(all_close(g[0], {11.0, 19.0, 27.0}, 1e-14));
  EXPECT_TRUE(all_close(g[1], {4.0, 8.0, 12.0}, 1e-14));
}

TEST(Grad, SeveralOutputsWithTheirGradOutputs) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  Tensor a = x * x, b = x * 5.0;
  Tensor ga = tensor({1.0, -1.0}, {2}, kFloat64), gb = tensor({0.5, 2.0}, {2}, kFloat64);
  Tensor g = grad({a, b}, {x}, {ga, gb})[0];  // 2x ga + 5 gb
  EXPECT_TRUE(all_close(g, {2.0 + 2.5, -4.0 + 10.0}, 1e-15));
}

TEST(Grad, DifferentiatesThroughGradOutputs) {
  // <J^T u, v> with respect to u is J v: the gradient must carry u's history.
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  Tensor u = tensor({0.0, 0.0}, {2}, kFloat64).requires_grad_();
  Tensor y = x * x;  // J = diag(2x)
  Tensor w = grad({y}, {x}, {u}, {.create_graph = true})[0];
  Tensor jv = grad({w}, {u}, {tensor({1.0, 1.0}, {2}, kFloat64)})[0];
  EXPECT_TRUE(all_close(jv, {2.0, 4.0}, 1e-15));
}

TEST(Grad, NamesAnUnusedInputUnlessAllowed) {
  Generator gen(1);
  Tensor x = normal_leaf({2, 3}, gen);
  Tensor unused = zeros({4}, kFloat64).requires_grad_();
  Tensor y = (x * x).sum();
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        grad({y}, {x, unused}, {}, {.retain_graph = true});
      },
      "input 1 (float64 [4]) was not used"));
  std::vector<Tensor> g = grad({y}, {x, unused}, {}, {.allow_unused = true});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
}

TEST(Grad, RefusesBadArguments) {
  Tensor x = tensor({1.0}, {1}, kFloat64).requires_grad_();
  Tensor c = tensor({1.0}, {1}, kFloat64);
  Tensor y = (x * x).sum();
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { grad({y}, {c}); }, "input 0 (float64 [1]) does not require grad"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { grad({y}, {}); }, "no inputs"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        grad({y, y}, {x}, {Tensor()});
      },
      "1 grad_outputs for 2 outputs"));
  Tensor v = x * 2.0;  // two elements would need a grad_output; one is fine
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { grad({c * 2.0}, {x}); }, "does not require grad"));
  EXPECT_TRUE(all_close(grad({v}, {x})[0], {2.0}, 0.0));
}

TEST(Grad, RetainGraphFollowsCreateGraph) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  Tensor y = (x.exp()).sum();
  grad({y}, {x});  // frees the graph
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { grad({y}, {x}); }, "already freed"));
  Tensor y2 = (x.exp()).sum();
  grad({y2}, {x}, {}, {.create_graph = true});  // keeps it
  EXPECT_TRUE(all_close(grad({y2}, {x})[0], {std::exp(1.0), std::exp(2.0)}, 1e-14));
}

// An op whose backward is a hand loop and says so (the default of record()).
Tensor square_first_order(const Tensor& x) {
  Tensor y = x.detach() * x.detach();
  return record("square_first_order", y, {x}, [x = x.detach()](const Tensor& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{dy * x * 2.0};
  });
}

TEST(Grad, AnOpWithoutASecondDerivativeSaysSoInsteadOfReturningZero) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  Tensor y = square_first_order(x).sum();
  EXPECT_TRUE(all_close(grad({y}, {x}, {}, {.retain_graph = true})[0], {2.0, 4.0}, 0.0));  // first order works
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { grad({y}, {x}, {}, {.create_graph = true}); },
                                              "'square_first_order' has no second derivative"));
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] {
        hvp_reverse_over_reverse([](const Tensor& t) { return square_first_order(t).sum(); }, x.detach(),
                                 ones({2}, kFloat64));
      },
      "'square_first_order' has no second derivative"));
  // hvp, forward over reverse, needs the op's forward rule first, and says so.
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] { hvp([](const Tensor& t) { return square_first_order(t).sum(); }, x.detach(), ones({2}, kFloat64)); },
      "square_first_order: has no forward-mode rule"));
}

// An op that claims a second derivative but drops it: its graph-mode gradient reads x
// detached, so d(dx)/dx comes out 0 instead of 2 dy. gradgradcheck must catch exactly this.
Tensor square_with_lost_second_derivative(const Tensor& x) {
  Tensor y = x.detach() * x.detach();
  return record(
      "square_lost", y, {x},
      [x = x.detach()](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy * x * 2.0}; },
      std::nullopt, BackwardOrder::AnyOrder);
}

TEST(Gradgradcheck, CatchesASecondDerivativeThatIsSilentlyZero) {
  Tensor x = tensor({0.5, -1.0, 2.0}, {3}, kFloat64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) { return square_with_lost_second_derivative(in[0]); };
  EXPECT_TRUE(testing::gradcheck(f, {x}));  // the first derivative is right
  GradcheckResult r = gradgradcheck(f, {x});
  EXPECT_FALSE(r);
  EXPECT_NE(r.report.find("input 0"), std::string::npos) << r.report;
  // The same op written properly passes.
  EXPECT_TRUE(testing::gradgradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0]; }, {x}));
}

TEST(Gradgradcheck, RefusesWhatItCannotCheck) {
  Tensor constant = tensor({1.0, 2.0}, {2}, kFloat64);
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { gradgradcheck([](const std::vector<Tensor>& in) { return in[0] * 2.0; }, {constant}); },
      "none of the 1 inputs requires grad"));
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_();
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { gradgradcheck([](const std::vector<Tensor>& in) { return in[0].argmax(0); }, {x}); },
      "the function must return a float tensor"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gradgradcheck_in_place([] { return Tensor(); }, {}); },
                                                 "no tensors to check"));
  // An op without a second derivative is named, not checked as if its second derivative were 0.
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] { gradgradcheck([](const std::vector<Tensor>& in) { return square_first_order(in[0]); }, {x}); },
      "'square_first_order' has no second derivative"));
}

TEST(Grad, CreateGraphStepsWithZeroGradKeepNodesAndMemoryFlat) {
  // backward(create_graph) leaves w.grad() holding a graph that refers back to w: a cycle that
  // shared ownership alone would never free. zero_grad drops the gradient and with it the cycle.
  Generator gen(3);
  nn::Linear layer(4, 3, true, gen);
  layer.to(kFloat64);
  Tensor x = randn({5, 4}, gen, kFloat64);
  nn::Linear* l = &layer;
  auto step = [&] {
    layer.zero_grad();
    Tensor loss = l->forward(x).tanh().pow(2.0).mean();
    loss.backward({}, std::nullopt, /*create_graph=*/true);
    Tensor penalty = layer.weight.grad().pow(2.0).sum();  // a gradient penalty through the grad's graph
    (void)penalty;
  };
  for (int i = 0; i < 10; ++i) step();
  MemoryStats before = memory_stats();
  for (int i = 0; i < 1000; ++i) step();
  MemoryStats after = memory_stats();
  EXPECT_EQ(after.live_nodes, before.live_nodes);
  EXPECT_EQ(after.live_tensors, before.live_tensors);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  layer.zero_grad();
  EXPECT_LT(memory_stats().live_nodes, before.live_nodes);  // the last step's graph went with its gradient
}

TEST(Grad, IntegerPowersHaveFiniteDerivativesOfEveryOrderAtZero) {
  // d/dx x^p = p x^(p-1) would reach 0 * 0^-1 = NaN once p hits 0; the slope of x^0 is 0.
  Tensor x = tensor({0.0, 2.0}, {2}, kFloat64).requires_grad_();
  Tensor d = x.pow(2.0).sum();
  std::vector<std::vector<double>> expected = {{0.0, 4.0}, {2.0, 2.0}, {0.0, 0.0}};  // 2x, 2, 0
  for (const auto& want : expected) {
    Tensor g = grad({d}, {x}, {}, {.create_graph = true, .allow_unused = true})[0];
    EXPECT_TRUE(all_close(g, want, 0.0));
    d = g.sum();
  }
  Tensor leaf = tensor({0.0}, {1}, kFloat64).requires_grad_();
  EXPECT_TRUE(all_close(grad({leaf.pow(0.0).sum()}, {leaf})[0], {0.0}, 0.0));  // x^0 = 1: slope 0, not NaN
}

// --- gradgradcheck on every op ----------------------------------------------------------------

TEST(Gradgradcheck, ElementwiseOps) {
  Generator gen(11);
  Tensor x = uniform_leaf({2, 3}, gen, -1.5, 1.5);
  Tensor pos = uniform_leaf({3, 2}, gen, 0.5, 2.0);
  Tensor away = tensor({-1.2, -0.4, 0.3, 0.9, 1.7, -2.0}, {2, 3}, kFloat64).requires_grad_();  // relu: no kink
  using F = std::function<Tensor(const Tensor&)>;
  std::vector<std::pair<std::string, F>> on_x = {
      {"neg", [](const Tensor& t) { return -t; }},
      {"exp", [](const Tensor& t) { return t.exp(); }},
      {"tanh", [](const Tensor& t) { return t.tanh(); }},
      {"sigmoid", [](const Tensor& t) { return t.sigmoid(); }},
      {"erfc", [](const Tensor& t) { return erfc(t); }},
      {"gelu", [](const Tensor& t) { return t.gelu(); }},
      {"gelu_tanh", [](const Tensor& t) { return t.gelu(GeluApproximation::Tanh); }},
      {"clone", [](const Tensor& t) { return t.clone() * t; }},
  };
  for (auto& [name, f] : on_x)
    EXPECT_TRUE(testing::gradgradcheck([f = f](const std::vector<Tensor>& in) { return f(in[0]); }, {x})) << name;
  std::vector<std::pair<std::string, F>> on_pos = {
      {"log", [](const Tensor& t) { return t.log(); }},
      {"sqrt", [](const Tensor& t) { return t.sqrt(); }},
      {"pow", [](const Tensor& t) { return t.pow(2.5); }},
  };
  for (auto& [name, f] : on_pos)
    EXPECT_TRUE(testing::gradgradcheck([f = f](const std::vector<Tensor>& in) { return f(in[0]); }, {pos})) << name;
  EXPECT_TRUE(testing::gradgradcheck([](const std::vector<Tensor>& in) { return in[0].relu() * in[0]; }, {away}));
}

TEST(Gradgradcheck, BinaryOpsWithBroadcasting) {
  Generator gen(12);
  Tensor a = uniform_leaf({2, 3, 4}, gen, 0.5, 1.5);
  Tensor b = uniform_leaf({3, 1}, gen, 0.5, 1.5);
  auto check = [&](const char* name, Tensor (*op)(const Tensor&, const Tensor&)) {
    EXPECT_TRUE(
        testing::gradgradcheck([op](const std::vector<Tensor>& in) { return op(in[0], in[1]) * in[0]; }, {a, b}))
        << name;
  };
  check("add", add);
  check("sub", sub);
  check("mul", mul);
  check("div", div);
  EXPECT_TRUE(testing::gradgradcheck(
      [](const std::vector<Tensor>& in) { return (2.0 / in[0] + in[0] * 3.0 - 1.0) * in[0]; }, {b}));
}

TEST(Gradgradcheck, Reductions) {
  Generator gen(13);
  Tensor x = uniform_leaf({3, 4, 2}, gen);
  auto sq = [](const Tensor& t) { return t * t; };  // squared first, so each reduction's input has curvature
  std::vector<std::function<Tensor(const Tensor&)>> fs = {
      [&](const Tensor& t) { return sum(sq(t)); },           [&](const Tensor& t) { return sum(sq(t), 1, false); },
      [&](const Tensor& t) { return sum(sq(t), -1, true); }, [&](const Tensor& t) { return mean(sq(t)); },
      [&](const Tensor& t) { return mean(sq(t), 0, true); }, [&](const Tensor& t) { return amax(sq(t), 1, false); },
      [&](const Tensor& t) { return amax(sq(t), -1, true); }, [&](const Tensor& t) { return max(sq(t)); },
  };
  for (std::size_t i = 0; i < fs.size(); ++i)
    EXPECT_TRUE(testing::gradgradcheck([f = fs[i]](const std::vector<Tensor>& in) { return f(in[0]); }, {x}))
        << "reduction " << i;
}

TEST(Gradgradcheck, ShapeOps) {
  Generator gen(14);
  Tensor x = uniform_leaf({2, 3, 5}, gen);
  Tensor y = uniform_leaf({2, 1, 5}, gen);
  using F = std::function<Tensor(const std::vector<Tensor>&)>;
  std::vector<std::pair<std::string, F>> fs = {
      {"reshape",
       [](const std::vector<Tensor>& in) {
         return in[0].reshape({5, 6}) * in[0].reshape({5, 6});
       }},
      {"transpose", [](const std::vector<Tensor>& in) { return in[0].transpose(0, 2) * in[0].transpose(0, 2); }},
      {"permute",
       [](const std::vector<Tensor>& in) {
         return in[0].permute({1, 2, 0}).tanh();
       }},
      {"slice", [](const std::vector<Tensor>& in) { return slice(in[0], 2, 1, 5, 2).pow(3.0); }},
      {"cat",
       [](const std::vector<Tensor>& in) {
         return cat({in[0], in[1]}, 1).pow(2.0);
       }},
      {"split", [](const std::vector<Tensor>& in) { return split(in[0], 2, 1)[1].exp(); }},
      {"squeeze", [](const std::vector<Tensor>& in) { return in[1].squeeze(1).unsqueeze(0).pow(2.0); }},
      {"broadcast_to",
       [](const std::vector<Tensor>& in) {
         return in[1].broadcast_to({2, 3, 5}) * in[0];
       }},
      {"sum_to",
       [](const std::vector<Tensor>& in) {
         return sum_to(in[0] * in[0], {2, 1, 5});
       }},
  };
  for (auto& [name, f] : fs) EXPECT_TRUE(testing::gradgradcheck(f, {x, y})) << name;
}

TEST(Gradgradcheck, MatmulPlainBatchedAndBroadcast) {
  Generator gen(15);
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 2}}, {{2, 3, 4}, {4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}}};
  for (auto& [sa, sb] : shapes) {
    Tensor a = uniform_leaf(sa, gen), b = uniform_leaf(sb, gen);
    EXPECT_TRUE(
        testing::gradgradcheck([](const std::vector<Tensor>& in) { return in[0].matmul(in[1]).tanh(); }, {a, b}))
        << shape_str(sa) << " @ " << shape_str(sb);
  }
}

TEST(Gradgradcheck, SoftmaxLogSoftmaxAndMaskedFill) {
  Generator gen(16);
  Tensor x = uniform_leaf({2, 3, 4}, gen, -2.0, 2.0);
  Tensor mask = tensor({0, 1, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1}, {3, 4}, kFloat64).to(kBool);  // row 2 fully masked
  for (std::int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(testing::gradgradcheck([dim](const std::vector<Tensor>& in) { return in[0].softmax(dim); }, {x}))
        << "softmax dim " << dim;
    EXPECT_TRUE(testing::gradgradcheck([dim](const std::vector<Tensor>& in) { return in[0].log_softmax(dim); }, {x}))
        << "log_softmax dim " << dim;
  }
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(testing::gradgradcheck(
      [&](const std::vector<Tensor>& in) { return masked_fill(in[0] * in[0], mask, -inf).softmax(-1); }, {x}));
  EXPECT_TRUE(testing::gradgradcheck(
      [&](const std::vector<Tensor>& in) {
        Tensor l = masked_fill(in[0] * in[0], mask, -inf).log_softmax(-1);
        return masked_fill(l, mask, 0.0);  // -inf entries out, so that the output is finite
      },
      {x}));
  EXPECT_TRUE(testing::gradgradcheck(
      [&](const std::vector<Tensor>& in) { return masked_fill(in[0].pow(3.0), mask, 0.25); }, {x}));
}

TEST(Gradgradcheck, LayerNormWithAndWithoutAffine) {
  Generator gen(17);
  Tensor x = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0);
  Tensor w = uniform_leaf({5}, gen, 0.5, 1.5), b = uniform_leaf({5}, gen);
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    EXPECT_TRUE(testing::gradgradcheck(
        [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); }, {x, w, b}))
        << kernels_name(k);
    EXPECT_TRUE(
        testing::gradgradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {}, {}, 1e-5); }, {x}))
        << kernels_name(k);
    EXPECT_TRUE(testing::gradgradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], {}, 1e-3); },
                                       {x, w}))
        << kernels_name(k);
  }
}

TEST(Gradgradcheck, RmsNormWithAndWithoutWeight) {
  Generator gen(27);
  Tensor x = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0), w = uniform_leaf({5}, gen, 0.5, 1.5);
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    EXPECT_TRUE(
        testing::gradgradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); }, {x, w}))
        << kernels_name(k);
    EXPECT_TRUE(testing::gradgradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], {}, 1e-3); }, {x}))
        << kernels_name(k);
  }
}

TEST(Gradgradcheck, SwigluOnOddShapes) {
  Generator gen(28);
  Tensor x = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0), g = uniform_leaf({7, 5}, gen), u = uniform_leaf({7, 5}, gen),
         d = uniform_leaf({3, 7}, gen), x1 = uniform_leaf({5}, gen);
  for (Kernels k : {Kernels::Fast, Kernels::Reference, Kernels::Naive}) {
    KernelGuard guard(k);
    auto f = [](const std::vector<Tensor>& in) { return swiglu(in[0], in[1], in[2], in[3]); };
    EXPECT_TRUE(testing::gradgradcheck(f, {x, g, u, d})) << kernels_name(k);
    EXPECT_TRUE(testing::gradgradcheck(f, {x1, g, u, d})) << kernels_name(k) << ", 1-d input";
  }
}

TEST(Gradgradcheck, LinearLinearGeluAndGelu) {
  Generator gen(18);
  Tensor x = uniform_leaf({2, 3, 4}, gen), x1 = uniform_leaf({4}, gen);
  Tensor w = uniform_leaf({5, 4}, gen), b = uniform_leaf({5}, gen);
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    EXPECT_TRUE(testing::gradgradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]).tanh(); },
                                       {x, w, b}));
    EXPECT_TRUE(
        testing::gradgradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]).pow(2.0); }, {x, w}));
    EXPECT_TRUE(testing::gradgradcheck(
        [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]) * in[0].sum(); }, {x1, w, b}));
    for (GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
      EXPECT_TRUE(testing::gradgradcheck(
          [a](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2], a); }, {x, w, b}));
      EXPECT_TRUE(testing::gradgradcheck(
          [a](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], {}, a); }, {x, w}));
      EXPECT_TRUE(testing::gradgradcheck([a](const std::vector<Tensor>& in) { return in[0].gelu(a); }, {x}));
    }
  }
}

TEST(Gradgradcheck, DropoutEmbeddingAndCrossEntropy) {
  Generator gen(19);
  Tensor x = uniform_leaf({3, 4}, gen);
  EXPECT_TRUE(testing::gradgradcheck(
      [](const std::vector<Tensor>& in) {
        Generator mask_gen(7);  // the same mask at every call
        return dropout(in[0] * in[0], 0.4, true, mask_gen);
      },
      {x}));
  Tensor table = uniform_leaf({5, 3}, gen);
  Tensor ids = from_vector<std::int64_t>({4, 0, 4, 2, 1, 4}, {2, 3});  // a repeated id adds up
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    EXPECT_TRUE(
        testing::gradgradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids).pow(2.0); }, {table}));
    Tensor logits = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0);
    Tensor targets = from_vector<std::int64_t>({1, -100, 4, 0, 2, -100}, {2, 3});
    EXPECT_TRUE(
        testing::gradgradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); }, {logits}));
    Tensor all_ignored = from_vector<std::int64_t>({7, 7, 7, 7, 7, 7}, {2, 3});
    EXPECT_TRUE(testing::gradgradcheck(
        [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], all_ignored, 7) + in[0].pow(2.0).sum(); },
        {logits}));
  }
}

TEST(Gradgradcheck, AttentionInEveryLayoutAndMaskCase) {
  Generator gen(20);
  std::int64_t b = 2, h = 2, tq = 3, tk = 4, d = 3, dv = 2;
  Tensor q = uniform_leaf({b, h, tq, d}, gen), k = uniform_leaf({b, h, tk, d}, gen),
         v = uniform_leaf({b, h, tk, dv}, gen);
  Tensor padding = key_padding_mask({4, 2}, tk);  // sequence 1 has 2 real keys
  struct Case {
    Tensor mask;
    bool causal;
  };
  std::vector<Case> cases = {{Tensor(), false}, {padding, false}, {Tensor(), true}, {padding, true}};
  for (Kernels kind : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(kind);
    for (const Case& c : cases) {
      EXPECT_TRUE(testing::gradgradcheck(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.causal).output;
          },
          {q, k, v}))
          << kernels_name(kind) << " bhtd, causal " << c.causal << ", mask " << c.mask.defined();
      EXPECT_TRUE(testing::gradgradcheck(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention_bthd(in[0].transpose(1, 2), in[1].transpose(1, 2),
                                                     in[2].transpose(1, 2), c.mask, c.causal)
                .output;
          },
          {q, k, v}))
          << kernels_name(kind) << " bthd, causal " << c.causal << ", mask " << c.mask.defined();
    }
    Tensor qkv = uniform_leaf({2, 3, 3 * h * d}, gen);
    Tensor self_padding = key_padding_mask({3, 2}, 3);
    for (bool causal : {false, true})
      EXPECT_TRUE(testing::gradgradcheck(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention_packed(in[0], h, self_padding, causal).output;
          },
          {qkv}))
          << kernels_name(kind) << " packed, causal " << causal;
  }
}

TEST(Gradgradcheck, FusedOpsGivenTheSameTensorTwice) {
  // Each position's partial derivative is its own: the composition must not merge them.
  Generator gen(29);
  Tensor x = uniform_leaf({2, 2, 3, 3}, gen);
  Tensor m = uniform_leaf({3, 3}, gen);
  for (Kernels kind : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(kind);
    EXPECT_TRUE(testing::gradgradcheck(
        [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[0], in[0]).output; }, {x}))
        << kernels_name(kind);
    EXPECT_TRUE(
        testing::gradgradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[0], {}).tanh(); }, {m}))
        << kernels_name(kind);
    EXPECT_TRUE(testing::gradgradcheck(
        [](const std::vector<Tensor>& in) { return swiglu(in[0], in[0], in[0], in[0]); }, {m}))
        << kernels_name(kind) << ", swiglu";
  }
}

// --- the fused double backward (ops/route.cpp, GradientsInGraph) ---------------------------------

// The second derivatives of L = sum(f(inputs) * g) by reverse over reverse: the gradient of
// <dL/dx, v> with respect to every input and to g (which reaches the first gradients as the
// op's dy: its gradient is J v), under the kernels in force.
std::vector<Tensor> reverse_over_reverse(const TensorFunction& f, const std::vector<Tensor>& inputs,
                                         std::uint64_t seed) {
  Generator gen(seed);
  auto [leaves, v] = test::leaves_and_directions(inputs, gen);
  Tensor out = f(leaves);
  Tensor g = randn(out.shape(), gen, kFloat64).requires_grad_();
  std::vector<Tensor> first = grad({(out * g).sum()}, leaves, {}, {.create_graph = true});
  Tensor inner = zeros({}, kFloat64);
  for (std::size_t i = 0; i < first.size(); ++i) inner = inner + (first[i] * v[i]).sum();
  std::vector<Tensor> wrt = leaves;
  wrt.push_back(g);
  std::vector<Tensor> second = grad({inner}, wrt, {}, {.allow_unused = true});
  for (std::size_t i = 0; i < second.size(); ++i)
    if (!second[i].defined()) second[i] = zeros_like(wrt[i]);
  return second;
}

// Each fused op's double backward (its forward rule and its gradients' tangents) against the
// chain rule through its reference composition, in float64.
::testing::AssertionResult double_backward_equals_composition(const TensorFunction& f,
                                                              const std::vector<Tensor>& inputs, std::uint64_t seed) {
  std::vector<Tensor> fast, composed;
  {
    KernelGuard guard(Kernels::Fast);
    fast = reverse_over_reverse(f, inputs, seed);
  }
  {
    KernelGuard guard(Kernels::Reference);
    composed = reverse_over_reverse(f, inputs, seed);
  }
  for (std::size_t i = 0; i < fast.size(); ++i)
    if (::testing::AssertionResult r = all_close(fast[i], composed[i], 1e-12); !r)
      return r << (i + 1 == fast.size() ? " (the output's weights g)" : " (input " + std::to_string(i) + ")");
  return ::testing::AssertionSuccess();
}

TEST(FusedDoubleBackward, EveryFusedOpEqualsItsComposition) {
  Generator gen(47);
  std::uint64_t seed = 1;
  for (const auto& c : test::fused_op_cases(gen))
    EXPECT_TRUE(double_backward_equals_composition(c.f, c.inputs, seed++)) << c.name;
}

TEST(FusedDoubleBackward, AttentionInEveryLayoutAndMaskCaseEqualsItsComposition) {
  Generator gen(48);
  std::int64_t b = 2, h = 3, tq = 3, tk = 5, d = 4, dv = 2;
  Tensor q = uniform_leaf({b, h, tq, d}, gen), k = uniform_leaf({b, h, tk, d}, gen),
         v = uniform_leaf({b, h, tk, dv}, gen);
  Tensor padding = key_padding_mask({5, 2}, tk);
  Tensor big_q = uniform_leaf({1, 2, 70, 3}, gen),
         big_k = uniform_leaf({1, 2, 75, 3}, gen),
         big_v = uniform_leaf({1, 2, 75, 4}, gen);  // two query blocks
  std::uint64_t seed = 200;
  for (Tensor mask : {Tensor(), padding})
    for (bool causal : {false, true}) {
      EXPECT_TRUE(double_backward_equals_composition(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention(in[0], in[1], in[2], mask, causal).output;
          },
          {q, k, v}, seed++))
          << "bhtd, causal " << causal << ", mask " << mask.defined();
      EXPECT_TRUE(double_backward_equals_composition(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention_bthd(in[0].transpose(1, 2), in[1].transpose(1, 2),
                                                     in[2].transpose(1, 2), mask, causal)
                .output;
          },
          {q, k, v}, seed++))
          << "bthd, causal " << causal << ", mask " << mask.defined();
    }
  for (bool causal : {false, true})
    EXPECT_TRUE(double_backward_equals_composition(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), causal).output.pow(2.0);
        },
        {big_q, big_k, big_v}, seed++))
        << "two query blocks, causal " << causal;
  Tensor qkv = uniform_leaf({2, 4, 3 * h * d}, gen);
  Tensor self_padding = key_padding_mask({4, 3}, 4);
  for (bool causal : {false, true})
    EXPECT_TRUE(double_backward_equals_composition(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention_packed(in[0], h, self_padding, causal).output;
        },
        {qkv}, seed++))
        << "packed, causal " << causal;
  EXPECT_TRUE(double_backward_equals_composition(
      [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[0], in[0]).output; },
      {q}, seed++))
      << "the same tensor three times";
  // Only some inputs differentiated: the first pass wants k's gradient alone.
  KernelGuard guard(Kernels::Fast);
  Tensor qd = q.detach(), kl = k.detach().clone().requires_grad_(), vd = v.detach();
  Tensor gk = grad({scaled_dot_product_attention(qd, kl, vd).output.pow(2.0).sum()}, {kl}, {}, {.create_graph = true})[0];
  Tensor hk = grad({gk.sum()}, {kl})[0];
  KernelGuard reference(Kernels::Reference);
  Tensor kr = k.detach().clone().requires_grad_();
  Tensor gr = grad({scaled_dot_product_attention(qd, kr, vd).output.pow(2.0).sum()}, {kr}, {}, {.create_graph = true})[0];
  EXPECT_TRUE(all_close(hk, grad({gr.sum()}, {kr})[0], 1e-12)) << "k alone";
}

// Every node reachable from the gradients' graph, with the shape it produced.
std::vector<std::pair<std::string, Shape>> graph_nodes(const std::vector<Tensor>& roots) {
  std::vector<std::pair<std::string, Shape>> found;
  std::vector<std::shared_ptr<Node>> stack;
  std::set<const Node*> seen;
  for (const Tensor& t : roots)
    if (t.grad_fn()) stack.push_back(t.grad_fn());
  while (!stack.empty()) {
    std::shared_ptr<Node> n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n.get()).second) continue;
    found.emplace_back(n->name(), n->output_shape());
    for (const Edge& e : n->next_edges()) stack.push_back(e.node);
  }
  return found;
}

// The point of the fused double backward: the gradient of attention keeps one node for q's, k's
// and v's gradients and no [B, H, Tq, Tk] tensor; through the composition it keeps the scores.
TEST(FusedDoubleBackward, TheGradientsGraphKeepsNoScores) {
  Generator gen(49);
  Shape scores{2, 3, 5, 7};
  Tensor q = randn({2, 3, 5, 4}, gen, kFloat64), k = randn({2, 3, 7, 4}, gen, kFloat64),
         v = randn({2, 3, 7, 2}, gen, kFloat64);
  for (Kernels kind : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(kind);
    std::vector<Tensor> in = {q.clone().requires_grad_(), k.clone().requires_grad_(), v.clone().requires_grad_()};
    Tensor loss = scaled_dot_product_attention(in[0], in[1], in[2], {}, true).output.pow(2.0).sum();
    std::vector<Tensor> g = grad({loss}, in, {}, {.create_graph = true});
    int fused = 0, square = 0;
    for (const auto& [name, shape] : graph_nodes(g)) {
      fused += name == "scaled_dot_product_attention_backward";
      square += shape == scores;
    }
    if (kind == Kernels::Fast) {
      EXPECT_EQ(fused, 1);
      EXPECT_EQ(square, 0);
    } else {
      EXPECT_EQ(fused, 0);
      EXPECT_GT(square, 0);  // the check can see scores where they are kept
    }
  }
}

// SwiGLU differentiates its own backward with its own rules (ops/fused/swiglu.cpp): a gradient
// taken with create_graph is one swiglu_backward node, and neither that node's backward, nor the
// op's tangent, nor the gradients' tangents of forward over reverse run the reference. The
// numbers are held to the composition by EveryFusedOpEqualsItsComposition and by forward_test.
TEST(FusedDoubleBackward, SwigluUsesItsOwnRulesNotItsReference) {
  Generator gen(51);
  Tensor x = randn({2, 3, 5}, gen, kFloat64), gate = randn({7, 5}, gen, kFloat64), up = randn({7, 5}, gen, kFloat64),
         down = randn({4, 7}, gen, kFloat64);
  auto loss = [&](const Tensor& t) { return swiglu(t, gate, up, down).pow(2.0).sum(); };
  Tensor v = randn(x.shape(), gen, kFloat64);
  std::vector<Tensor> tangents;
  for (Kernels kind : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(kind);
    testing::CountCalls counting;
    Tensor leaf = x.clone().requires_grad_();
    std::vector<Tensor> g = grad({loss(leaf)}, {leaf}, {}, {.create_graph = true});
    int fused = 0;
    for (const auto& [name, shape] : graph_nodes(g)) fused += name == "swiglu_backward";
    Tensor by_reverse = grad({(g[0] * v).sum()}, {leaf})[0];
    Tensor by_forward = hvp(loss, x, v);
    tangents.push_back(
        jvp([&](const std::vector<Tensor>& in) { return swiglu(in[0], gate, up, down); }, {x}, {v}).tangent);
    EXPECT_TRUE(all_close(by_forward, by_reverse, 1e-12)) << kernels_name(kind);
    EXPECT_EQ(fused, kind == Kernels::Fast ? 1 : 0);
    // The reference runs once per forward pass on its own route (three), never on the fast one.
    EXPECT_EQ(counting.reference()["swiglu"], kind == Kernels::Fast ? 0 : 3) << kernels_name(kind);
  }
  EXPECT_TRUE(all_close(tangents[0], tangents[1], 1e-12));
}

// A gradient taken with create_graph inside a DualLevel carries its tangent (the fused node's
// forward rule): H v, as forward over reverse and reverse over reverse give it.
TEST(FusedDoubleBackward, ACreateGraphGradientCarriesItsTangent) {
  Generator gen(50);
  Tensor x = randn({2, 2, 4, 3}, gen, kFloat64), v = randn({2, 2, 4, 3}, gen, kFloat64);
  Tensor w = randn({3, 3}, gen, kFloat64);
  auto f = [&](const Tensor& t) {
    Tensor y = layer_norm(linear_gelu(t, w), {}, {}, 1e-5);
    return scaled_dot_product_attention(y, t, y, {}, true).output.pow(2.0).sum();
  };
  Tensor expected = hvp_reverse_over_reverse(f, x, v);
  fwad::DualLevel level;
  Tensor leaf = x.clone().requires_grad_();
  Tensor dual = fwad::make_dual(leaf, v);
  Tensor g = grad({f(dual)}, {leaf}, {}, {.create_graph = true})[0];
  EXPECT_TRUE(all_close(fwad::tangent(g), expected, 1e-12));
}

// --- modules --------------------------------------------------------------------------------

::testing::AssertionResult gradgradcheck_module(const nn::Module& module, const std::vector<Tensor>& inputs,
                                                const std::function<Tensor()>& f) {
  std::vector<Tensor> tensors = inputs;
  for (const Tensor& p : module.parameters()) tensors.push_back(p);
  return testing::gradgradcheck_in_place(f, tensors);
}

TEST(Gradgradcheck, LinearAndLayerNormModules) {
  Generator gen(21);
  for (bool bias : {true, false}) {
    nn::Linear l(3, 2, bias, gen);
    l.to(kFloat64);
    Tensor x = uniform_leaf({2, 3}, gen);
    EXPECT_TRUE(gradgradcheck_module(l, {x}, [&] { return l.forward(x).tanh(); })) << "bias " << bias;
    nn::LayerNorm ln(4, 1e-5, bias);
    ln.to(kFloat64);
    Tensor y = uniform_leaf({3, 4}, gen);
    EXPECT_TRUE(gradgradcheck_module(ln, {y}, [&] { return ln.forward(y); })) << "bias " << bias;
  }
}

TEST(Gradgradcheck, MultiHeadAttentionSelfCrossCausalPadded) {
  Generator gen(22);
  std::int64_t d = 4, heads = 2;
  nn::MultiHeadAttention self_attn(d, heads, {}, gen);
  self_attn.to(kFloat64);
  Tensor x = uniform_leaf({2, 3, d}, gen);
  Tensor padding = key_padding_mask({3, 2}, 3);
  EXPECT_TRUE(gradgradcheck_module(self_attn, {x}, [&] { return self_attn.forward(x, x, {.attn_mask = padding}); }))
      << "padded";
  EXPECT_TRUE(gradgradcheck_module(self_attn, {x}, [&] { return self_attn.forward(x, x, {.causal = true}); }))
      << "causal";
  nn::MultiHeadAttention cross(d, heads, {.bias = false, .cross = true}, gen);
  cross.to(kFloat64);
  Tensor memory = uniform_leaf({2, 5, d}, gen);
  Tensor memory_padding = key_padding_mask({5, 3}, 5);
  EXPECT_TRUE(gradgradcheck_module(cross, {x, memory}, [&] {
    return cross.forward(x, memory, {.attn_mask = memory_padding});
  })) << "cross, Tq = 3, Tk = 5";
}

TEST(Gradgradcheck, TransformerBlock) {
  Generator gen(23);
  nn::SelfAttentionBlock block({.d_model = 4, .n_heads = 2, .d_ff = 6}, gen);
  block.to(kFloat64);
  Tensor x = uniform_leaf({2, 3, 4}, gen);
  EXPECT_TRUE(gradgradcheck_module(block, {x}, [&] { return block.forward(x, {}, true); }));
}

// --- hvp, jvp, hessian, jacobian against closed forms ---------------------------------------

TEST(Functional, SoftmaxJacobianIsDiagPMinusPPT) {
  Tensor x = tensor({0.3, -1.2, 2.0, 0.0, 0.7}, {5}, kFloat64);
  Tensor j = jacobian([](const Tensor& t) { return t.softmax(0); }, x);
  ASSERT_EQ(j.shape(), (Shape{5, 5}));
  std::vector<double> p = values(x.softmax(0)), got = values(j);
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 5; ++k) EXPECT_NEAR(got[i * 5 + k], (i == k ? p[i] : 0.0) - p[i] * p[k], 1e-12);
}

TEST(Functional, CrossEntropyHessianIsDiagPMinusPPTOverN) {
  std::int64_t n = 3, c = 4;
  Generator gen(24);
  Tensor logits = randn({n, c}, gen, kFloat64);
  Tensor targets = from_vector<std::int64_t>({2, 0, 3}, {3});
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    Tensor h = hessian([&](const Tensor& t) { return cross_entropy(t, targets); }, logits);
    ASSERT_EQ(h.shape(), (Shape{n, c, n, c}));
    std::vector<double> p = values(logits.softmax(-1)), got = values(h);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t i = 0; i < c; ++i)
        for (std::int64_t s = 0; s < n; ++s)
          for (std::int64_t j = 0; j < c; ++j) {
            double pi = p[r * c + i], pj = p[r * c + j];
            double expected = r == s ? ((i == j ? pi : 0.0) - pi * pj) / static_cast<double>(n) : 0.0;
            EXPECT_NEAR(got[((r * c + i) * n + s) * c + j], expected, 1e-12) << kernels_name(k);
          }
  }
}

TEST(Functional, GeluSecondDerivativeIsPhiTimesTwoMinusXSquared) {
  Tensor x = tensor({-3.0, -1.1, -0.2, 0.0, 0.4, 1.3, 2.5}, {7}, kFloat64);
  using Route = Tensor (*)(const FunctionOfTensor&, const Tensor&, const Tensor&);
  for (Route route : std::array<Route, 2>{&hvp, &hvp_reverse_over_reverse})
    for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
      KernelGuard guard(k);
      // GELU acts elementwise, so its Hessian is diagonal and H 1 is the second derivative.
      Tensor d2 = route([](const Tensor& t) { return t.gelu().sum(); }, x, ones({7}, kFloat64));
      std::vector<double> xs = values(x), got = values(d2);
      for (std::size_t i = 0; i < xs.size(); ++i) {
        double phi = std::exp(-xs[i] * xs[i] / 2) / std::sqrt(2 * std::numbers::pi);
        EXPECT_NEAR(got[i], phi * (2 - xs[i] * xs[i]), 1e-12)
            << kernels_name(k) << " x = " << xs[i]
            << (route == static_cast<Route>(&hvp) ? ", hvp" : ", reverse over reverse");
      }
    }
}

TEST(Functional, LogSumExpHessian) {
  Tensor x = tensor({0.5, -0.3, 1.7, -2.0}, {4}, kFloat64);
  Tensor h = hessian([](const Tensor& t) { return t.exp().sum().log(); }, x);
  std::vector<double> p = values(x.softmax(0)), got = values(h);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(got[i * 4 + j], (i == j ? p[i] : 0.0) - p[i] * p[j], 1e-12);
}

// A small smooth loss of a [3, 4] parameter: a tanh layer, a softmax and a squared error.
Tensor smooth_loss(const Tensor& w) {
  Tensor x = tensor({0.2, -0.5, 1.0, 0.3, -1.1, 0.8, 0.05, 0.4}, {2, 4}, w.dtype());
  Tensor y = x.matmul(w.transpose(0, 1)).tanh().softmax(-1);
  return (y * y).sum() + w.pow(4.0).mean();
}

TEST(Functional, HvpEqualsHessianTimesVAndTheHessianIsSymmetric) {
  Generator gen(25);
  Tensor w = randn({3, 4}, gen, kFloat64), v = randn({3, 4}, gen, kFloat64);
  Tensor h = hessian(smooth_loss, w).reshape({12, 12});
  EXPECT_TRUE(all_close(h, h.transpose(0, 1), 1e-12));
  Tensor hv = hvp(smooth_loss, w, v);
  EXPECT_TRUE(all_close(hv.reshape({12, 1}), h.matmul(v.reshape({12, 1})), 1e-12));
  EXPECT_TRUE(all_close(hvp_reverse_over_reverse(smooth_loss, w, v), hv, 1e-12));
  // And against central differences of the gradient along v.
  double eps = 1e-6;
  auto gradient_at = [](const Tensor& t) {
    Tensor leaf = t.detach().requires_grad_();
    return grad({smooth_loss(leaf)}, {leaf})[0];
  };
  Tensor numeric = (gradient_at(w + v * eps) - gradient_at(w - v * eps)) / (2 * eps);
  EXPECT_TRUE(all_close(hv, numeric, 1e-7));
}

TEST(Functional, JvpEqualsJacobianTimesV) {
  Generator gen(26);
  Tensor x = randn({2, 3}, gen, kFloat64), v = randn({2, 3}, gen, kFloat64);
  auto f = [](const Tensor& t) { return layer_norm(t.tanh(), {}, {}, 1e-5).matmul(t.transpose(0, 1)); };
  Tensor j = jacobian(f, x);  // [2, 2, 2, 3]
  ASSERT_EQ(j.shape(), (Shape{2, 2, 2, 3}));
  Tensor jv = jvp(f, x, v);
  EXPECT_TRUE(all_close(jv.reshape({4, 1}), j.reshape({4, 6}).matmul(v.reshape({6, 1})), 1e-12));
  double eps = 1e-6;
  Tensor numeric;
  {
    NoGradGuard no_grad;
    numeric = (f(x + v * eps) - f(x - v * eps)) / (2 * eps);
  }
  EXPECT_TRUE(all_close(jv, numeric, 1e-8));
}

TEST(Functional, Float32AgreesWithFloat64) {
  Generator gen(27);
  Tensor w = randn({3, 4}, gen, kFloat64), v = randn({3, 4}, gen, kFloat64);
  Tensor hv64 = hvp(smooth_loss, w, v);
  Tensor hv32 = hvp(smooth_loss, w.to(kFloat32), v.to(kFloat32));
  EXPECT_EQ(hv32.dtype(), kFloat32);
  EXPECT_TRUE(all_close(hv32, hv64, 1e-4));
}

TEST(Functional, RefusesBadArguments) {
  Tensor x = zeros({3}, kFloat64);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { hvp([](const Tensor& t) { return t * 2.0; }, x, x); },
                                                 "f must return one element"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { hvp([](const Tensor& t) { return t.sum(); }, x, zeros({4}, kFloat64)); }, "v is float64 with shape [4]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { jacobian([](const Tensor& t) { return t; }, zeros({2}, kInt64)); }, "x must be float32 or float64"));
  // A function that does not depend on x: zero products, not an error.
  EXPECT_TRUE(all_close(hvp([](const Tensor&) { return scalar(1.0, kFloat64); }, x, x), {0.0, 0.0, 0.0}, 0.0));
}

// --- third-order consistency: each fused op against its composition from primitives -----------

// d^3/dt^3 f(x + t v) at t = 0: three nested directional derivatives, each with create_graph.
double third_directional(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& v) {
  Tensor leaf = x.detach().requires_grad_();
  Tensor d = f(leaf);
  for (int order = 0; order < 3; ++order) {
    Tensor g = grad({d}, {leaf}, {}, {.create_graph = true, .allow_unused = true})[0];
    if (!g.defined()) return 0.0;
    d = (g * v).sum();
  }
  return d.item();
}

TEST(HigherOrder, ThirdDerivativeOfEachFusedOpEqualsItsComposition) {
  Generator gen(28);
  Tensor x = randn({2, 3, 5}, gen, kFloat64), v = randn({2, 3, 5}, gen, kFloat64);
  Tensor g = randn({2, 3, 5}, gen, kFloat64);  // output weights, so that the test sees every element
  Tensor w = randn({5}, gen, kFloat64), bias = randn({5}, gen, kFloat64);
  auto weigh = [g](const Tensor& y) { return (y * g).sum(); };
  // Compositions written here from exp, log, sum, mean, sqrt, matmul and masked_fill only.
  auto softmax_c = [](const Tensor& t) { return t.exp() / t.exp().sum(-1, true); };
  auto log_softmax_c = [](const Tensor& t) { return t - t.exp().sum(-1, true).log(); };
  auto layer_norm_c = [&](const Tensor& t) {
    Tensor c = t - t.mean(-1, true);
    return c / ((c * c).mean(-1, true) + 1e-5).sqrt() * w + bias;
  };
  struct Pair {
    const char* name;
    std::function<Tensor(const Tensor&)> fused, composed;
  };
  Tensor targets = from_vector<std::int64_t>({1, 4, -100, 0, 2, 3}, {2, 3});
  Tensor is_target = zeros({2, 3, 5}, kBool);
  for (std::int64_t r = 0, t[] = {1, 4, -1, 0, 2, 3}; r < 6; ++r)
    if (t[r] >= 0) is_target.mutable_data_ptr<bool>()[r * 5 + t[r]] = true;
  std::vector<Pair> pairs = {
      {"softmax", [&](const Tensor& t) { return weigh(t.softmax(-1)); },
       [&](const Tensor& t) { return weigh(softmax_c(t)); }},
      {"log_softmax", [&](const Tensor& t) { return weigh(t.log_softmax(-1)); },
       [&](const Tensor& t) { return weigh(log_softmax_c(t)); }},
      {"layer_norm", [&](const Tensor& t) { return weigh(layer_norm(t, w, bias, 1e-5)); },
       [&](const Tensor& t) { return weigh(layer_norm_c(t)); }},
      {"cross_entropy", [&](const Tensor& t) { return cross_entropy(t, targets); },
       [&](const Tensor& t) { return -masked_fill(log_softmax_c(t), logical_not(is_target), 0.0).sum() / 5.0; }},
  };
  for (const Pair& p : pairs)
    EXPECT_NEAR(third_directional(p.fused, x, v), third_directional(p.composed, x, v), 1e-10) << p.name;

  // Attention, causal with Tq = 3 < Tk = 5: softmax(q k^T / sqrt(d) + mask) v, composed by hand.
  Tensor k = randn({2, 2, 5, 3}, gen, kFloat64), val = randn({2, 2, 5, 4}, gen, kFloat64);
  Tensor q = randn({2, 2, 3, 3}, gen, kFloat64), vq = randn({2, 2, 3, 3}, gen, kFloat64);
  Tensor go = randn({2, 2, 3, 4}, gen, kFloat64);
  Tensor hidden = logical_not(causal_mask(3, 5));
  auto fused = [&](const Tensor& t) { return (scaled_dot_product_attention(t, k, val, {}, true).output * go).sum(); };
  auto composed = [&](const Tensor& t) {
    Tensor s = masked_fill(t.matmul(k.transpose(-2, -1)) / std::sqrt(3.0), hidden, -1e300);
    return (softmax_c(s - s.amax(-1, true).detach()).matmul(val) * go).sum();
  };
  EXPECT_NEAR(third_directional(fused, q, vq), third_directional(composed, q, vq), 1e-10) << "attention";
}

}  // namespace
}  // namespace ag
