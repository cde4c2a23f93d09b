// Forward mode (autograd/forward.h): dual tensors, the forward rule of every op checked column by
// column against central differences (gradcheck's check_forward_ad), jvp against the Jacobian
// that reverse mode builds, forward-over-reverse against reverse-over-reverse, and the refusals.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../test_util.h"
#include "fused_op_cases.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;
using test::uniform_leaf;

// Forward mode alone: the reverse gradients of the same functions are checked elsewhere.
const GradcheckOptions kForward{.check_backward_ad = false, .check_forward_ad = true};

::testing::AssertionResult forward_check(const TensorFunction& f, const std::vector<Tensor>& inputs) {
  return testing::gradcheck(f, inputs, kForward);
}

::testing::AssertionResult forward_check_module(const nn::Module& module, const std::vector<Tensor>& inputs,
                                                const std::function<Tensor()>& f) {
  std::vector<Tensor> tensors = inputs;
  for (const Tensor& p : module.parameters()) tensors.push_back(p);
  return testing::gradcheck_in_place(f, tensors, kForward);
}

// --- dual tensors -----------------------------------------------------------------------------

TEST(Forward, ATangentMovesThroughOpsByTheirRules) {
  Tensor x = tensor({0.5, -1.0, 2.0}, {3}, kFloat64), v = tensor({1.0, 0.0, -2.0}, {3}, kFloat64);
  fwad::DualLevel level;
  Tensor d = fwad::make_dual(x, v);
  Tensor y = d * d + d.exp();
  // By hand: d/de [(x + ev)^2 + exp(x + ev)] = 2 x v + exp(x) v.
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i) {
    double xi = x.at<double>({i}), vi = v.at<double>({i});
    expected.push_back(2 * xi * vi + std::exp(xi) * vi);
  }
  EXPECT_TRUE(all_close(fwad::tangent(y), expected, 1e-15));
  auto [primal, tangent] = fwad::unpack_dual(y);
  EXPECT_FALSE(fwad::tangent(primal).defined());  // the primal is plain values
  EXPECT_TRUE(all_close(tangent, expected, 1e-15));
  // A tensor no tangent reached has none: its derivative along v is zero.
  EXPECT_FALSE(fwad::tangent(x * 2.0).defined());
  // Integer results carry none; a float32 copy carries the tangent in float32.
  EXPECT_FALSE(fwad::tangent(y.argmax(0)).defined());
  Tensor t32 = fwad::tangent(y.to(kFloat32));
  ASSERT_EQ(t32.dtype(), kFloat32);
  EXPECT_TRUE(all_close(t32, expected, 1e-6));
}

TEST(Forward, TheLevelEndsAndTakesItsTangentsWithIt) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64);
  Tensor d, y;
  EXPECT_FALSE(fwad::is_active());
  {
    fwad::DualLevel level;
    EXPECT_TRUE(fwad::is_active());
    d = fwad::make_dual(x, ones({2}, kFloat64));
    y = d.tanh();
    EXPECT_TRUE(fwad::tangent(y).defined());
  }
  EXPECT_FALSE(fwad::is_active());
  EXPECT_FALSE(fwad::tangent(d).defined());
  EXPECT_FALSE(fwad::tangent(y).defined());
  fwad::DualLevel again;  // a new level sees none of the old tangents either
  EXPECT_FALSE(fwad::tangent(y).defined());
  EXPECT_FALSE(fwad::tangent(y * 3.0).defined());
}

TEST(Forward, RefusesBadCalls) {
  Tensor x = tensor({1.0, 2.0, 3.0}, {3}, kFloat64);
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { fwad::make_dual(x, x); }, "make_dual: no forward-mode level"));
  fwad::DualLevel level;
  EXPECT_TRUE(throws_with<std::runtime_error>([] { fwad::DualLevel nested; }, "levels do not nest"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { fwad::make_dual(x, ones({2}, kFloat64)); },
                                                 "make_dual: the tangent must have the primal's shape and dtype: "
                                                 "primal float64 [3], tangent float64 [2]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { fwad::make_dual(x, ones({3}, kFloat32)); },
                                                 "tangent float32 [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { fwad::make_dual(from_vector<std::int64_t>({1, 2}, {2}), from_vector<std::int64_t>({1, 2}, {2})); },
      "make_dual: expected a float32 or float64 tensor"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { fwad::set_tangent(x, Tensor()); }, "set_tangent: got an undefined"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { jvp([](const std::vector<Tensor>& in) { return in[0]; }, {x}, {}); }, "jvp: got 1 inputs but 0 tangents"));
}

// An op of the user's own with a backward but no forward rule.
Tensor cube(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * x * x;
  }
  return record("cube", y, {x}, [x](const Tensor& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{dy * 3.0 * x * x};
  });
}

TEST(Forward, AWriteInPlaceAfterTheTangentRefusesInsteadOfAStaleTangent) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64), w = tensor({0.5, -1.0}, {2}, kFloat64);
  fwad::DualLevel level;
  fwad::set_tangent(w, ones({2}, kFloat64));
  Tensor y = x * w;  // fine: w has not changed
  EXPECT_TRUE(all_close(fwad::tangent(y), {1.0, 2.0}, 0.0));
  {
    NoGradGuard no_grad;
    w.sub_(tensor({0.1, 0.1}, {2}, kFloat64));  // an update in place, as an optimizer step makes
  }
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { x * w; },
                                              "mul: a tensor of shape [2] was written in place after it got its "
                                              "forward-mode tangent (version "));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { fwad::tangent(w); }, "tangent: a tensor of shape [2] was written"));
  fwad::set_tangent(w, ones({2}, kFloat64));  // given again, it is live again
  EXPECT_TRUE(all_close(fwad::tangent(x * w), {1.0, 2.0}, 0.0));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { w.set_data(zeros({2}, kFloat64)); },
                                              "set_data: the tensor of shape [2] carries a forward-mode tangent"));
}

