// Checks autograd/format.cpp: NumPy-style printing, written out by hand.
#include <sstream>

#include "../test_util.h"

// Outside namespace ag, what a program's main() sees: a shape prints through fmt, and a tensor
// through operator<< (found by argument-dependent lookup, since Tensor is ag's own type).
std::string printed_outside_ag(const ag::Shape& shape) { return fmt::format("{}", shape); }
std::string streamed_outside_ag(const ag::Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

namespace ag {
namespace {

TEST(Format, MatrixAlignsColumns) {
  Tensor t = tensor({0.5, -1.25, 2, 3}, {2, 2});
  EXPECT_EQ(fmt::format("{}", t),
            "tensor([[ 0.5000, -1.2500],\n"
            "        [ 2.0000,  3.0000]], shape=[2, 2], dtype=float32)");
}

TEST(Format, ScalarsIntegersAndBools) {
  EXPECT_EQ(fmt::format("{}", scalar(1.5, kFloat64)), "tensor(1.5000, shape=[], dtype=float64)");
  EXPECT_EQ(fmt::format("{}", arange(3)), "tensor([0, 1, 2], shape=[3], dtype=int64)");
  EXPECT_EQ(fmt::format("{}", from_vector<bool>({true, false}, {2})), "tensor([ true, false], shape=[2], dtype=bool)");
  EXPECT_EQ(fmt::format("{}", zeros({0})), "tensor([], shape=[0], dtype=float32)");
}

TEST(Format, ThreeDimsSeparateBlocksWithABlankLine) {
  EXPECT_EQ(fmt::format("{}", arange(8).reshape({2, 2, 2})),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]], shape=[2, 2, 2], dtype=int64)");
}

TEST(Format, LargeTensorsElideTheMiddle) {
  std::string s = fmt::format("{}", arange(2000));
  EXPECT_EQ(s, "tensor([   0,    1,    2, ..., 1997, 1998, 1999], shape=[2000], dtype=int64)");
  std::string m = fmt::format("{}", zeros({100, 100}));
  EXPECT_NE(m.find("...,\n"), std::string::npos);  // whole rows elided too
  EXPECT_NE(m.find("shape=[100, 100]"), std::string::npos);
}

TEST(Format, ScientificWhenFixedWouldHideValues) {
  EXPECT_EQ(fmt::format("{}", tensor({1e-6, 1.0}, {2}, kFloat64)),
            "tensor([1.0000e-06, 1.0000e+00], shape=[2], dtype=float64)");
  EXPECT_EQ(fmt::format("{}", tensor({INFINITY, -INFINITY, NAN}, {3}, kFloat64)),
            "tensor([ inf, -inf,  nan], shape=[3], dtype=float64)");
}

TEST(Format, ShowsAutogradState) {
  Tensor x = ones({1}).requires_grad_();
  EXPECT_EQ(fmt::format("{}", x), "tensor([1.0000], shape=[1], dtype=float32, requires_grad=true)");
  EXPECT_EQ(fmt::format("{}", x * 2.0), "tensor([2.0000], shape=[1], dtype=float32, grad_fn=mul)");
  std::ostringstream os;
  os << Tensor();
  EXPECT_EQ(os.str(), "tensor(undefined)");
}

TEST(Format, ShapesPrintAsInEveryMessage) {
  Shape s{2, 3};
  EXPECT_EQ(fmt::format("{}", s), "[2, 3]");
  EXPECT_EQ(fmt::format("{}", Shape{}), "[]");
  EXPECT_EQ(fmt::format("{}", zeros({4, 1, 5}).shape()), shape_str({4, 1, 5}));
  EXPECT_EQ(printed_outside_ag({7}), "[7]");
  EXPECT_EQ(streamed_outside_ag(zeros({2})), to_string(zeros({2})));
}

}  // namespace
}  // namespace ag
