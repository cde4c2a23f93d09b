// Anomaly mode (autograd/debug/anomaly.h) and the DOT picture of a graph (autograd/debug/graphviz.h).
#include "autograd/debug/anomaly.h"

#include <cmath>
#include <limits>
#include <string>

#include "../test_util.h"
#include "autograd/debug/graphviz.h"

namespace ag {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor leaf(const std::vector<double>& values, const Shape& shape, DType dtype = kFloat32) {
  Tensor t = tensor(values, shape, dtype);
  t.requires_grad_();
  return t;
}

// The AnomalyError `call` throws, or "" when it throws nothing.
template <class F>
std::string anomaly_message(F&& call) {
  try {
    call();
  } catch (const AnomalyError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Anomaly, OffByDefaultAndNaNFlowsOn) {
  EXPECT_FALSE(is_anomaly_enabled());
  Tensor y = leaf({-1, 4}, {2}).sqrt();
  EXPECT_TRUE(std::isnan(y.to(kFloat64).data_ptr<double>()[0]));
}

TEST(Anomaly, GuardTurnsItOnForItsScopeOnly) {
  {
    DetectAnomalyGuard guard;
    EXPECT_TRUE(is_anomaly_enabled());
    {
      DetectAnomalyGuard off(false);
      EXPECT_FALSE(is_anomaly_enabled());
    }
    EXPECT_TRUE(is_anomaly_enabled());
  }
  EXPECT_FALSE(is_anomaly_enabled());
}

TEST(Anomaly, ForwardNaNNamesTheOpElementAndShapes) {
  DetectAnomalyGuard guard;
  Tensor x = leaf({4, 9, -1, 16, 1, 1}, {2, 3});
  std::string m = anomaly_message([&] { (void)x.sqrt(); });
  EXPECT_TRUE(contains(m, "anomaly: sqrt (forward) produced NaN at element 2 of its output (float32 [2, 3])")) << m;
  EXPECT_TRUE(contains(m, "every input was free of NaN")) << m;
  EXPECT_TRUE(contains(m, "Inputs: float32 [2, 3]")) << m;
}

TEST(Anomaly, ForwardInfinityFromFiniteInputsIsAnAnomaly) {
  DetectAnomalyGuard guard;
  Tensor x = leaf({1, 0, 2}, {3}, kFloat64);
  std::string m = anomaly_message([&] { (void)x.log(); });
  EXPECT_TRUE(contains(m, "log (forward) produced an infinity at element 1")) << m;
  EXPECT_TRUE(contains(m, "no input held an infinity")) << m;
}

TEST(Anomaly, CheckedWithoutGradToo) {
  DetectAnomalyGuard guard;
  NoGradGuard no_grad;
  EXPECT_TRUE(contains(anomaly_message([] { (void)tensor({-4}, {1}).sqrt(); }), "sqrt (forward) produced NaN"));
}

// -inf written by masked_fill, carried through softmax (zeros) and log_softmax (-inf again, from
// an input that already held -inf), is how masks work, not an anomaly.
TEST(Anomaly, MaskingWithMinusInfinityIsNotAnAnomaly) {
  DetectAnomalyGuard guard;
  Tensor scores = leaf({0.5, 1.0, -0.5, 2.0, 0.1, 0.3}, {2, 3});
  Tensor mask = from_vector<bool>({false, true, false, true, true, true}, {2, 3});  // row 1 fully masked
  EXPECT_EQ(anomaly_message([&] {
              Tensor filled = masked_fill(scores, mask, -kInf);
              Tensor p = softmax(filled, -1), lp = log_softmax(filled, -1);
              (p.sum() + p.sum()).backward();
            }),
            "");
}

TEST(Anomaly, BackwardNamesTheOpWhoseBackwardMadeIt) {
  DetectAnomalyGuard guard;
  Tensor x = leaf({4, 0, 1}, {3});
  Tensor y = x.sqrt() * 3.0;  // finite forward; d sqrt(x)/dx = 1 / (2 sqrt x) is infinite at 0
  std::string m = anomaly_message([&] { y.sum().backward(); });
  // Not the division inside sqrt's backward formula: that runs as part of sqrt's backward.
  EXPECT_TRUE(contains(m,
                       "anomaly: sqrt (backward) returned an infinity at element 1 of the gradient for its input 0 "
                       "(float32 [3]); the gradient of its output (float32 [3]) was finite"))
      << m;
  EXPECT_TRUE(contains(m, "ag::sqrt")) << m;  // the recorded call stack passes through ag::sqrt
  // The message lists the failing op's inputs as they were recorded (here sqrt's one input).
  Tensor a = leaf({1, 0}, {2}), b = leaf({2, 3, 4}, {3, 1});
  Tensor z = (a.sqrt() * b).sum();
  std::string both = anomaly_message([&] { z.backward(); });
  EXPECT_TRUE(contains(both, "sqrt (backward)")) << both;
  EXPECT_TRUE(contains(both, "Inputs: float32 [2].")) << both;
}

TEST(Anomaly, BackwardOfAGraphRecordedWithoutAnomalyModeStillChecks) {
  Tensor x = leaf({4, 0}, {2});
  Tensor y = x.sqrt().sum();
  DetectAnomalyGuard guard;
  std::string m = anomaly_message([&] { y.backward(); });
  EXPECT_TRUE(contains(m, "sqrt (backward) returned an infinity")) << m;
  EXPECT_TRUE(contains(m, "not known: the op was recorded while anomaly mode was off")) << m;
}

// The norms kept in anomaly mode, against hand-computed values: for y = sum(x W),
// dL/d(xW) = ones [2, 4] (norm sqrt 8), dL/dsum = 1.
TEST(Anomaly, KeepsTheGradientNormAtEachOp) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3}), w = leaf(std::vector<double>(12, 1.0), {3, 4});
  Tensor prod = x.matmul(w), y = prod.sum();
  EXPECT_TRUE(std::isnan(prod.grad_fn()->grad_norm()));
  {
    DetectAnomalyGuard guard;
    y.backward();
  }
  EXPECT_NEAR(y.grad_fn()->grad_norm(), 1.0, 1e-12);
  EXPECT_NEAR(prod.grad_fn()->grad_norm(), std::sqrt(8.0), 1e-6);
}