TEST(Forward, GradcheckRefusesAnIntegerOutput) {
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        gradcheck([](const std::vector<Tensor>& in) { return in[0].argmax(0); },
                  {tensor({1.0, 2.0}, {2}, kFloat64).requires_grad_()}, kForward);
      },
      "gradcheck: the function must return a float tensor"));
}

TEST(Forward, AnOpWithoutARuleRefusesNamingItselfInsteadOfAZeroTangent) {
  Tensor x = tensor({1.0, 2.0}, {2}, kFloat64);
  fwad::DualLevel level;
  Tensor d = fwad::make_dual(x, ones({2}, kFloat64));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { cube(d); }, "cube: has no forward-mode rule"));
  EXPECT_NO_THROW(cube(x));  // without a tangent it runs as before
}

// The same op with a wrong rule (the factor 3 forgotten): the forward gradcheck must see it.
Tensor cube_with_bad_rule(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * x * x;
  }
  return record(
      "cube", y, {x},
      [x](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy * 3.0 * x * x}; }, std::nullopt,
      BackwardOrder::FirstOrder, [x](const std::vector<Tensor>& t) { return t[0] * x * x; });
}

TEST(Forward, GradcheckCatchesAWrongForwardRule) {
  Tensor x = tensor({0.5, -1.5}, {2}, kFloat64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) { return cube_with_bad_rule(in[0]); };
  EXPECT_TRUE(testing::gradcheck(f, {x}));  // the backward is right
  GradcheckResult r = gradcheck(f, {x}, kForward);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.report.find("gradcheck (forward mode): input 0 (shape [2]), element 1 (index [1]) moving: output "
                          "element 1 (index [1]): jvp 2.25, numeric 6.75"),
            std::string::npos)
      << r.report;
}

TEST(Forward, ABackwardInsideTheLevelCarriesTheTangentsIntoTheGradients) {
  // d/dx sum(2 tanh x) = 2 (1 - tanh^2 x); its tangent along 1 is -4 tanh x (1 - tanh^2 x).
  std::vector<double> expected;
  for (double xi : {0.5, 1.5}) expected.push_back(-4 * std::tanh(xi) * (1 - std::tanh(xi) * std::tanh(xi)));
  for (bool create_graph : {false, true}) {
    Tensor x = tensor({0.5, 1.5}, {2}, kFloat64).requires_grad_();
    fwad::DualLevel level;
    Tensor y = (fwad::make_dual(x, ones({2}, kFloat64)).tanh() * 2.0).sum();
    y.backward({}, std::nullopt, create_graph);
    EXPECT_TRUE(all_close(fwad::tangent(x.grad()), expected, 1e-14)) << "create_graph " << create_graph;
    x.zero_grad();
  }
}

// An op whose backward is a hand loop only (FirstOrder) cannot give its gradient's tangent.
TEST(Forward, ABackwardThroughAnOpWithoutASecondDerivativeRefusesInsideTheLevel) {
  Tensor x = tensor({0.5, 1.5}, {2}, kFloat64).requires_grad_();
  fwad::DualLevel level;
  Tensor y = cube_with_bad_rule(fwad::make_dual(x, ones({2}, kFloat64))).sum();
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] { y.backward(); }, "'cube' has neither a forward-over-reverse rule nor a second derivative"));
}

// --- the forward rule of every op, against central differences ---------------------------------

TEST(ForwardGradcheck, ElementwiseOps) {
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
      {"clone", [](const Tensor& t) { return t.clone() * t; }},
  };
  for (auto& [name, f] : on_x)
    EXPECT_TRUE(forward_check([f = f](const std::vector<Tensor>& in) { return f(in[0]); }, {x})) << name;
  std::vector<std::pair<std::string, F>> on_pos = {
      {"log", [](const Tensor& t) { return t.log(); }},
      {"sqrt", [](const Tensor& t) { return t.sqrt(); }},
      {"pow", [](const Tensor& t) { return t.pow(2.5); }},
  };
  for (auto& [name, f] : on_pos)
    EXPECT_TRUE(forward_check([f = f](const std::vector<Tensor>& in) { return f(in[0]); }, {pos})) << name;
  EXPECT_TRUE(forward_check([](const std::vector<Tensor>& in) { return in[0].relu() * in[0]; }, {away}));
}

TEST(ForwardGradcheck, BinaryOpsWithBroadcasting) {
  Generator gen(12);
  Tensor a = uniform_leaf({2, 3, 4}, gen, 0.5, 1.5);
  Tensor b = uniform_leaf({3, 1}, gen, 0.5, 1.5);
  Tensor c = tensor({0.7}, {}, kFloat64);  // no tangent: a constant operand
  auto check = [&](const char* name, Tensor (*op)(const Tensor&, const Tensor&)) {
    EXPECT_TRUE(forward_check([op](const std::vector<Tensor>& in) { return op(in[0], in[1]); }, {a, b})) << name;
    EXPECT_TRUE(forward_check([op](const std::vector<Tensor>& in) { return op(in[1], in[0]); }, {a, b})) << name;
    // Only one operand moves, and it is the broadcast one.
    EXPECT_TRUE(forward_check([op, &a](const std::vector<Tensor>& in) { return op(a.detach(), in[0]); }, {b}))
        << name;
    EXPECT_TRUE(forward_check([op, &a](const std::vector<Tensor>& in) { return op(in[0], a.detach()); }, {b}))
        << name;
    EXPECT_TRUE(forward_check([op, &c](const std::vector<Tensor>& in) { return op(c, in[0]); }, {b})) << name;
  };
  check("add", add);
  check("sub", sub);
  check("mul", mul);
  check("div", div);
}

