// Checks autograd/function.h (ag::Function), record's refusal of an output that already has a
// history, and gradcheck's report naming parameters.
#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

// y = x * w * factor (broadcasting w), with a hand-written backward and forward-mode rule.
struct Scale : Function<Scale> {
  static constexpr const char* name = "scale";  // a member or, in a local class, a function name()
  static Tensor forward(FunctionContext& ctx, const Tensor& x, const Tensor& w, double factor) {
    ctx.save_for_backward({x, w});
    ctx.saved_data["factor"] = factor;
    ctx.saved_data["grad_mode_in_forward"] = is_grad_enabled() ? 1 : 0;
    return x * w * factor;
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, const Tensor& dy) {
    const Tensor &x = ctx.saved()[0], &w = ctx.saved()[1];
    double f = ctx.saved_data.at("factor");
    calls_wanting_w += ctx.needs_input_grad(1) ? 1 : 0;
    return {dy * w * f, ctx.needs_input_grad(1) ? sum_to(dy * x * f, w.shape()) : Tensor()};
  }
  static Tensor jvp(FunctionContext& ctx, const std::vector<Tensor>& t) {
    const Tensor &x = ctx.saved()[0], &w = ctx.saved()[1];
    double f = ctx.saved_data.at("factor");
    Tensor out = zeros_like(x * w);
    if (t[0].defined()) out = out + t[0] * w * f;
    if (t[1].defined()) out = out + x * t[1] * f;
    return out;
  }
  static inline int calls_wanting_w = 0;
};

TEST(Function, ValuesGradientsAndTangentsOfACustomOp) {
  Generator gen(3);
  Tensor x = test::normal_leaf({3, 5}, gen), w = test::normal_leaf({1, 5}, gen);
  Tensor y = Scale::apply(x, w, 2.5);
  // Values by hand: y = x * w * 2.5.
  EXPECT_TRUE(test::all_close(y, (x.detach() * w.detach() * 2.5).to_vector<double>(), 1e-15));
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "scale");
  // Finite differences, both modes, on odd shapes with w broadcast over the rows.
  auto f = [](const std::vector<Tensor>& in) { return Scale::apply(in[0], in[1], 2.5); };
  GradcheckResult r = gradcheck(f, {x, w}, {.check_forward_ad = true});
  EXPECT_TRUE(r.passed) << r.report;
}

TEST(Function, ForwardRecordsNothingAndBackwardIsAskedOnlyForWhatIsWanted) {
  Generator gen(4);
  Tensor x = test::normal_leaf({2, 3}, gen);
  Tensor w = randn({2, 3}, gen, kFloat64);  // data: no gradient wanted
  Scale::calls_wanting_w = 0;
  Tensor y = Scale::apply(x, w, 1.0);
  y.sum().backward();
  EXPECT_EQ(Scale::calls_wanting_w, 0);
  EXPECT_TRUE(test::all_close(x.grad(), w.to_vector<double>(), 0));
  // Grad mode was off inside forward, though on around apply.
  struct Probe : Function<Probe> {
    static const char* name() { return "probe"; }
    static Tensor forward(FunctionContext&, const Tensor& x) {
      Tensor y = x * 2.0;
      EXPECT_FALSE(is_grad_enabled());
      EXPECT_FALSE(y.grad_fn());
      return y;
    }
    static std::vector<Tensor> backward(FunctionContext&, const Tensor& dy) { return {dy * 2.0}; }
  };
  Tensor z = Probe::apply(x);
  EXPECT_EQ(z.grad_fn()->name(), "probe");
}

TEST(Function, ASavedTensorWrittenInPlaceMakesBackwardRefuse) {
  Generator gen(5);
  Tensor x = test::normal_leaf({4}, gen), w = randn({4}, gen, kFloat64);
  Tensor y = Scale::apply(x, w, 1.0);
  w.mul_(3.0);  // after the forward saved it
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { y.sum().backward(); }, "of 'scale'"));
}

TEST(Function, ABackwardWithTheWrongGradientsIsRefusedByName) {
  struct TooFew : Function<TooFew> {
    static const char* name() { return "too_few"; }
    static Tensor forward(FunctionContext&, const Tensor& a, const Tensor& b) { return a + b; }
    static std::vector<Tensor> backward(FunctionContext&, const Tensor& dy) { return {dy}; }
  };
  struct WrongShape : Function<WrongShape> {
    static const char* name() { return "wrong_shape"; }
    static Tensor forward(FunctionContext&, const Tensor& a) { return a.sum(); }
    static std::vector<Tensor> backward(FunctionContext&, const Tensor& dy) { return {dy}; }
  };
  Tensor a = ones({2, 3}, kFloat64).requires_grad_(), b = ones({2, 3}, kFloat64).requires_grad_();
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { TooFew::apply(a, b).sum().backward(); },
      "too_few: Function: backward returned 1 gradients for 2 tensor arguments"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { WrongShape::apply(a).backward(); },
                                                 "wrong_shape: Function: backward's gradient 0 has shape [], its "
                                                 "input has shape [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { TooFew::apply(a, Tensor()); },
                                                 "too_few: Function: tensor argument 1 is undefined"));
  // Forward mode without a jvp is refused by record, naming the op.
  fwad::DualLevel level;
  Tensor dual = fwad::make_dual(a.detach(), ones({2, 3}, kFloat64));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { WrongShape::apply(dual); },
                                             "wrong_shape: has no forward-mode rule, and a tangent reached it"));
}

TEST(Record, RefusesAnOutputThatAlreadyHasAHistory) {
  Tensor x = ones({3}, kFloat64).requires_grad_();
  auto backward = [](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy}; };
  Tensor computed = x * 2.0;  // grad mode on: it has a node already
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { record("double", computed, {x}, backward); },
      "double: record: the output already has a history (it was computed by 'mul' with grad mode on)"));
  EXPECT_EQ(computed.grad_fn()->name(), "mul");  // and it keeps it
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { record("same", x, {x}, backward); },
                                                 "same: record: the output is a leaf that requires grad"));
  Tensor fresh;
  {
    NoGradGuard no_grad;
    fresh = x * 2.0;
  }
  EXPECT_EQ(record("double", fresh, {x}, backward).grad_fn()->name(), "double");
}

TEST(Gradcheck, NamedTensorsAreReportedByName) {
  struct Doubled : Function<Doubled> {  // a wrong backward: twice the true gradient
    static const char* name() { return "doubled"; }
    static Tensor forward(FunctionContext&, const Tensor& a) { return a * 3.0; }
    static std::vector<Tensor> backward(FunctionContext&, const Tensor& dy) { return {dy * 6.0}; }
  };
  Generator gen(6);
  Tensor w = test::normal_leaf({2, 3}, gen), b = test::normal_leaf({3}, gen);
  GradcheckResult r =
      gradcheck_in_place([&] { return Doubled::apply(w) + b; }, {{"layer.weight", w}, {"layer.bias", b}});
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.report.find("gradcheck: parameter 'layer.weight' (shape [2, 3]), element 0 (index [0, 0])"),
            std::string::npos)
      << r.report;
  EXPECT_EQ(r.report.find("layer.bias"), std::string::npos) << r.report;  // its gradient is right
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { gradcheck_in_place([&] { return w * 1.0; }, {{"w", w}, {"f32", ones({2})}}); },
      "gradcheck: parameter 'f32' must be a float64 leaf that requires grad"));
}

}  // namespace
}  // namespace ag
