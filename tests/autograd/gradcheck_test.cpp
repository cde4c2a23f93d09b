// Checks autograd/gradcheck.cpp: it passes right gradients, and it catches wrong ones and says
// where.
#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

// y = x^2 elementwise, with a backward that is deliberately wrong (3x instead of 2x) on one
// element: the kind of bug gradcheck exists to catch.
Tensor square_with_bug(const Tensor& x, std::int64_t bad_element) {
  Tensor y = x.detach() * x.detach();
  return record("square_with_bug", y, {x}, [x = x.detach(), bad_element](const Tensor& dy, const std::vector<bool>&) {
    Tensor dx = dy * x * 2.0;
    dx.mutable_data_ptr<double>()[bad_element] =
        dy.data_ptr<double>()[bad_element] * x.data_ptr<double>()[bad_element] * 3.0;
    return std::vector<Tensor>{dx};
  });
}

TEST(Gradcheck, PassesACorrectFunction) {
  Generator gen(1);
  Tensor x = test::normal_leaf({3, 4}, gen);
  Tensor w = test::normal_leaf({4, 2}, gen);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return in[0].matmul(in[1]).tanh(); }, {x, w});
  EXPECT_TRUE(r.passed);
  EXPECT_TRUE(r.report.empty());
}

TEST(Gradcheck, CatchesAWrongGradientAndSaysWhere) {
  Tensor x = tensor({0.5, 1.0, 1.5, 2.0, 2.5, 3.0}, {2, 3}, kFloat64).requires_grad_();
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return square_with_bug(in[0], 4); }, {x});
  EXPECT_FALSE(r);
  // Element 4 is index [1, 1] with x = 2.5: the report names it; the other elements pass.
  EXPECT_NE(r.report.find("input 0 (shape [2, 3]), element 4 (index [1, 1])"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("analytic"), std::string::npos);
  EXPECT_NE(r.report.find("numeric"), std::string::npos);
  EXPECT_EQ(r.report.find("element 3"), std::string::npos) << r.report;
  // And as a GoogleTest assertion, the report becomes the failure message.
  ::testing::AssertionResult a =
      testing::gradcheck([](const std::vector<Tensor>& in) { return square_with_bug(in[0], 4); }, {x});
  EXPECT_FALSE(a);
  EXPECT_NE(std::string(a.message()).find("index [1, 1]"), std::string::npos);
}

TEST(Gradcheck, ReportsTheAnalyticAndNumericValues) {
  // L = g x^2 with g the output weight gradcheck draws from its seed (0). At x = 2.5 the bug
  // gives an analytic 3 * 2.5 * g, while the truth, and the central difference, is 2 * 2.5 * g.
  Tensor x = tensor({2.5}, {1}, kFloat64).requires_grad_();
  Generator g_gen(0);
  double g = randn({1}, g_gen, kFloat64).item();
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return square_with_bug(in[0], 0); }, {x});
  EXPECT_NE(r.report.find(fmt::format("analytic {:.8g}", 7.5 * g)), std::string::npos) << r.report;
  auto at = r.report.find("numeric ");
  ASSERT_NE(at, std::string::npos) << r.report;
  EXPECT_NEAR(std::stod(r.report.substr(at + 8)), 5.0 * g, 1e-6) << r.report;
}

TEST(Gradcheck, ChecksOnlyInputsThatRequireGrad) {
  Generator gen(2);
  Tensor x = test::normal_leaf({2, 2}, gen);
  Tensor c = randn({2, 2}, gen, kFloat64);  // constant: not checked, but used
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {x, c}));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { gradcheck([](const std::vector<Tensor>& in) { return in[0]; }, {c}); },
                                         "gradcheck: none of the 1 inputs requires grad"));
}

TEST(Gradcheck, Float32InputsAreCheckedInFloat64) {
  Tensor x = tensor({0.3, -0.7, 1.1}, {3}, kFloat32).requires_grad_();
  std::vector<DType> seen;
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        seen.push_back(in[0].dtype());
        return in[0].exp();
      },
      {x}));
  for (DType d : seen) EXPECT_EQ(d, kFloat64);
  EXPECT_FALSE(x.grad().defined());  // the caller's tensor is left alone
}

TEST(Gradcheck, InPlaceChecksTensorsTheFunctionReachesItself) {
  Generator gen(3);
  Tensor w = test::normal_leaf({3, 2}, gen);
  Tensor x = randn({4, 3}, gen, kFloat64);
  EXPECT_TRUE(gradcheck_in_place([&] { return x.matmul(w).tanh(); }, {w}));
  EXPECT_TRUE(w.grad().defined());  // left holding the analytic gradient
  // A wrong backward is caught here too, and tensors are numbered by their place in the list.
  Tensor v = tensor({0.5, 1.5}, {2}, kFloat64).requires_grad_();
  GradcheckResult r = gradcheck_in_place([&] { return square_with_bug(v, 1); }, {w, v});
  EXPECT_FALSE(r);
  EXPECT_NE(r.report.find("input 1 (shape [2]), element 1"), std::string::npos) << r.report;
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { gradcheck_in_place([&] { return x; }, {x}); },
                                                 "gradcheck: input 0 must be a float64 leaf that requires grad"));
}

TEST(Gradcheck, ReportsInputsByTheirPositionInTheList) {
  // Input 0 is a constant; the wrong gradient belongs to input 1 and is reported as such.
  Tensor c = ones({2}, kFloat64);
  Tensor v = tensor({0.5, 1.5}, {2}, kFloat64).requires_grad_();
  GradcheckResult r =
      gradcheck([](const std::vector<Tensor>& in) { return square_with_bug(in[1], 0) * in[0]; }, {c, v});
  EXPECT_NE(r.report.find("input 1 (shape [2]), element 0"), std::string::npos) << r.report;
}

TEST(Gradcheck, ZeroGradientIsCheckedToo) {
  // f ignores x: the analytic gradient is absent (zero), and so is the numeric one.
  Tensor x = ones({2}, kFloat64).requires_grad_();
  Tensor y = ones({2}, kFloat64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[1] * 2.0; }, {x, y}));
}

}  // namespace
}  // namespace ag