TEST(ForwardGradcheck, Reductions) {
  Generator gen(13);
  Tensor x = uniform_leaf({3, 4, 2}, gen);
  std::vector<std::function<Tensor(const Tensor&)>> fs = {
      [](const Tensor& t) { return sum(t); },           [](const Tensor& t) { return sum(t, 1, false); },
      [](const Tensor& t) { return sum(t, -1, true); }, [](const Tensor& t) { return mean(t); },
      [](const Tensor& t) { return mean(t, 0, true); }, [](const Tensor& t) { return amax(t * t, 1, false); },
      [](const Tensor& t) { return amax(t, -1, true); }, [](const Tensor& t) { return max(t); },
  };
  for (std::size_t i = 0; i < fs.size(); ++i)
    EXPECT_TRUE(forward_check([f = fs[i]](const std::vector<Tensor>& in) { return f(in[0]); }, {x}))
        << "reduction " << i;
}

TEST(ForwardGradcheck, ShapeOps) {
  Generator gen(14);
  Tensor x = uniform_leaf({2, 3, 5}, gen);
  Tensor y = uniform_leaf({2, 1, 5}, gen);
  using F = std::function<Tensor(const std::vector<Tensor>&)>;
  std::vector<std::pair<std::string, F>> fs = {
      {"reshape", [](const std::vector<Tensor>& in) { return in[0].reshape({5, 6}); }},
      {"transpose", [](const std::vector<Tensor>& in) { return in[0].transpose(0, 2); }},
      {"permute", [](const std::vector<Tensor>& in) { return in[0].permute({1, 2, 0}); }},
      {"slice", [](const std::vector<Tensor>& in) { return slice(in[0], 2, 1, 5, 2); }},
      {"cat", [](const std::vector<Tensor>& in) { return cat({in[0], in[1]}, 1); }},
      {"cat with a constant part", [c = y.detach().clone()](const std::vector<Tensor>& in) { return cat({in[0], c}, 1); }},
      {"split", [](const std::vector<Tensor>& in) { return split(in[0], 2, 1)[1]; }},
      {"squeeze", [](const std::vector<Tensor>& in) { return in[1].squeeze(1).unsqueeze(0); }},
      {"broadcast_to", [](const std::vector<Tensor>& in) { return in[1].broadcast_to({2, 3, 5}); }},
      {"sum_to", [](const std::vector<Tensor>& in) { return sum_to(in[0], {2, 1, 5}); }},
      {"slice's backward",  // the adjoint of slice is an op of its own; its rule is reached here
       [](const std::vector<Tensor>& in) {
         AutoGradMode grad_mode(true);
         Tensor w = in[1].detach().requires_grad_();
         return grad({(slice(w, 2, 1, 4) * in[0].slice(1, 0, 1).slice(2, 0, 3)).sum()}, {w}, {},
                     {.create_graph = true})[0];
       }},
  };
  for (auto& [name, f] : fs) EXPECT_TRUE(forward_check(f, {x, y})) << name;
}

TEST(ForwardGradcheck, MatmulPlainBatchedAndBroadcast) {
  Generator gen(15);
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 2}}, {{2, 3, 4}, {4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}}};
  for (auto& [sa, sb] : shapes) {
    Tensor a = uniform_leaf(sa, gen), b = uniform_leaf(sb, gen);
    EXPECT_TRUE(forward_check([](const std::vector<Tensor>& in) { return in[0].matmul(in[1]); }, {a, b}))
        << shape_str(sa) << " @ " << shape_str(sb);
  }
}

TEST(ForwardGradcheck, SoftmaxLogSoftmaxAndMaskedFill) {
  Generator gen(16);
  Tensor x = uniform_leaf({2, 3, 4}, gen, -2.0, 2.0);
  Tensor mask = tensor({0, 1, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1}, {3, 4}, kFloat64).to(kBool);  // row 2 fully masked
  for (std::int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(forward_check([dim](const std::vector<Tensor>& in) { return in[0].softmax(dim); }, {x}))
        << "softmax dim " << dim;
    EXPECT_TRUE(forward_check([dim](const std::vector<Tensor>& in) { return in[0].log_softmax(dim); }, {x}))
        << "log_softmax dim " << dim;
  }
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(forward_check([&](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, -inf).softmax(-1); },
                            {x}));
  EXPECT_TRUE(forward_check(
      [&](const std::vector<Tensor>& in) {
        return masked_fill(masked_fill(in[0], mask, -inf).log_softmax(-1), mask, 0.0);  // finite output
      },
      {x}));
  EXPECT_TRUE(forward_check([&](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, 0.25); }, {x}));
}

// The ops with two kernels: the fast kernel's node and the reference's ops both carry tangents.
TEST(ForwardGradcheck, SwigluOnOddShapes) {
  Generator gen(18);
  Tensor x = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0), g = uniform_leaf({7, 5}, gen), u = uniform_leaf({7, 5}, gen),
         d = uniform_leaf({3, 7}, gen);
  for (Kernels k : {Kernels::Fast, Kernels::Reference, Kernels::Naive}) {
    KernelGuard guard(k);
    EXPECT_TRUE(
        forward_check([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1], in[2], in[3]); }, {x, g, u, d}))
        << kernels_name(k);
  }
}

