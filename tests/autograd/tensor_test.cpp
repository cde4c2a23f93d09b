// Checks autograd/tensor.cpp: construction, dtypes, element access, conversion.
#include "../test_util.h"

#include <cstdint>
#include <limits>
#include <string>

namespace ag {
namespace {

using test::all_close;
using test::throws_with;

TEST(Tensor, FactoriesFillShapeAndDtype) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.dtype(), kFloat32);  // the default
  EXPECT_TRUE(all_close(z, std::vector<double>(6, 0.0), 0));
  EXPECT_TRUE(all_close(ones({4}, kFloat64), {1, 1, 1, 1}, 0));
  EXPECT_TRUE(all_close(full({2}, 2.5, kFloat64), {2.5, 2.5}, 0));
  EXPECT_EQ(full({3}, 7, kInt64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, 7, 7}));
  EXPECT_EQ(arange(4).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(all_close(arange(1, 2, 0.25, kFloat64), {1, 1.25, 1.5, 1.75}, 0));
  EXPECT_EQ(arange(5, 0, -2).to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 3, 1}));
  EXPECT_EQ(arange(0).numel(), 0);
  Tensor s = scalar(3.0, kFloat64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<double>(), 3.0);
}

TEST(Tensor, FromVectorIsRowMajor) {
  Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_EQ(t.at<float>({0, 2}), 3.0f);
  EXPECT_EQ(t.at<float>({1, 0}), 4.0f);
  EXPECT_EQ(t.at<float>({-1, -1}), 6.0f);
  EXPECT_EQ(from_vector<std::int64_t>({5, 6}, {2}).dtype(), kInt64);
  EXPECT_EQ(from_vector<bool>({true, false}, {2}).dtype(), kBool);
  EXPECT_EQ(from_vector<double>({1.5}, {}).item(), 1.5);
}

// from_vector takes the four element types and converts any other integer type to int64; a type
// that is neither does not compile (the concept Element), and neither does reading a tensor as
// one, where both used to compile and then fail to link.
template <class T>
concept MakesTensor = requires(const std::vector<T>& v) { from_vector(v, Shape{}); };
template <class T>
concept ReadsAs = requires(const Tensor& t) { t.to_vector<T>(); };
static_assert(MakesTensor<float> && MakesTensor<bool> && MakesTensor<int> && MakesTensor<std::uint8_t> &&
              MakesTensor<long long>);
static_assert(!MakesTensor<long double> && !MakesTensor<std::string>);
static_assert(ReadsAs<double> && ReadsAs<std::int64_t> && !ReadsAs<int> && !ReadsAs<float*>);

TEST(Tensor, FromVectorConvertsOtherIntegers) {
  Tensor ids = from_vector(std::vector<int>{3, -1, 7}, {3});
  EXPECT_EQ(ids.dtype(), kInt64);
  EXPECT_EQ(ids.to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, -1, 7}));
  const std::uint64_t top = std::uint64_t{1} << 63;  // one past int64's largest
  EXPECT_EQ(from_vector(std::vector<std::uint64_t>{top - 1}, {1}).item<std::int64_t>(),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { from_vector(std::vector<std::uint64_t>{0, top}, {2}); },
                                                 "from_vector: element 1, 9223372036854775808, is past int64's range"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { from_vector(std::vector<short>{1, 2}, {3}); },
                                                 "from_vector: 2 values do not fill shape [3]"));
}

TEST(Tensor, ConversionBetweenDtypes) {
  Tensor t = tensor({1.75, -2.5, 0.0}, {3}, kFloat64);
  EXPECT_EQ(t.to(kFloat32).dtype(), kFloat32);
  EXPECT_EQ(t.to(kInt64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, -2, 0}));  // truncation, as in C++
  EXPECT_EQ(t.to(kBool).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_TRUE(all_close(arange(3).to(kFloat64), {0, 1, 2}, 0));
}

TEST(Tensor, ConversionCarriesGradientBetweenFloatTypes) {
  Tensor x = tensor({1, 2}, {2}, kFloat32).requires_grad_();
  Tensor y = x.to(kFloat64) * tensor({3, 4}, {2}, kFloat64);
  y.sum().backward();
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_TRUE(all_close(x.grad(), {3, 4}, 0));
  EXPECT_FALSE(x.to(kInt64).requires_grad());  // cut from the graph
}