// ---------------------------------------------------------------------------------------------
// to_dot

int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(ToDot, DrawsOpsLeavesShapesArrowsAndGradientNorms) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3}), w = leaf(std::vector<double>(12, 1.0), {3, 4});
  Tensor y = x.matmul(w).sum();
  {
    DetectAnomalyGuard guard;
    y.backward();
  }
  std::string dot = to_dot(y, {{"x", x}, {"w", w}});
  EXPECT_EQ(dot.rfind("digraph autograd {", 0), 0u);
  EXPECT_TRUE(contains(dot, "label=\"sum\\n[] float32\\n|grad| = 1\"")) << dot;
  EXPECT_TRUE(contains(dot, "label=\"matmul\\n[2, 4] float32\\n|grad| = 2.828\"")) << dot;
  // dx = ones[2, 4] W^T: every entry 4, norm sqrt(6 * 16) = 9.798;
  // dW = x^T ones[2, 4]: rows 5, 7, 9 (column sums of x) four times, norm sqrt(4 * 155) = 24.9.
  EXPECT_TRUE(contains(dot, "label=\"x\\n[2, 3] float32\\n|grad| = 9.798\"")) << dot;
  EXPECT_TRUE(contains(dot, "label=\"w\\n[3, 4] float32\\n|grad| = 24.9\"")) << dot;
  EXPECT_EQ(count(dot, " -> "), 3) << dot;  // x -> matmul, w -> matmul, matmul -> sum
  EXPECT_EQ(count(dot, "shape=box"), 2);
  EXPECT_EQ(count(dot, "shape=ellipse"), 2);
}

TEST(ToDot, WithoutAnomalyModeOpsHaveNoNormAndUnnamedLeavesShowTheirShape) {
  Tensor x = leaf({1, 2, 3}, {3}, kFloat64);
  Tensor y = (x * x).sum();
  std::string before = to_dot(y);
  EXPECT_EQ(count(before, "|grad|"), 0) << before;
  EXPECT_TRUE(contains(before, "label=\"[3] float64\"")) << before;
  y.backward();
  std::string after = to_dot(y);
  EXPECT_EQ(count(after, "|grad|"), 1) << after;  // the leaf's: d/dx sum x^2 = 2x, norm 2 sqrt 14 = 7.483
  EXPECT_TRUE(contains(after, "|grad| = 7.483")) << after;
  EXPECT_EQ(count(after, " -> "), 3) << after;  // x -> mul twice (both inputs), mul -> sum
}

TEST(ToDot, ALeafAndAConstantAndADeepChain) {
  EXPECT_EQ(count(to_dot(leaf({1}, {1})), "shape=ellipse"), 1);
  EXPECT_EQ(count(to_dot(tensor({1}, {1})), "shape="), 0);
  Tensor x = leaf({0.5}, {1}, kFloat64), y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;  // deep enough to overflow a recursive walk
  std::string dot = to_dot(y);
  EXPECT_EQ(count(dot, "shape=box"), 20000);
  EXPECT_EQ(count(dot, " -> "), 20000);
}

}  // namespace
}  // namespace ag