TEST(ForwardGradcheck, NormsLinearGeluEmbeddingCrossEntropyDropout) {
  Generator gen(17);
  Tensor x = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0);
  Tensor w = uniform_leaf({5}, gen, 0.5, 1.5), b = uniform_leaf({5}, gen);
  Tensor lw = uniform_leaf({4, 5}, gen), lb = uniform_leaf({4}, gen), x1 = uniform_leaf({5}, gen);
  Tensor table = uniform_leaf({5, 3}, gen);
  Tensor ids = from_vector<std::int64_t>({4, 0, 4, 2, 1, 4}, {2, 3});  // a repeated id
  Tensor logits = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0);
  Tensor targets = from_vector<std::int64_t>({1, -100, 4, 0, 2, -100}, {2, 3});
  Tensor all_ignored = from_vector<std::int64_t>({7, 7, 7, 7, 7, 7}, {2, 3});
  using F = std::function<Tensor(const std::vector<Tensor>&)>;
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    std::vector<std::tuple<std::string, F, std::vector<Tensor>>> cases = {
        {"layer_norm", [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); }, {x, w, b}},
        {"layer_norm, no affine", [](const std::vector<Tensor>& in) { return layer_norm(in[0], {}, {}, 1e-5); }, {x}},
        {"layer_norm, weight only", [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], {}, 1e-3); },
         {x, w}},
        {"rms_norm", [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); }, {x, w}},
        {"rms_norm, no weight", [](const std::vector<Tensor>& in) { return rms_norm(in[0], {}, 1e-3); }, {x}},
        {"linear", [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, lw, lb}},
        {"linear, no bias", [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, lw}},
        {"linear, 1-d input", [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x1, lw, lb}},
        {"linear, the same tensor twice", [](const std::vector<Tensor>& in) { return linear(in[0], in[0]); }, {lw}},
        {"linear_gelu", [](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2]); }, {x, lw, lb}},
        {"linear_gelu tanh, no bias",
         [](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], {}, GeluApproximation::Tanh); },
         {x, lw}},
        {"gelu", [](const std::vector<Tensor>& in) { return in[0].gelu(); }, {x}},
        {"gelu tanh", [](const std::vector<Tensor>& in) { return in[0].gelu(GeluApproximation::Tanh); }, {x}},
        {"embedding", [&](const std::vector<Tensor>& in) { return embedding(in[0], ids); }, {table}},
        {"cross_entropy", [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); }, {logits}},
        {"cross_entropy, every row ignored",
         [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], all_ignored, 7); },
         {logits}},
        {"dropout",
         [](const std::vector<Tensor>& in) {
           Generator mask_gen(7);  // the same mask at every call
           return dropout(in[0], 0.4, true, mask_gen);
         },
         {x}},
    };
    for (auto& [name, f, in] : cases) EXPECT_TRUE(forward_check(f, in)) << name << ", " << kernels_name(k);
  }
}

TEST(ForwardGradcheck, AttentionInEveryLayoutAndMaskCase) {
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
      EXPECT_TRUE(forward_check(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.causal).output;
          },
          {q, k, v}))
          << kernels_name(kind) << " bhtd, causal " << c.causal << ", mask " << c.mask.defined();
      EXPECT_TRUE(forward_check(
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
      EXPECT_TRUE(forward_check(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention_packed(in[0], h, self_padding, causal).output;
          },
          {qkv}))
          << kernels_name(kind) << " packed, causal " << causal;
    // Only the values move: the weights' tangent is zero, the output's is P dV.
    EXPECT_TRUE(forward_check(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention(q.detach(), k.detach(), in[0], padding, true).output;
        },
        {v}))
        << kernels_name(kind) << " values only";
    EXPECT_TRUE(forward_check(
        [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[0], in[0]).output; }, {q}))
        << kernels_name(kind) << " the same tensor three times";
  }
}