TEST(Tensor, CloneCopiesDetachShares) {
  Tensor x = tensor({1, 2}, {2}, kFloat64).requires_grad_();
  Tensor c = x.clone();
  EXPECT_NE(c.raw_data(), x.raw_data());
  EXPECT_TRUE(c.requires_grad());
  Tensor d = x.detach();
  EXPECT_EQ(d.raw_data(), x.raw_data());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
}

TEST(Tensor, CloneAndConversionGradcheck) {
  Generator gen(2);
  Tensor x = test::normal_leaf({2, 3}, gen);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].clone() * in[0]; }, {x}));
  // Through float32 and back: float32 rounding (~1e-7 relative) is far inside the tolerance
  // only because the step is large; the point is that the gradient arrives, cast back.
  GradcheckOptions coarse;
  coarse.eps = 1e-3;
  coarse.atol = 1e-4;
  EXPECT_TRUE(
      testing::gradcheck([](const std::vector<Tensor>& in) { return in[0].to(kFloat32).to(kFloat64); }, {x}, coarse));
}

TEST(Tensor, IntegerAndBoolNeverRequireGrad) {
  Tensor ids = arange(3);
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { ids.requires_grad_(); },
      "requires_grad_: only float32 and float64 tensors can require grad, got int64 with shape [3]"));
  Tensor mask = full({2, 2}, 1, kBool);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { mask.requires_grad_(); }, "got bool with shape [2, 2]"));
}

TEST(Tensor, AccessErrors) {
  Tensor t = zeros({2, 3});
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { t.data_ptr<double>(); },
                                                 "data_ptr: tensor has dtype float32, asked for float64"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { t.item(); }, "item: needs a tensor with one element, got shape [2, 3] (6 elements)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        t.at<float>({2, 0});
      },
      "at: index 2 is out of range for dim 0 of size 2 (shape [2, 3])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { t.at<float>({0}); },
                                                 "at: index has 1 entries but the tensor has shape [2, 3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { t.size(2); },
                                                 "size: dim 2 is out of range for a tensor with 2 dimensions"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        tensor({1, 2, 3}, {2, 2});
      },
      "tensor: 3 values do not fill shape [2, 2] (4 elements)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { zeros({2, -1}); }, "zeros: shape [2, -1] has a negative size"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        zeros({1LL << 40, 1LL << 40});
      },
      "more elements than int64 can count"));
  // A fractional start or step would be rounded into int64: refused, naming the float dtype.
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { arange(0, 1, 0.25); },
      "arange: start=0 and step=0.25 are not both whole numbers, so the int64 result cannot hold the values; pass a "
      "float dtype: arange(0, 1, 0.25, ag::kFloat32)"));
  EXPECT_TRUE(all_close(arange(-0.5, 1, 0.5, kFloat32), {-0.5, 0, 0.5}, 0));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(0, 1, 0); },
                                                 "arange: needs finite start, end and a non-zero step"));
  // A value int64 cannot hold is refused, not converted (which C++ leaves undefined): NaN, and
  // 2^63, one past the largest int64; -2^63 itself fits.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { full({2}, nan, kInt64); }, "full: value nan cannot be stored in int64 (it is not a number inside"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { tensor({1, 0x1p63}, {2}, kInt64); },
                                                 "tensor: value 9.223372036854776e+18 cannot be stored in int64"));
  EXPECT_EQ(tensor({-0x1p63}, {1}, kInt64).item<std::int64_t>(), std::numeric_limits<std::int64_t>::min());
  // arange's first values fit and its last (9e18 + 2 x 2e17 = 9.4e18) does not
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { arange(9e18, 9.5e18, 2e17, kInt64); },
                                                 "arange: value 9.4e+18 cannot be stored in int64"));
  EXPECT_EQ(arange(9e18, 9.3e18, 2e17, kInt64).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{9000000000000000000, 9200000000000000000}));
  EXPECT_TRUE(std::isnan(full({1}, nan, kFloat64).item()));  // a float holds NaN
  // and a float tensor with such a value refuses to become int64, naming the first one
  Tensor has_nan = tensor({1.5, -3, nan, 0x1p64}, {2, 2}, kFloat32);
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { has_nan.to(kInt64); }, "to: element 2 of the float32 tensor of shape [2, 2] is nan, which int64 cannot hold"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { tensor({-0x1p63, -0x1p64}, {2}, kFloat64).to(kInt64); },
      "to: element 1 of the float64 tensor of shape [2] is -1.8446744073709552e+19, which int64 cannot hold"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { full({3}, INFINITY, kFloat64).to(kInt64); },
                                                 "to: element 0 of the float64 tensor of shape [3] is inf"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { Tensor().shape(); }, "shape: called on an undefined tensor"));
}