// The fused rules (attention's in its tiles, the others from their saved statistics) against the
// reference route's tangents, which come from the twins' own ops, on shapes that span several
// of attention's query blocks (64 rows).
TEST(ForwardGradcheck, FusedRulesEqualTheReferenceTangents) {
  Generator gen(33);
  auto both_routes = [](const std::function<JvpResult()>& run) {
    JvpResult fast = run();
    KernelGuard guard(Kernels::Reference);
    JvpResult reference = run();
    return std::pair{fast, reference};
  };
  std::int64_t b = 2, h = 3, tq = 70, tk = 75, d = 5, dv = 4;
  Tensor q = randn({b, h, tq, d}, gen, kFloat64), k = randn({b, h, tk, d}, gen, kFloat64),
         v = randn({b, h, tk, dv}, gen, kFloat64);
  std::vector<Tensor> t = {randn(q.shape(), gen, kFloat64), randn(k.shape(), gen, kFloat64),
                           randn(v.shape(), gen, kFloat64)};
  Tensor padding = key_padding_mask({75, 40}, tk);
  for (Tensor mask : {Tensor(), padding})
    for (bool causal : {false, true})
      for (int moving = 0; moving < 4; ++moving) {  // q, k, v alone, then all three
        std::vector<Tensor> tangents(3);
        for (int i = 0; i < 3; ++i)
          if (moving == 3 || moving == i) tangents[i] = t[static_cast<std::size_t>(i)];
        auto [fast, reference] = both_routes([&] {
          return jvp([&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention(in[0], in[1], in[2], mask, causal).output;
          }, {q, k, v}, tangents);
        });
        EXPECT_TRUE(all_close(fast.tangent, reference.tangent, 1e-12))
            << "mask " << mask.defined() << ", causal " << causal << ", moving " << moving;
      }
  Tensor qkv = randn({2, 70, 3 * 2 * 4}, gen, kFloat64), dqkv = randn(qkv.shape(), gen, kFloat64);
  auto [fast, reference] = both_routes([&] {
    return jvp([](const std::vector<Tensor>& in) { return scaled_dot_product_attention_packed(in[0], 2, {}, true).output; },
               {qkv}, {dqkv});
  });
  EXPECT_TRUE(all_close(fast.tangent, reference.tangent, 1e-12)) << "packed";

  Tensor x = randn({3, 70, 6}, gen, kFloat64), w = randn({4, 6}, gen, kFloat64), bias = randn({4}, gen, kFloat64);
  Tensor g = randn({6}, gen, kFloat64), beta = randn({6}, gen, kFloat64);
  Tensor dx = randn(x.shape(), gen, kFloat64), dw = randn(w.shape(), gen, kFloat64), db = randn({4}, gen, kFloat64);
  Tensor dg = randn({6}, gen, kFloat64), dbeta = randn({6}, gen, kFloat64);
  Tensor targets = randint(0, 6, {3, 70}, gen);
  Tensor table = randn({6, 5}, gen, kFloat64), dtable = randn({6, 5}, gen, kFloat64);
  Tensor gate = randn({5, 6}, gen, kFloat64), up = randn({5, 6}, gen, kFloat64), down = randn({4, 5}, gen, kFloat64);
  Tensor dgate = randn({5, 6}, gen, kFloat64), dup = randn({5, 6}, gen, kFloat64), ddown = randn({4, 5}, gen, kFloat64);
  using F = std::function<Tensor(const std::vector<Tensor>&)>;
  std::vector<std::tuple<std::string, F, std::vector<Tensor>, std::vector<Tensor>>> cases = {
      {"linear", [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias}, {dx, dw, db}},
      {"linear, bias alone", [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias},
       {Tensor(), Tensor(), db}},
      {"linear_gelu", [](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2]); }, {x, w, bias},
       {dx, dw, db}},
      {"gelu", [](const std::vector<Tensor>& in) { return in[0].gelu(GeluApproximation::Tanh); }, {x}, {dx}},
      {"layer_norm", [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); },
       {x, g, beta}, {dx, dg, dbeta}},
      {"layer_norm, bias alone", [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); },
       {x, g, beta}, {Tensor(), Tensor(), dbeta}},
      {"rms_norm", [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); }, {x, g}, {dx, dg}},
      {"rms_norm, weight alone", [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); }, {x, g},
       {Tensor(), dg}},
      {"swiglu", [](const std::vector<Tensor>& in) { return swiglu(in[0], in[1], in[2], in[3]); },
       {x, gate, up, down}, {dx, dgate, dup, ddown}},
      {"swiglu, w_up and w_down alone",
       [](const std::vector<Tensor>& in) { return swiglu(in[0], in[1], in[2], in[3]); }, {x, gate, up, down},
       {Tensor(), Tensor(), dup, ddown}},
      {"embedding", [&](const std::vector<Tensor>& in) { return embedding(in[0], targets); }, {table}, {dtable}},
      {"cross_entropy", [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); }, {x}, {dx}},
  };
  for (auto& [name, f, in, tangents] : cases) {
    auto [fast_run, reference_run] = both_routes([&] { return jvp(f, in, tangents); });
    EXPECT_TRUE(all_close(fast_run.tangent, reference_run.tangent, 1e-12)) << name;
  }
}

// --- modules -------------------------------------------------------------------------------

TEST(ForwardGradcheck, LinearNormAndAttentionModules) {
  Generator gen(21);
  for (bool bias : {true, false}) {
    nn::Linear l(3, 2, bias, gen);
    l.to(kFloat64);
    Tensor x = uniform_leaf({2, 3}, gen);
    EXPECT_TRUE(forward_check_module(l, {x}, [&] { return l.forward(x); })) << "bias " << bias;
    nn::LayerNorm ln(4, 1e-5, bias);
    ln.to(kFloat64);
    Tensor y = uniform_leaf({3, 4}, gen);
    EXPECT_TRUE(forward_check_module(ln, {y}, [&] { return ln.forward(y); })) << "bias " << bias;
  }
  nn::RMSNorm rms(4, 1e-5);
  rms.to(kFloat64);
  Tensor y = uniform_leaf({3, 4}, gen);
  EXPECT_TRUE(forward_check_module(rms, {y}, [&] { return rms.forward(y); }));

  std::int64_t d = 4, heads = 2;
  nn::MultiHeadAttention self_attn(d, heads, {}, gen);
  self_attn.to(kFloat64);
  Tensor x = uniform_leaf({2, 3, d}, gen);
  Tensor padding = key_padding_mask({3, 2}, 3);
  EXPECT_TRUE(forward_check_module(self_attn, {x}, [&] { return self_attn.forward(x, x, {.attn_mask = padding}); }))
      << "padded";
  EXPECT_TRUE(forward_check_module(self_attn, {x}, [&] { return self_attn.forward(x, x, {.causal = true}); }))
      << "causal";
  nn::MultiHeadAttention cross(d, heads, {.bias = false, .cross = true}, gen);
  cross.to(kFloat64);
  Tensor memory = uniform_leaf({2, 5, d}, gen);
  Tensor memory_padding = key_padding_mask({5, 3}, 5);
  EXPECT_TRUE(forward_check_module(cross, {x, memory}, [&] {
    return cross.forward(x, memory, {.attn_mask = memory_padding});
  })) << "cross, Tq = 3, Tk = 5";
  nn::SelfAttentionBlock block({.d_model = 4, .n_heads = 2, .d_ff = 6}, gen);
  block.to(kFloat64);
  EXPECT_TRUE(forward_check_module(block, {x}, [&] { return block.forward(x, {}, true); })) << "block";
}

nn::GPTConfig small_gpt(nn::NormKind norm) {
  return {.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 4, .norm = norm};
}

TEST(ForwardGradcheck, AWholeGptWithTangentsOnItsParameters) {
  Generator gen(31);
  Tensor ids = from_vector<std::int64_t>({1, 4, 0, 2, 3, 3}, {2, 3});
  Tensor targets = from_vector<std::int64_t>({4, 0, 2, 1, 3, 0}, {2, 3});
  for (Kernels kind : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(kind);
    for (nn::NormKind norm : {nn::NormKind::Layer, nn::NormKind::Rms}) {
      nn::GPT model(small_gpt(norm), gen);
      model.to(kFloat64);
      EXPECT_TRUE(forward_check_module(model, {}, [&] { return model.loss(ids, targets); })) << kernels_name(kind);
      EXPECT_TRUE(forward_check_module(model, {}, [&] { return model.forward(ids); })) << kernels_name(kind);
    }
  }
}

// --- jvp against reverse mode's Jacobian ------------------------------------------------------

// J v from ag::jacobian (one backward pass per output element), as [*f(x).shape].
Tensor jacobian_times(const FunctionOfTensor& f, const Tensor& x, const Tensor& v) {
  Tensor j = jacobian(f, x);
  Shape out_shape(j.shape().begin(), j.shape().end() - x.dim());
  return j.reshape({-1, x.numel()}).matmul(v.reshape({x.numel(), 1})).reshape(out_shape);
}

TEST(Jvp, EqualsTheJacobianTimesVToRoundOff) {
  Generator gen(41);
  Tensor x = randn({2, 3, 4}, gen, kFloat64), v = randn({2, 3, 4}, gen, kFloat64);
  Tensor w = randn({4, 4}, gen, kFloat64), keys = randn({2, 5, 4}, gen, kFloat64);
  Tensor targets = from_vector<std::int64_t>({1, 0, 3, -100, 2, 2}, {2, 3});
  std::vector<std::pair<std::string, FunctionOfTensor>> fs = {
      {"attention written out from ops",
       [&](const Tensor& t) {
         Tensor scores = t.matmul(keys.transpose(1, 2)) / std::sqrt(4.0);
         return scores.softmax(-1).matmul(keys * t.sum());
       }},
      {"fused attention, causal",
       [&](const Tensor& t) {
         return scaled_dot_product_attention(t.reshape({2, 1, 3, 4}), keys.reshape({2, 1, 5, 4}),
                                             t.reshape({2, 1, 3, 4}).slice(2, 0, 1).broadcast_to({2, 1, 5, 4}), {},
                                             true)
             .output;
       }},
      {"layer norm", [&](const Tensor& t) { return layer_norm(t.tanh(), w.slice(0, 0, 1).reshape({4}), {}, 1e-5); }},
      {"cross-entropy", [&](const Tensor& t) { return cross_entropy(linear(t, w), targets); }},
      {"gelu", [&](const Tensor& t) { return linear_gelu(t, w).gelu(GeluApproximation::Tanh); }},
  };
  for (auto& [name, f] : fs)
    for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
      KernelGuard guard(k);
      EXPECT_TRUE(all_close(jvp(f, x, v), jacobian_times(f, x, v), 1e-12)) << name << ", " << kernels_name(k);
    }
}

TEST(Jvp, SeveralInputsInOnePassGivesTheOutputAndTheSumOfTheirTangents) {
  Generator gen(42);
  Tensor q = randn({2, 2, 3, 4}, gen, kFloat64), k = randn({2, 2, 5, 4}, gen, kFloat64),
         v = randn({2, 2, 5, 3}, gen, kFloat64);
  Tensor dq = randn(q.shape(), gen, kFloat64), dk = randn(k.shape(), gen, kFloat64);
  Tensor mask = key_padding_mask({5, 3}, 5);
  auto f = [&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], mask).output; };
  JvpResult r = jvp(f, {q, k, v}, {dq, dk, Tensor()});
  EXPECT_TRUE(all_close(r.output, f({q, k, v}), 0.0));
  EXPECT_FALSE(r.output.requires_grad());
  // Linearity: the tangent for (dq, dk) is the tangent for dq plus the one for dk, each
  // against the Jacobian that reverse mode builds.
  Tensor along_q = jacobian_times([&](const Tensor& t) { return f({t, k, v}); }, q, dq);
  Tensor along_k = jacobian_times([&](const Tensor& t) { return f({q, t, v}); }, k, dk);
  EXPECT_TRUE(all_close(r.tangent, along_q + along_k, 1e-12));
  // A whole GPT's loss along a direction of its parameters, against its gradient: J v = g . v.
  nn::GPT model(small_gpt(nn::NormKind::Layer), gen);
  model.to(kFloat64);
  Tensor ids = from_vector<std::int64_t>({1, 4, 0, 2, 3, 3}, {2, 3});
  std::vector<Tensor> params = model.parameters(), directions;
  for (const Tensor& p : params) directions.push_back(randn(p.shape(), gen, kFloat64));
  double along = 0.0;
  {
    fwad::DualLevel level;
    for (std::size_t i = 0; i < params.size(); ++i) fwad::set_tangent(params[i], directions[i]);
    along = fwad::tangent(model.loss(ids, ids)).item();
  }
  std::vector<Tensor> g = grad({model.loss(ids, ids)}, params);
  double expected = 0.0;
  for (std::size_t i = 0; i < params.size(); ++i) expected += (g[i] * directions[i]).sum().item();
  EXPECT_NEAR(along, expected, 1e-12 * std::max(1.0, std::fabs(expected)));
}