// --- grad() and its hints -------------------------------------------------------------------

TEST(Tensor, GradOfANonLeafThrowsAndPointsToRetainGrad) {
  Tensor w = tensor({1, 2}, {2}, kFloat64).requires_grad_();
  Tensor y = w * 3.0;
  y.sum().backward();
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] { y.grad(); }, "grad: this float64 tensor of shape [2] is not a leaf: it was computed by 'mul'"));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { y.grad(); }, "call retain_grad() on it before backward()"));
  EXPECT_TRUE(all_close(w.grad(), {3, 3}, 0));  // the leaf got its gradient as usual
}

TEST(Tensor, ManualUpdateWithGradModeOnNamesNoGradGuardAndInPlace) {
  Tensor w = tensor({1, -2}, {2}, kFloat64).requires_grad_();
  (w * w).sum().backward();
  w = w - 0.1 * w.grad();  // recorded as 'sub': w is now an op's output, not a parameter
  (w * w).sum().backward();
  auto next_step = [&] { w = w - 0.1 * w.grad(); };
  EXPECT_TRUE(throws_with<std::runtime_error>(next_step, "it was computed by 'sub'"));
  EXPECT_TRUE(throws_with<std::runtime_error>(next_step, "ag::NoGradGuard no_grad; w.sub_(lr * w.grad());"));
}

TEST(Tensor, GradBeforeBackwardIsUndefinedAndUsingItSaysWhy) {
  Tensor w = tensor({1, -2}, {2}, kFloat64).requires_grad_();
  EXPECT_FALSE(w.grad().defined());  // as in PyTorch: optimizers skip such parameters
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { w - 0.1 * w.grad(); },
      "mul: got an undefined tensor (a default-constructed Tensor, or the grad() of a tensor that no backward() has "
      "reached yet: call loss.backward() first"));
}

TEST(Tensor, SubInPlaceUnderNoGradKeepsTheSameLeaf) {
  // L = sum(w^2), dL/dw = 2w, so w <- w - 0.1 * 2w = 0.8 w per step.
  Tensor w = tensor({1, -2}, {2}, kFloat64).requires_grad_();
  Tensor handle = w;
  for (int step = 0; step < 2; ++step) {
    w.zero_grad();
    (w * w).sum().backward();
    NoGradGuard no_grad;
    w.sub_(0.1 * w.grad());
  }
  EXPECT_TRUE(all_close(w, {0.64, -1.28}, 1e-15));
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(handle.impl(), w.impl());                    // every handle saw the update
  EXPECT_TRUE(all_close(w.grad(), {1.6, -3.2}, 1e-15));  // 2 * (0.8 w0), from the second step
}

TEST(Tensor, AddAndSubInPlaceBroadcastAndRefuseWhatBackwardCouldNotSee) {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64);
  x.add_(tensor({10, 20, 30}, {3}, kFloat64));
  EXPECT_TRUE(all_close(x, {11, 22, 33, 14, 25, 36}, 0));
  x.sub_(scalar(1, kFloat64));
  EXPECT_TRUE(all_close(x, {10, 21, 32, 13, 24, 35}, 0));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { x.add_(zeros({4}, kFloat64)); },
                                                 "add_: shapes [2, 3] and [4] cannot be broadcast"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        tensor({1, 2, 3}, {3}, kFloat64).add_(x);
      },
      "add_: other of shape [2, 3] does not broadcast to this tensor's shape [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { x.sub_(ones({3})); },
                                                 "sub_: dtypes differ: float64 with shape [2, 3] and float32 with "
                                                 "shape [3] (convert one with .to(ag::kFloat64))"));
  Tensor w = ones({2}, kFloat64).requires_grad_();
  EXPECT_TRUE(throws_with<std::runtime_error>(
      [&] { w.sub_(ones({2}, kFloat64)); },
      "sub_: the float64 tensor of shape [2] requires grad, and backward() would not see a change made in place"));
  // A change in place after the forward pass saved w is caught when backward would read it.
  Tensor y = w * w;
  {
    NoGradGuard no_grad;
    w.sub_(ones({2}, kFloat64));
  }
  EXPECT_THROW(y.sum().backward(), std::runtime_error);
}

}  // namespace
}  // namespace ag