// --- forward-over-reverse against reverse-over-reverse ------------------------------------------

TEST(HvpForwardOverReverse, EqualsReverseOverReverse) {
  Generator gen(43);
  Tensor x = randn({2, 3, 4}, gen, kFloat64), v = randn({2, 3, 4}, gen, kFloat64);
  Tensor w = randn({4, 4}, gen, kFloat64);
  Tensor targets = from_vector<std::int64_t>({1, 0, 3, -100, 2, 2}, {2, 3});
  std::vector<std::pair<std::string, FunctionOfTensor>> fs = {
      {"softmax, exp, div, sqrt",
       [&](const Tensor& t) { return (t.softmax(-1) * t.exp() / (t * t + 1.0).sqrt()).sum(); }},
      {"attention, causal",
       [&](const Tensor& t) {
         Tensor q = t.reshape({2, 1, 3, 4});
         return scaled_dot_product_attention(q, q, q.tanh(), {}, true).output.pow(2.0).sum();
       }},
      {"layer norm and cross-entropy",
       [&](const Tensor& t) { return cross_entropy(linear(layer_norm(t, {}, {}, 1e-5), w), targets); }},
      {"log_softmax, max, sigmoid", [&](const Tensor& t) { return (t.log_softmax(1) * t.sigmoid()).max(); }},
  };
  for (auto& [name, f] : fs)
    for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
      KernelGuard guard(k);
      EXPECT_TRUE(all_close(hvp(f, x, v), hvp_reverse_over_reverse(f, x, v), 1e-12)) << name << ", " << kernels_name(k);
    }
}

// H v of L = sum(f(inputs) * g) in all the inputs jointly, by forward over reverse (the tangents of
// one backward pass, the ops' DualBackwardFn) and by reverse over reverse (ag::grad twice).
::testing::AssertionResult hvp_both_ways(const TensorFunction& f, const std::vector<Tensor>& inputs,
                                         std::uint64_t seed) {
  Generator gen(seed);
  auto [leaves, v] = test::leaves_and_directions(inputs, gen);
  Tensor out = f(leaves);
  Tensor g = randn(out.shape(), gen, kFloat64);
  std::vector<Tensor> first = grad({(out * g).sum()}, leaves, {}, {.create_graph = true});
  std::vector<Tensor> moving, directions;  // a gradient that is constant (a bias's) has no second derivative
  for (std::size_t i = 0; i < first.size(); ++i)
    if (first[i].requires_grad()) {
      moving.push_back(first[i]);
      directions.push_back(v[i]);
    }
  std::vector<Tensor> expected(leaves.size());
  if (!moving.empty()) expected = grad(moving, leaves, directions, {.allow_unused = true});
  fwad::DualLevel level;
  std::vector<Tensor> duals;
  for (std::size_t i = 0; i < leaves.size(); ++i) duals.push_back(fwad::make_dual(leaves[i], v[i]));
  std::vector<Tensor> got = grad({(f(duals) * g).sum()}, leaves);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    Tensor t = fwad::tangent(got[i]);
    Tensor want = expected[i].defined() ? expected[i] : zeros_like(leaves[i]);
    if (::testing::AssertionResult r = all_close(t.defined() ? t : zeros_like(leaves[i]), want, 1e-12); !r)
      return r << " (input " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(HvpForwardOverReverse, EveryFusedOpEqualsReverseOverReverse) {
  Generator gen(45);
  std::vector<test::FusedOpCase> cases = test::fused_op_cases(gen);
  std::uint64_t seed = 1;
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    for (const auto& c : cases) EXPECT_TRUE(hvp_both_ways(c.f, c.inputs, seed++)) << c.name << ", " << kernels_name(k);
  }
}

TEST(HvpForwardOverReverse, AttentionInEveryLayoutAndMaskCase) {
  Generator gen(46);
  std::int64_t b = 2, h = 2, tq = 3, tk = 4, d = 3, dv = 2;
  Tensor q = uniform_leaf({b, h, tq, d}, gen), k = uniform_leaf({b, h, tk, d}, gen),
         v = uniform_leaf({b, h, tk, dv}, gen);
  Tensor padding = key_padding_mask({4, 2}, tk);
  Tensor big_q = uniform_leaf({1, 2, 70, 3}, gen), big_k = uniform_leaf({1, 2, 75, 3}, gen),
         big_v = uniform_leaf({1, 2, 75, 4}, gen);  // two query blocks
  std::uint64_t seed = 100;
  for (Kernels kind : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(kind);
    for (Tensor mask : {Tensor(), padding})
      for (bool causal : {false, true}) {
        EXPECT_TRUE(hvp_both_ways(
            [&](const std::vector<Tensor>& in) {
              return scaled_dot_product_attention(in[0], in[1], in[2], mask, causal).output;
            },
            {q, k, v}, seed++))
            << kernels_name(kind) << " bhtd, causal " << causal << ", mask " << mask.defined();
        EXPECT_TRUE(hvp_both_ways(
            [&](const std::vector<Tensor>& in) {
              return scaled_dot_product_attention_bthd(in[0].transpose(1, 2), in[1].transpose(1, 2),
                                                       in[2].transpose(1, 2), mask, causal)
                  .output;
            },
            {q, k, v}, seed++))
            << kernels_name(kind) << " bthd, causal " << causal << ", mask " << mask.defined();
        EXPECT_TRUE(hvp_both_ways(
            [&](const std::vector<Tensor>& in) {
              return scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), causal).output.pow(2.0);
            },
            {big_q, big_k, big_v}, seed++))
            << kernels_name(kind) << " two query blocks, causal " << causal;
      }
    Tensor qkv = uniform_leaf({2, 3, 3 * h * d}, gen);
    Tensor self_padding = key_padding_mask({3, 2}, 3);
    for (bool causal : {false, true})
      EXPECT_TRUE(hvp_both_ways(
          [&](const std::vector<Tensor>& in) {
            return scaled_dot_product_attention_packed(in[0], h, self_padding, causal).output;
          },
          {qkv}, seed++))
          << kernels_name(kind) << " packed, causal " << causal;
    EXPECT_TRUE(hvp_both_ways(
        [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[0], in[0]).output; }, {q},
        seed++))
        << kernels_name(kind) << " the same tensor three times";
  }
}

// A whole GPT's H v over all its parameters: the tangents of one backward pass against the
// gradient of <gradient, v> (reverse over reverse), by both kernel routes.
TEST(HvpForwardOverReverse, AWholeGptEqualsReverseOverReverse) {
  Generator gen(44);
  Tensor ids = from_vector<std::int64_t>({1, 4, 0, 2, 3, 3, 1, 0}, {2, 4});
  Tensor targets = from_vector<std::int64_t>({4, 0, 2, 1, 3, 0, -100, 2}, {2, 4});
  for (nn::NormKind norm : {nn::NormKind::Layer, nn::NormKind::Rms})
    for (Kernels kind : {Kernels::Fast, Kernels::Reference}) {
      KernelGuard guard(kind);
      nn::GPT model(small_gpt(norm), gen);
      model.to(kFloat64);
      std::vector<Tensor> params = model.parameters(), v;
      for (const Tensor& p : params) v.push_back(randn(p.shape(), gen, kFloat64));
      std::vector<Tensor> g = grad({model.loss(ids, targets)}, params, {}, {.create_graph = true});
      std::vector<Tensor> expected = grad(g, params, v);
      fwad::DualLevel level;
      for (std::size_t i = 0; i < params.size(); ++i) fwad::set_tangent(params[i], v[i]);
      std::vector<Tensor> dual = grad({model.loss(ids, targets)}, params);
      for (std::size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(all_close(fwad::tangent(dual[i]), expected[i], 1e-12))
            << "parameter " << i << ", " << nn::norm_name(norm) << ", " << kernels_name(kind);
    }
}

// ag::hvp over a model's parameters: the same products as reverse over reverse, the parameters
// left as they were, zeros for a parameter the loss does not reach, and bad calls refused.
TEST(HvpForwardOverReverse, OverAModelsParametersLeavesThemAsTheyWere) {
  Generator gen(45);
  Tensor ids = from_vector<std::int64_t>({1, 4, 0, 2, 3, 3}, {2, 3});
  Tensor targets = from_vector<std::int64_t>({4, 0, 2, 1, 3, 0}, {2, 3});
  nn::GPT model(small_gpt(nn::NormKind::Layer), gen);
  model.to(kFloat64);
  std::vector<Tensor> params = model.parameters(), v, before;
  for (const Tensor& p : params) v.push_back(randn(p.shape(), gen, kFloat64)), before.push_back(p.detach().clone());
  Tensor unused = randn({3}, gen, kFloat64).requires_grad_();
  std::vector<Tensor> with_unused = params, v_with_unused = v;
  with_unused.push_back(unused), v_with_unused.push_back(ones({3}, kFloat64));

  std::vector<Tensor> hv = hvp([&] { return model.loss(ids, targets); }, with_unused, v_with_unused);
  std::vector<Tensor> g = grad({model.loss(ids, targets)}, params, {}, {.create_graph = true});
  std::vector<Tensor> expected = grad(g, params, v);
  ASSERT_EQ(hv.size(), params.size() + 1);
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(all_close(hv[i], expected[i], 1e-12)) << "parameter " << i;
    EXPECT_FALSE(hv[i].requires_grad()) << "parameter " << i;
    EXPECT_TRUE(all_close(params[i], before[i], 0.0)) << "parameter " << i << " moved";
    EXPECT_FALSE(params[i].grad().defined()) << "parameter " << i << " was given a gradient";
  }
  EXPECT_TRUE(all_close(hv.back(), zeros({3}, kFloat64), 0.0)) << "a parameter the loss does not reach";
  EXPECT_FALSE(fwad::is_active()) << "the level hvp opened is still live";

  auto loss = [&] { return model.loss(ids, targets); };
  std::vector<Tensor> short_v(v.begin(), v.end() - 1), wrong_shape = v;
  wrong_shape[0] = zeros({7}, kFloat64);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { hvp(loss, params, short_v); },
                                                 "hvp: got " + std::to_string(params.size()) + " parameters"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { hvp(loss, params, wrong_shape); },
                                                 "hvp: direction 0 is float64 with shape [7]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { hvp([&] { return model.forward(ids); }, params, v); },
                                                 "hvp: loss() must return one element"));
  Tensor frozen = params[0].detach();
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { hvp(loss, {frozen}, {v[0]}); }, "hvp: parameter 0 (shape"));
  fwad::DualLevel live;
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { hvp(loss, params, v); }, "levels do not nest"));
}

}  // namespace
}  // namespace ag
