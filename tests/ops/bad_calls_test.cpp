// Bad calls: every public op and module, given a wrong rank, a mismatched shape, a wrong dtype,
// an empty tensor, an out-of-range index or dim, or a bad setting, throws std::invalid_argument
// whose message names the op and the shape or value at fault. Nothing crashes, aborts or
// quietly returns NaN, and the same call with good arguments still works afterwards.
//
// One table, one row per bad call: the call, a substring its message must contain, and the same
// call done right, whose result must be finite.
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct BadCall {
  std::string name;
  std::function<void()> bad;
  std::string expected_substring;
  std::function<void()> good;
};

// Throws unless every element of `t` is finite, so a good call that returns NaN fails its row.
void finite(const Tensor& t) {
  if (!t.defined()) throw std::runtime_error("the result is an undefined tensor");
  if (!is_floating(t.dtype())) return;
  Tensor d = t.detach().to(kFloat64);
  const double* p = d.data_ptr<double>();
  for (std::int64_t i = 0; i < d.numel(); ++i)
    if (!std::isfinite(p[i])) throw std::runtime_error(fmt::format("element {} of the result is {}", i, p[i]));
}

// Tensors and shapes from sizes given as arguments: f32(2, 3) is a random float32 [2, 3],
// shape(2, 3) the Shape [2, 3], ids(0, 5) int64 ids of shape [2] and seq(1, 2, 3) one sequence
// [1, 3]. (A braced {2, 3} inside a row's lambda makes clang-format spread the row out.)
template <class... Sizes>
Tensor f32(Sizes... sizes) {
  return randn(Shape{sizes...});
}
template <class... Sizes>
Tensor f64(Sizes... sizes) {
  return randn(Shape{sizes...}, kFloat64);
}
template <class... Sizes>
Tensor leaf(Sizes... sizes) {
  return randn(Shape{sizes...}).requires_grad_();
}
template <class... Sizes>
Shape shape(Sizes... sizes) {
  return Shape{sizes...};
}
template <class... Ids>
Tensor ids(Ids... values) {
  return from_vector(std::vector<std::int64_t>{values...}, {static_cast<std::int64_t>(sizeof...(values))});
}
template <class... Ids>
Tensor seq(Ids... values) {
  return from_vector(std::vector<std::int64_t>{values...}, {1, static_cast<std::int64_t>(sizeof...(values))});
}

// --- tensors, factories, autograd ------------------------------------------------------------
std::vector<BadCall> tensor_rows() {
  return {
      {"zeros with a negative size", [] { zeros(shape(2, -1)); }, "shape [2, -1] has a negative size",
       [] { finite(zeros(shape(2, 1))); }},
      {"randn with a negative size", [] { randn({-3}); }, "shape [-3] has a negative size", [] { finite(randn({3})); }},
      {"rand of int64", [] { rand({2}, kInt64); }, "rand: draws float32 or float64 values, asked for int64",
       [] { finite(rand({2}, kFloat64)); }},
      {"from_vector with too few values",
       [] {
         from_vector<float>({1, 2, 3}, {2, 2});
       },
       "from_vector: 3 values do not fill shape [2, 2] (4 elements)",
       [] {
         finite(from_vector<float>({1, 2, 3, 4}, {2, 2}));
       }},
      {"from_vector with a negative size", [] { from_vector<double>({}, {-1}); },
       "from_vector: shape [-1] has a negative size", [] { finite(from_vector<double>({}, {0})); }},
      {"tensor with too many values",
       [] {
         tensor({1, 2, 3}, {2});
       },
       "tensor: 3 values do not fill shape [2]",
       [] {
         finite(tensor({1, 2}, {2}));
       }},
      {"arange with step 0", [] { arange(0, 5, 0); }, "arange: needs finite start, end and a non-zero step",
       [] { finite(arange(0, 5, 1, kFloat32)); }},
      {"arange with more elements than int64 counts", [] { arange(0, 1e300, 1, kFloat64); },
       "arange: start=0 end=1e+300 step=1 gives 1e+300 elements", [] { finite(arange(0, 1e3, 1, kFloat64)); }},
      {"item on two elements",
       [] {
         tensor({1, 2}, {2}).item();
       },
       "item: needs a tensor with one element, got shape [2] (2 elements)",
       [] { EXPECT_EQ(tensor({2}, {1}).item(), 2.0); }},
      {"item<float> on float64", [] { tensor({1}, {1}, kFloat64).item<float>(); },
       "data_ptr: tensor has dtype float64, asked for float32",
       [] { EXPECT_EQ(tensor({1}, {1}, kFloat64).item<double>(), 1.0); }},
      {"at past the end of a dim",
       [] {
         zeros(shape(2, 3)).at<float>({0, 3});
       },
       "at: index 3 is out of range for dim 1 of size 3 (shape [2, 3])",
       [] {
         EXPECT_EQ(zeros(shape(2, 3)).at<float>({1, -1}), 0.0f);
       }},
      {"at with too few indices", [] { zeros(shape(2, 3)).at<float>({1}); },
       "at: index has 1 entries but the tensor has shape [2, 3]",
       [] {
         zeros(shape(2, 3)).at<float>({1, 2});
       }},
      {"size of dim = rank", [] { zeros(shape(2, 3)).size(2); }, "size: dim 2 is out of range",
       [] { EXPECT_EQ(zeros(shape(2, 3)).size(-2), 2); }},
      {"an op on an undefined tensor", [] { exp(Tensor()); }, "exp: got an undefined tensor",
       [] { finite(exp(f32(2))); }},
      {"requires_grad_ on int64", [] { arange(3).requires_grad_(); },
       "requires_grad_: only float32 and float64 tensors can require grad, got int64 with shape [3]",
       [] { f32(3).requires_grad_(); }},
      {"requires_grad_ on a computed tensor",
       [] {
         Tensor x = leaf(2);
         (x * 2.0).requires_grad_();
       },
       "requires_grad_: tensor with shape [2] was computed by 'mul' and is not a leaf",
       [] { (leaf(2) * 2.0).detach().requires_grad_(); }},
      {"backward() on a non-scalar without a gradient", [] { (leaf(2, 3) * 2.0).backward(); },
       "backward: output has shape [2, 3] (6 elements); backward() without a gradient needs a one-element tensor",
       [] {
         Tensor x = leaf(2, 3);
         (x * 2.0).backward(ones(shape(2, 3)));
         finite(x.grad());
       }},
      {"backward with a gradient of the wrong shape", [] { (leaf(2, 3) * 2.0).backward(ones({3})); },
       "backward: gradient is float32 with shape [3], but the output is float32 with shape [2, 3]",
       [] {
         Tensor x = leaf(2, 3);
         (x * 2.0).backward(ones(shape(2, 3)));
         finite(x.grad());
       }},
      {"backward with a float64 gradient for float32", [] { (leaf(2) * 2.0).backward(ones({2}, kFloat64)); },
       "backward: gradient is float64 with shape [2], but the output is float32 with shape [2]",
       [] {
         Tensor x = leaf(2);
         (x * 2.0).backward(ones({2}));
         finite(x.grad());
       }},
      {"backward on a tensor that needs no grad", [] { f32(2).sum().backward(); },
       "backward: tensor with shape [] does not require grad",
       [] {
         Tensor x = leaf(2);
         x.sum().backward();
         finite(x.grad());
       }},
      {"Module::to int64", [] { nn::Linear(2, 3).to(kInt64); },
       "Module::to: modules hold float tensors; cannot convert to int64",
       [] {
         nn::Linear layer(2, 3);
         layer.to(kFloat64);
         finite(layer.forward(f64(1, 2)));
       }},
      {"set_num_threads(0)", [] { set_num_threads(0); }, "set_num_threads: need at least 1 thread, got 0",
       [] { set_num_threads(get_num_threads()); }},
      {"Generator::set_state with garbage", [] { Generator().set_state("not a state"); },
       "Generator: cannot restore the generator from the given state text",
       [] {
         Generator a(3), b;
         b.set_state(a.state());
         EXPECT_EQ(a.next_u64(), b.next_u64());
       }},
      {"gradcheck with no input requiring grad",
       [] { gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2.0; }, {f64(2)}); },
       "gradcheck: none of the 1 inputs requires grad: nothing to check",
       [] {
         EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2.0; }, {f64(2).requires_grad_()}));
       }},
  };
}

// --- elementwise, binary, reductions ---------------------------------------------------------
std::vector<BadCall> arithmetic_rows() {
  return {
      {"exp of int64", [] { exp(arange(3)); }, "exp: expected a float32 or float64 tensor, got int64 with shape [3]",
       [] { finite(exp(f32(3))); }},
      {"sigmoid of bool", [] { sigmoid(full({2}, 1, kBool)); },
       "sigmoid: expected a float32 or float64 tensor, got bool with shape [2]", [] { finite(sigmoid(f32(2))); }},
      {"erfc of int64", [] { erfc(arange(3)); }, "erfc: expected a float32 or float64 tensor, got int64 with shape [3]",
       [] { finite(erfc(f32(3))); }},
      {"gelu (tanh) of int64", [] { gelu(arange(2), GeluApproximation::Tanh); },
       "gelu_tanh: expected a float32 or float64 tensor, got int64",
       [] { finite(gelu(f32(2), GeluApproximation::Tanh)); }},
      {"add of shapes that do not broadcast", [] { f32(2, 3) + f32(4); },
       "add: shapes [2, 3] and [4] cannot be broadcast", [] { finite(f32(2, 3) + f32(3)); }},
      {"sub of float32 and float64", [] { f32(3) - f64(3); },
       "sub: dtypes differ: float32 with shape [3] and float64 with shape [3]", [] { finite(f64(3) - f64(3)); }},
      {"mul of int64", [] { f32(3) * arange(3); }, "mul: expected a float32 or float64 tensor, got int64",
       [] { finite(f32(3) * f32(3)); }},
      {"div of shapes that do not broadcast", [] { f32(2, 3) / f32(2); },
       "div: shapes [2, 3] and [2] cannot be broadcast", [] { finite(f32(2, 3) / ones(shape(2, 1))); }},
      {"int64 times a number", [] { arange(3) * 2.0; }, "mul: expected a float32 or float64 tensor, got int64",
       [] { finite(f32(3) * 2.0); }},
      {"broadcast_to fewer dims", [] { broadcast_to(f32(2, 3), {3}); },
       "broadcast_to: cannot broadcast shape [2, 3] to [3]", [] { finite(broadcast_to(f32(3), shape(2, 3))); }},
      {"broadcast_to a different size", [] { broadcast_to(f32(2, 3), shape(2, 4)); },
       "broadcast_to: shapes [2, 3] and [2, 4] cannot be broadcast",
       [] { finite(broadcast_to(f32(2, 1), shape(2, 4))); }},
      {"sum_to a shape it cannot reduce to", [] { sum_to(f32(2, 3), {4}); },
       "sum_to: shapes [4] and [2, 3] cannot be broadcast", [] { finite(sum_to(f32(2, 3), {3})); }},
      {"sum over dim = rank", [] { sum(f32(2, 3), 2); },
       "sum: dim 2 is out of range for a tensor with 2 dimensions (valid: -2 to 1)", [] { finite(sum(f32(2, 3), 1)); }},
      {"mean over dim = -rank-1", [] { mean(f32(2, 3), -3); },
       "mean: dim -3 is out of range for a tensor with 2 dimensions", [] { finite(mean(f32(2, 3), -2)); }},
      {"max over dim 0 of a 0-d tensor", [] { max(scalar(1.0), 0); }, "max: dim 0 given for a 0-d tensor",
       [] { finite(max(scalar(1.0))); }},
      {"max over an empty dim", [] { max(zeros(shape(2, 0)), 1); },
       "max: max over an empty dim (shape [2, 0]) has no value", [] { finite(amax(zeros(shape(2, 1)), 1)); }},
      {"max of an empty tensor", [] { max(zeros({0})); }, "max: max over an empty dim (shape [0]) has no value",
       [] { finite(max(zeros({1}))); }},
      {"mean of an empty tensor", [] { mean(zeros(shape(0, 3))); }, "mean: mean over an empty dim (shape [0, 3])",
       [] { finite(mean(zeros(shape(1, 3)))); }},
      {"sum of int64 past its range",
       [] { sum(from_vector<std::int64_t>({std::numeric_limits<std::int64_t>::max(), 1}, {2})); },
       "sum: sum 0 of the int64 tensor of shape [2] passes int64's range (sum x.to(ag::kFloat64) instead)",
       [] { EXPECT_EQ(sum(arange(3)).item<std::int64_t>(), 3); }},
      {"comparison of two dtypes", [] { lt(f32(2, 3), zeros({3}, kFloat64)); },
       "lt: dtypes differ: float32 with shape [2, 3] and float64 with shape [3]",
       [] { EXPECT_EQ(lt(f32(2, 3), zeros({3})).dtype(), kBool); }},
      {"comparison of int64 ids with a fraction", [] { ge(arange(3), 0.5); },
       "ge: 0.5 is not an int64 value, so an int64 tensor (shape [3]) cannot be compared with it exactly",
       [] { EXPECT_EQ(ge(arange(3), 1.0).sum().item<std::int64_t>(), 2); }},
      {"argmax of int64", [] { argmax(arange(3), 0); }, "argmax: expected a float32 or float64 tensor, got int64",
       [] {
         EXPECT_EQ(argmax(tensor({1, 3, 2}, {3}), 0).item<std::int64_t>(), 1);
       }},
      {"argmax over dim = rank", [] { argmax(f32(2, 3), 2); }, "argmax: dim 2 is out of range",
       [] { finite(argmax(f32(2, 3), 1)); }},
  };
}

// --- shape ops, matmul, softmax, masks -------------------------------------------------------
std::vector<BadCall> shape_rows() {
  return {
      {"reshape to another element count", [] { reshape(f32(2, 3), shape(4, 2)); },
       "reshape: cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)",
       [] { finite(reshape(f32(2, 3), shape(3, 2))); }},
      {"reshape with two -1", [] { reshape(f32(2, 3), shape(-1, -1)); }, "reshape: shape [-1, -1] has more than one -1",
       [] { finite(reshape(f32(2, 3), shape(-1, 2))); }},
      {"reshape with a negative size", [] { reshape(f32(2, 3), shape(2, -3)); },
       "reshape: shape [2, -3] has a negative size", [] { finite(reshape(f32(2, 3), shape(2, 3))); }},
      {"reshape with a -1 that cannot be inferred", [] { reshape(f32(2, 3), shape(4, -1)); },
       "reshape: cannot infer the -1 in [4, -1] for 6 elements (shape [2, 3])",
       [] { finite(reshape(f32(2, 3), shape(6, -1))); }},
      {"permute with too few dims", [] { permute(f32(2, 3), {0}); },
       "permute: got 1 dims [0] for a tensor of shape [2, 3]", [] { finite(permute(f32(2, 3), shape(1, 0))); }},
      {"permute repeating a dim", [] { permute(f32(2, 3), shape(0, 0)); },
       "permute: dims [0, 0] repeat dim 0: not a permutation", [] { finite(permute(f32(2, 3), shape(-1, 0))); }},
      {"permute with dim = rank", [] { permute(f32(2, 3), shape(0, 2)); }, "permute: dim 2 is out of range",
       [] { finite(permute(f32(2, 3), shape(0, 1))); }},
      {"transpose with dim = rank", [] { transpose(f32(2, 3), 0, 2); },
       "transpose: dim 2 is out of range for a tensor with 2 dimensions", [] { finite(transpose(f32(2, 3), 0, 1)); }},
      {"transpose with dim = -rank-1", [] { transpose(f32(2, 3), -3, 0); }, "transpose: dim -3 is out of range",
       [] { finite(transpose(f32(2, 3), -2, -1)); }},
      {"slice past the end", [] { slice(f32(2, 3), 1, 0, 4); },
       "slice: range [0, 4) is out of bounds for dim 1 of size 3 (shape [2, 3])",
       [] { finite(slice(f32(2, 3), 1, 0, 3)); }},
      {"slice with start > end", [] { slice(f32(2, 3), 1, 2, 1); }, "slice: range [2, 1) is out of bounds",
       [] { finite(slice(f32(2, 3), 1, 1, 2)); }},
      {"slice with step 0", [] { slice(f32(2, 3), 1, 0, 3, 0); }, "slice: step must be positive, got 0",
       [] { finite(slice(f32(2, 3), 1, 0, 3, 2)); }},
      {"slice with dim = rank", [] { slice(f32(2, 3), 2, 0, 1); }, "slice: dim 2 is out of range",
       [] { finite(slice(f32(2, 3), -1, 0, 1)); }},
      {"cat of no tensors", [] { cat({}, 0); }, "cat: needs at least one tensor", [] { finite(cat({f32(2)}, 0)); }},
      {"cat of mismatched sizes",
       [] {
         cat({f32(2, 3), f32(2, 4)}, 0);
       },
       "cat: tensor 1 has shape [2, 4] but tensor 0 has shape [2, 3]: all sizes but dim 0 must agree",
       [] {
         finite(cat({f32(2, 3), f32(2, 4)}, 1));
       }},
      {"cat of different ranks",
       [] {
         cat({f32(2, 3), f32(3)}, 0);
       },
       "cat: tensor 1 has shape [3] but tensor 0 has shape [2, 3]",
       [] {
         finite(cat({f32(2, 3), f32(1, 3)}, 0));
       }},
      {"cat of float32 and float64",
       [] {
         cat({f32(2), f64(2)}, 0);
       },
       "cat: tensor 1 is float64 but tensor 0 is float32",
       [] {
         finite(cat({f64(2), f64(2)}, 0));
       }},
      {"cat along dim = rank",
       [] {
         cat({f32(2), f32(2)}, 1);
       },
       "cat: dim 1 is out of range",
       [] {
         finite(cat({f32(2), f32(2)}, -1));
       }},
      {"split into sizes that do not add up",
       [] {
         split(f32(2, 3), std::vector<std::int64_t>{1, 1}, 1);
       },
       "split: sizes [1, 1] add up to 2, but dim 1 of shape [2, 3] has size 3",
       [] {
         for (const Tensor& t : split(f32(2, 3), std::vector<std::int64_t>{1, 2}, 1)) finite(t);
       }},
      {"split with a negative size",
       [] {
         split(f32(2, 3), std::vector<std::int64_t>{4, -1}, 1);
       },
       "split: sizes [4, -1] include a negative size",
       [] {
         for (const Tensor& t : split(f32(2, 3), std::vector<std::int64_t>{3, 0}, 1)) finite(t);
       }},
      {"split with split_size 0", [] { split(f32(2, 3), std::int64_t{0}, 1); },
       "split: split_size must be positive, got 0",
       [] {
         for (const Tensor& t : split(f32(2, 3), std::int64_t{2}, 1)) finite(t);
       }},
      {"unsqueeze at rank + 1", [] { unsqueeze(f32(2, 3), 3); },
       "unsqueeze: dim 3 is out of range for a tensor with 3 dimensions", [] { finite(unsqueeze(f32(2, 3), 2)); }},
      {"squeeze a dim that is not 1", [] { squeeze(f32(2, 3), 0); }, "squeeze: dim 0 of shape [2, 3] has size 2, not 1",
       [] { finite(squeeze(f32(1, 3), 0)); }},
      {"squeeze with dim = -rank-1", [] { squeeze(f32(1, 3), -3); }, "squeeze: dim -3 is out of range",
       [] { finite(squeeze(f32(1, 3), -2)); }},
  };
}

std::vector<BadCall> matmul_softmax_mask_rows() {
  return {
      {"matmul with different inner dims", [] { matmul(f32(2, 3), f32(4, 5)); },
       "matmul: shapes [2, 3] and [4, 5]: inner dimensions 3 and 4 differ",
       [] { finite(matmul(f32(2, 3), f32(3, 5))); }},
      {"batched matmul with different inner dims", [] { matmul(f32(2, 3, 4), f32(2, 5, 6)); },
       "matmul: shapes [2, 3, 4] and [2, 5, 6]: inner dimensions 4 and 5 differ",
       [] { finite(matmul(f32(2, 3, 4), f32(2, 4, 6))); }},
      {"matmul with batch dims that do not broadcast", [] { matmul(f32(2, 3, 4), f32(3, 4, 5)); },
       "matmul: shapes [2, 3, 4] and [3, 4, 5]: batch dims [2] and [3] cannot be broadcast",
       [] { finite(matmul(f32(2, 3, 4), f32(1, 4, 5))); }},
      {"matmul of a vector", [] { matmul(f32(3), f32(3, 2)); },
       "matmul: shapes [3] and [3, 2]: both need at least 2 dims", [] { finite(matmul(f32(1, 3), f32(3, 2))); }},
      {"matmul of float32 and float64", [] { matmul(f32(2, 3), f64(3, 2)); },
       "matmul: dtypes differ: float32 with shape [2, 3] and float64 with shape [3, 2]",
       [] { finite(matmul(f64(2, 3), f64(3, 2))); }},
      {"matmul of int64", [] { matmul(arange(6).reshape(shape(2, 3)), f32(3, 2)); },
       "matmul: expected a float32 or float64 tensor, got int64 with shape [2, 3]",
       [] { finite(matmul(arange(0, 6, 1, kFloat32).reshape(shape(2, 3)), f32(3, 2))); }},
      {"softmax over dim = rank", [] { softmax(f32(2, 3), 2); }, "softmax: dim 2 is out of range",
       [] { finite(softmax(f32(2, 3), 1)); }},
      {"log_softmax over dim = -rank-1", [] { log_softmax(f32(2, 3), -3); }, "log_softmax: dim -3 is out of range",
       [] { finite(log_softmax(f32(2, 3), -2)); }},
      {"softmax of a 0-d tensor", [] { softmax(scalar(1.0), 0); }, "softmax: dim 0 given for a 0-d tensor",
       [] { finite(softmax(f32(1), 0)); }},
      {"softmax of int64", [] { softmax(arange(3), 0); }, "softmax: expected a float32 or float64 tensor, got int64",
       [] { finite(softmax(f64(3), 0)); }},
      {"masked_fill with a mask that does not broadcast",
       [] { masked_fill(f32(2, 3), full(shape(2, 2), 1, kBool), 0); },
       "masked_fill: shapes [2, 2] and [2, 3] cannot be broadcast",
       [] { finite(masked_fill(f32(2, 3), full(shape(2, 1), 1, kBool), 0)); }},
      {"masked_fill with a mask of more dims", [] { masked_fill(f32(2, 3), full(shape(4, 2, 3), 1, kBool), 0); },
       "masked_fill: mask of shape [4, 2, 3] does not broadcast to shape [2, 3]",
       [] { finite(masked_fill(f32(2, 3), full({3}, 1, kBool), 0)); }},
      {"masked_fill with a float mask", [] { masked_fill(f32(2, 3), ones(shape(2, 3)), 0); },
       "masked_fill: mask must be bool, got float32 with shape [2, 3]",
       [] { finite(masked_fill(f32(2, 3), ones(shape(2, 3)).to(kBool), 0)); }},
      {"masked_fill of int64", [] { masked_fill(arange(3), full({3}, 1, kBool), 0); },
       "masked_fill: expected a float32 or float64 tensor, got int64",
       [] { finite(masked_fill(f32(3), full({3}, 1, kBool), 0)); }},
      {"causal_mask of negative length", [] { causal_mask(-1, 3); },
       "causal_mask: lengths must be non-negative, got Tq=-1 Tk=3", [] { causal_mask(1, 3); }},
      {"key_padding_mask with a length > T",
       [] {
         key_padding_mask({2, 5}, 4);
       },
       "key_padding_mask: length 5 of sequence 1 is outside 0..4",
       [] {
         key_padding_mask({2, 4}, 4);
       }},
      {"key_padding_mask with a negative length", [] { key_padding_mask({-1}, 4); },
       "key_padding_mask: length -1 of sequence 0 is outside 0..4", [] { key_padding_mask({0}, 4); }},
      {"key_padding_mask with a negative T", [] { key_padding_mask({}, -1); },
       "key_padding_mask: T must be non-negative, got -1", [] { key_padding_mask({}, 1); }},
      {"logical_not of a float tensor", [] { logical_not(ones({2})); },
       "logical_not: mask must be bool, got float32 with shape [2]", [] { logical_not(ones({2}).to(kBool)); }},
      {"logical_and of shapes that do not broadcast", [] { logical_and(full({2}, 1, kBool), full({3}, 1, kBool)); },
       "logical_and: shapes [2] and [3] cannot be broadcast",
       [] { logical_and(full(shape(2, 1), 1, kBool), full({3}, 1, kBool)); }},
  };
}

// --- layer ops: linear, embedding, layer_norm, dropout, cross_entropy --------------------------
std::vector<BadCall> nn_op_rows() {
  return {
      {"linear with the wrong in_features", [] { linear(f32(2, 5), f32(3, 4)); },
       "linear: input of shape [2, 5] does not fit weight of shape [3, 4] (expected [..., 4])",
       [] { finite(linear(f32(2, 4), f32(3, 4))); }},
      {"linear with a 1-d weight", [] { linear(f32(2, 4), f32(4)); },
       "linear: input of shape [2, 4] does not fit weight of shape [4]", [] { finite(linear(f32(2, 4), f32(1, 4))); }},
      {"linear with a bias of the wrong size", [] { linear(f32(2, 4), f32(3, 4), f32(4)); },
       "linear: bias has shape [4], expected [3] for input of shape [2, 4]",
       [] { finite(linear(f32(2, 4), f32(3, 4), f32(3))); }},
      {"linear of float64 with a float32 weight", [] { linear(f64(2, 4), f32(3, 4)); },
       "linear: dtypes differ: float64 with shape [2, 4] and float32 with shape [3, 4]",
       [] { finite(linear(f64(2, 4), f64(3, 4))); }},
      {"linear_gelu with the wrong in_features", [] { linear_gelu(f32(2, 5), f32(3, 4)); },
       "linear_gelu: input of shape [2, 5] does not fit weight of shape [3, 4] (expected [..., 4])",
       [] { finite(linear_gelu(f32(2, 4), f32(3, 4))); }},
      {"linear_gelu with a bias of the wrong size", [] { linear_gelu(f32(2, 4), f32(3, 4), f32(4)); },
       "linear_gelu: bias has shape [4], expected [3] for input of shape [2, 4]",
       [] { finite(linear_gelu(f32(2, 4), f32(3, 4), f32(3))); }},
      {"linear_gelu of float64 with a float32 bias", [] { linear_gelu(f64(2, 4), f64(3, 4), f32(3)); },
       "linear_gelu: dtypes differ: float64 with shape [2, 4] and float32 with shape [3]",
       [] { finite(linear_gelu(f64(2, 4), f64(3, 4), f64(3))); }},
      {"embedding with id = vocab", [] { embedding(f32(5, 3), ids(0, 5)); },
       "embedding: id 5 at position 1 is outside the table's 5 rows (ids shape [2])",
       [] { finite(embedding(f32(5, 3), ids(0, 4))); }},
      {"embedding with a negative id", [] { embedding(f32(5, 3), ids(-1)); },
       "embedding: id -1 at position 0 is outside the table's 5 rows", [] { finite(embedding(f32(5, 3), ids(0))); }},
      {"embedding with float ids", [] { embedding(f32(5, 3), ones({2})); },
       "embedding: ids must be int64, got float32 with shape [2]", [] { finite(embedding(f32(5, 3), ids(1, 1))); }},
      {"embedding with a 1-d table", [] { embedding(f32(5), ids(0)); },
       "embedding: weight must be [V, D], got shape [5]", [] { finite(embedding(f32(5, 1), ids(0))); }},
      {"embedding with an int64 table", [] { embedding(arange(6).reshape(shape(3, 2)), ids(0)); },
       "embedding: expected a float32 or float64 tensor, got int64 with shape [3, 2]",
       [] { finite(embedding(f64(3, 2), ids(0))); }},
      {"layer_norm with a weight of the wrong size", [] { layer_norm(f32(2, 3), ones({4})); },
       "layer_norm: weight has shape [4], expected [3] for input of shape [2, 3]",
       [] { finite(layer_norm(f32(2, 3), ones({3}))); }},
      {"layer_norm with a float64 bias for float32", [] { layer_norm(f32(2, 3), ones({3}), zeros({3}, kFloat64)); },
       "layer_norm: dtypes differ: float32 with shape [2, 3] and float64 with shape [3]",
       [] { finite(layer_norm(f32(2, 3), ones({3}), zeros({3}))); }},
      {"layer_norm with eps 0", [] { layer_norm(f32(2, 3), {}, {}, 0.0); }, "layer_norm: eps must be positive, got 0",
       [] { finite(layer_norm(f32(2, 3), {}, {}, 1e-5)); }},
      {"layer_norm with eps NaN", [] { layer_norm(f32(2, 3), {}, {}, kNaN); },
       "layer_norm: eps must be positive, got nan", [] { finite(layer_norm(f32(2, 3))); }},
      {"layer_norm of a 0-d tensor", [] { layer_norm(scalar(1.0)); },
       "layer_norm: needs at least one dim, got a 0-d tensor", [] { finite(layer_norm(f32(1, 2))); }},
      {"layer_norm over an empty last dim", [] { layer_norm(zeros(shape(2, 0))); },
       "layer_norm: cannot normalise over an empty last dim (shape [2, 0])", [] { finite(layer_norm(f32(2, 1))); }},
      {"layer_norm of int64", [] { layer_norm(arange(3)); },
       "layer_norm: expected a float32 or float64 tensor, got int64", [] { finite(layer_norm(f64(3))); }},
      {"dropout with p > 1", [] { dropout(f32(4), 1.5, true, default_generator()); },
       "dropout: probability must be in [0, 1], got 1.5",
       [] { finite(dropout(f32(4), 0.5, true, default_generator())); }},
      {"dropout with p < 0", [] { dropout(f32(4), -0.1, true, default_generator()); },
       "dropout: probability must be in [0, 1], got -0.1",
       [] { finite(dropout(f32(4), 0.0, true, default_generator())); }},
      {"dropout with p NaN", [] { dropout(f32(4), kNaN, false, default_generator()); },
       "dropout: probability must be in [0, 1], got nan",
       [] { finite(dropout(f32(4), 0.1, false, default_generator())); }},
      {"dropout of int64", [] { dropout(arange(4), 0.5, true, default_generator()); },
       "dropout: expected a float32 or float64 tensor, got int64",
       [] { finite(dropout(f64(4), 0.5, true, default_generator())); }},
      {"cross_entropy with target = classes", [] { cross_entropy(f32(2, 3), ids(0, 3)); },
       "cross_entropy: target 3 at position 1 is outside [0, 3) and is not ignore_index (-100)",
       [] { finite(cross_entropy(f32(2, 3), ids(0, 2))); }},
      {"cross_entropy with a negative target", [] { cross_entropy(f32(2, 3), ids(-1, 0)); },
       "cross_entropy: target -1 at position 0 is outside [0, 3)",
       [] { finite(cross_entropy(f32(2, 3), ids(-100, 0))); }},
      {"cross_entropy with float targets", [] { cross_entropy(f32(2, 3), zeros({2})); },
       "cross_entropy: targets must be int64 class indices, got float32 with shape [2]",
       [] { finite(cross_entropy(f32(2, 3), ids(0, 0))); }},
      {"cross_entropy with targets of the wrong shape", [] { cross_entropy(f32(2, 3), ids(0, 1, 2)); },
       "cross_entropy: logits of shape [2, 3] need targets of shape [2], got [3]",
       [] { finite(cross_entropy(f32(3, 3), ids(0, 1, 2))); }},
      {"cross_entropy of int64 logits", [] { cross_entropy(arange(6).reshape(shape(2, 3)), ids(0, 1)); },
       "cross_entropy: expected a float32 or float64 tensor, got int64 with shape [2, 3]",
       [] { finite(cross_entropy(f64(2, 3), ids(0, 1))); }},
      {"cross_entropy of 0-d logits", [] { cross_entropy(scalar(1.0), scalar(0, kInt64)); },
       "cross_entropy: logits of shape [] need targets of shape [...], got []",
       [] { finite(cross_entropy(f32(3), scalar(0, kInt64))); }},
      {"cross_entropy of an empty batch", [] { cross_entropy(zeros(shape(0, 3)), ids()); },
       "cross_entropy: logits of shape [0, 3] hold no positions", [] { finite(cross_entropy(f32(1, 3), ids(2))); }},
  };
}

// --- attention --------------------------------------------------------------------------------
// q: [1, 2, 3, 4], k: [1, 2, 5, 4], v: [1, 2, 5, 6] (Tq != Tk and dv != d are fine).
void good_attention() {
  AttentionResult r =
      scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), causal_mask(3, 5), false, true);
  finite(r.output);
  finite(r.weights);
}

std::vector<BadCall> attention_rows() {
  return {
      {"attention with different q and k head dims",
       [] { scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 3), f32(1, 2, 5, 6)); },
       "scaled_dot_product_attention: query and key dims differ: q [1, 2, 3, 4] and k [1, 2, 5, 3]", good_attention},
      {"attention with different key and value lengths",
       [] { scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 4, 6)); },
       "scaled_dot_product_attention: key length 5 and value length 4 differ", good_attention},
      {"attention of 3-d tensors", [] { scaled_dot_product_attention(f32(2, 3, 4), f32(2, 5, 4), f32(2, 5, 4)); },
       "scaled_dot_product_attention: q, k and v must be [B, H, T, d], got shapes [2, 3, 4], [2, 5, 4] and [2, 5, 4]",
       good_attention},
      {"attention with different head counts",
       [] { scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 3, 5, 4), f32(1, 3, 5, 6)); },
       "scaled_dot_product_attention: q, k and v must agree in batch and heads", good_attention},
      {"attention of float32 q and float64 k",
       [] { scaled_dot_product_attention(f32(1, 2, 3, 4), f64(1, 2, 5, 4), f32(1, 2, 5, 6)); },
       "scaled_dot_product_attention: dtypes differ: float32 with shape [1, 2, 3, 4] and float64", good_attention},
      {"attention of int64",
       [] { scaled_dot_product_attention(zeros(shape(1, 1, 2, 2), kInt64), f32(1, 1, 2, 2), f32(1, 1, 2, 2)); },
       "scaled_dot_product_attention: expected a float32 or float64 tensor, got int64", good_attention},
      {"attention with a float mask",
       [] { scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), ones(shape(3, 5))); },
       "scaled_dot_product_attention: attn_mask must be bool (true = may attend), got float32 with shape [3, 5]",
       good_attention},
      {"attention with a mask of the wrong shape",
       [] { scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), causal_mask(3, 4)); },
       "scaled_dot_product_attention: attn_mask of shape [3, 4] does not broadcast to the scores' shape [1, 2, 3, 5]",
       good_attention},
      {"attention with a 5-d mask",
       [] {
         scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6),
                                      full(shape(1, 1, 2, 3, 5), 1, kBool));
       },
       "scaled_dot_product_attention: attn_mask of shape [1, 1, 2, 3, 5] does not broadcast", good_attention},
      {"attention with head dim 0",
       [] { scaled_dot_product_attention(zeros(shape(1, 2, 3, 0)), zeros(shape(1, 2, 5, 0)), f32(1, 2, 5, 6)); },
       "scaled_dot_product_attention: q and k have head dim 0", good_attention},
      {"attention with a NaN scale",
       [] { scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), {}, false, false, kNaN); },
       "scaled_dot_product_attention: scale must be finite, got nan",
       [] {
         finite(scaled_dot_product_attention(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), {}, false, false, 0.5)
                    .output);
       }},
      {"attention of an empty batch",
       [] {
         scaled_dot_product_attention(zeros(shape(0, 2, 3, 4)), zeros(shape(0, 2, 5, 4)), zeros(shape(0, 2, 5, 6)));
       },
       "scaled_dot_product_attention: q, k and v need at least one batch entry, head, query and key", good_attention},
      {"[B, T, H, d] attention with different q and k head dims",
       [] { scaled_dot_product_attention_bthd(f32(1, 3, 2, 4), f32(1, 5, 2, 3), f32(1, 5, 2, 6)); },
       "scaled_dot_product_attention_bthd: query and key dims differ",
       [] {
         finite(scaled_dot_product_attention_bthd(f32(1, 3, 2, 4), f32(1, 5, 2, 4), f32(1, 5, 2, 6), {}, true).output);
       }},
      {"attention_reference with a mask of the wrong shape",
       [] { attention_reference(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), full(shape(2, 5), 1, kBool)); },
       "attention_reference: attn_mask of shape [2, 5] does not broadcast to the scores' shape [1, 2, 3, 5]",
       [] {
         finite(attention_reference(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), full(shape(3, 5), 1, kBool))
                    .output);
       }},
      {"attention_reference with a NaN masked score",
       [] { attention_reference(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), {}, true, {}, kNaN); },
       "attention_reference: masked_score must be -inf or finite, got nan",
       [] {
         finite(attention_reference(f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 6), {}, true, {}, 0.0).output);
       }},
  };
}

// --- modules ----------------------------------------------------------------------------------
nn::MultiHeadAttention attention_module() { return nn::MultiHeadAttention(8, 2); }

std::vector<BadCall> module_rows() {
  return {
      {"nn::Linear with the wrong input width", [] { nn::Linear(4, 3).forward(f32(2, 5)); },
       "linear: input of shape [2, 5] does not fit weight of shape [3, 4]",
       [] { finite(nn::Linear(4, 3).forward(f32(2, 4))); }},
      {"nn::Linear with in_features 0", [] { nn::Linear(0, 3); },
       "Linear: sizes must be positive, got in_features=0 out_features=3",
       [] { finite(nn::Linear(1, 3).forward(f32(1))); }},
      {"nn::Linear (float32) on float64 input", [] { nn::Linear(4, 3).forward(f64(2, 4)); },
       "linear: dtypes differ: float64 with shape [2, 4] and float32 with shape [3, 4]",
       [] { finite(nn::Linear(4, 3).forward(f32(2, 4))); }},
      {"nn::LayerNorm with the wrong last dim", [] { nn::LayerNorm(4).forward(f32(2, 5)); },
       "layer_norm: weight has shape [4], expected [5] for input of shape [2, 5]",
       [] { finite(nn::LayerNorm(5).forward(f32(2, 5))); }},
      {"nn::LayerNorm of dim 0", [] { nn::LayerNorm(0); }, "LayerNorm: dim must be positive, got 0",
       [] { finite(nn::LayerNorm(1).forward(f32(3, 1))); }},
      {"nn::LayerNorm with eps -1", [] { nn::LayerNorm(4, -1.0).forward(f32(2, 4)); },
       "layer_norm: eps must be positive, got -1", [] { finite(nn::LayerNorm(4, 1e-6).forward(f32(2, 4))); }},
      {"nn::Embedding with id = num", [] { nn::Embedding(5, 3).forward(ids(5)); },
       "embedding: id 5 at position 0 is outside the table's 5 rows",
       [] { finite(nn::Embedding(5, 3).forward(ids(4))); }},
      {"nn::Embedding of negative size", [] { nn::Embedding(-1, 3); },
       "Embedding: sizes must be positive, got num=-1 dim=3", [] { finite(nn::Embedding(1, 3).forward(ids(0))); }},
      {"nn::Dropout with p = 2", [] { nn::Dropout(2.0); }, "Dropout: probability must be in [0, 1], got 2",
       [] { finite(nn::Dropout(1.0).forward(f32(3))); }},
      {"nn::FeedForward with the wrong input width", [] { nn::FeedForward(4, 16).forward(f32(2, 5)); },
       "linear_gelu: input of shape [2, 5] does not fit weight of shape [16, 4]",
       [] { finite(nn::FeedForward(4, 16).forward(f32(2, 4))); }},
      {"nn::SwiGLU with the wrong input width", [] { nn::SwiGLU(4, 8).forward(f32(2, 5)); },
       "swiglu: input of shape [2, 5] does not fit w_gate of shape [8, 4] (expected [hidden, 5])",
       [] { finite(nn::SwiGLU(4, 8).forward(f32(2, 4))); }},
      {"nn::MultiHeadAttention with n_embd not divisible by heads", [] { nn::MultiHeadAttention(10, 3); },
       "MultiHeadAttention: d_model 10 is not divisible into 3 heads",
       [] {
         nn::MultiHeadAttention a(9, 3);
         Tensor x = f32(1, 2, 9);
         finite(a.forward(x, x));
       }},
      {"nn::MultiHeadAttention with 0 heads", [] { nn::MultiHeadAttention(8, 0); },
       "MultiHeadAttention: d_model 8 is not divisible into 0 heads", [] { nn::MultiHeadAttention(8, 8); }},
      {"nn::MultiHeadAttention with the wrong input width",
       [] {
         Tensor x = f32(1, 3, 6);
         attention_module().forward(x, x);
       },
       "MultiHeadAttention: query and key_value must be [B, T, 8], got shapes [1, 3, 6] and [1, 3, 6]",
       [] {
         Tensor x = f32(1, 3, 8);
         finite(attention_module().forward(x, x, {.causal = true}));
       }},
      {"nn::MultiHeadAttention with an undefined key_value", [] { attention_module().forward(f32(1, 3, 8), Tensor()); },
       "MultiHeadAttention: query and key_value must both be defined tensors",
       [] { finite(attention_module().forward(f32(1, 3, 8), f32(1, 5, 8))); }},
      {"nn::MultiHeadAttention with different batch sizes",
       [] { attention_module().forward(f32(2, 3, 8), f32(1, 5, 8)); },
       "MultiHeadAttention: batch sizes differ: query [2, 3, 8], key_value [1, 5, 8]",
       [] { finite(attention_module().forward(f32(2, 3, 8), f32(2, 5, 8))); }},
      {"nn::MultiHeadAttention with a mask of the wrong shape",
       [] {
         Tensor x = f32(1, 3, 8);
         attention_module().forward(x, x, {.attn_mask = causal_mask(3, 4)});
       },
       "MultiHeadAttention: attn_mask of shape [3, 4] does not broadcast to the scores' shape [1, 2, 3, 3]",
       [] {
         Tensor x = f32(1, 3, 8);
         finite(attention_module().forward(x, x, {.attn_mask = causal_mask(3, 3)}));
       }},
      {"nn::MultiHeadAttention with RoPE and an odd head dim", [] { nn::MultiHeadAttention(6, 2, {.rotary = true}); },
       "RotaryEmbedding: head_dim must be positive and even (channels rotate in pairs), got 3",
       [] { nn::MultiHeadAttention(8, 2, {.rotary = true}); }},
      {"nn::MultiHeadAttention with RoPE past max_len",
       [] {
         nn::MultiHeadAttention a(8, 2, {.rotary = true, .max_len = 4});
         Tensor x = f32(1, 5, 8);
         a.forward(x, x);
       },
       "RotaryEmbedding: positions 0 to 4 (input shape [1, 5, 2, 4]) run past the table's 4 positions",
       [] {
         nn::MultiHeadAttention a(8, 2, {.rotary = true, .max_len = 4});
         Tensor x = f32(1, 4, 8);
         finite(a.forward(x, x));
       }},
      {"nn::RotaryEmbedding with base 0", [] { nn::RotaryEmbedding(4, 8, 0.0); },
       "RotaryEmbedding: base must be positive and finite, got 0",
       [] { finite(nn::RotaryEmbedding(4, 8, 100.0).forward(f32(1, 1, 8, 4))); }},
      {"nn::SinusoidalPositionalEncoding past max_len",
       [] { nn::SinusoidalPositionalEncoding(4, 6).forward(f32(1, 5, 6)); },
       "SinusoidalPositionalEncoding: positions 0 to 4 (input shape [1, 5, 6]) run past the table's 4 positions",
       [] { finite(nn::SinusoidalPositionalEncoding(4, 6).forward(f32(1, 4, 6))); }},
      {"nn::SinusoidalPositionalEncoding with the wrong width",
       [] { nn::SinusoidalPositionalEncoding(4, 6).forward(f32(1, 2, 5)); },
       "SinusoidalPositionalEncoding: expects [B, T, 6], got shape [1, 2, 5]",
       [] { finite(nn::SinusoidalPositionalEncoding(4, 6).forward(f32(1, 2, 6))); }},
      {"nn::LearnedPositionalEmbedding at a negative offset",
       [] { nn::LearnedPositionalEmbedding(4, 6).forward(f32(1, 2, 6), -1); },
       "LearnedPositionalEmbedding: positions -1 to 0 (input shape [1, 2, 6]) run past the table's 4 positions",
       [] { finite(nn::LearnedPositionalEmbedding(4, 6).forward(f32(1, 2, 6), 2)); }},
      {"nn::SelfAttentionBlock with the wrong width",
       [] { nn::SelfAttentionBlock({.d_model = 8, .n_heads = 2, .d_ff = 16}).forward(f32(1, 3, 6)); },
       "layer_norm: weight has shape [8], expected [6] for input of shape [1, 3, 6]",
       [] { finite(nn::SelfAttentionBlock({.d_model = 8, .n_heads = 2, .d_ff = 16}).forward(f32(1, 3, 8))); }},
      {"nn::TransformerDecoderBlock with memory of the wrong width",
       [] {
         nn::TransformerDecoderBlock({.d_model = 8, .n_heads = 2, .d_ff = 16}).forward(f32(1, 3, 8), f32(1, 4, 6));
       },
       "MultiHeadAttention: query and key_value must be [B, T, 8], got shapes [1, 3, 8] and [1, 4, 6]",
       [] {
         finite(
             nn::TransformerDecoderBlock({.d_model = 8, .n_heads = 2, .d_ff = 16}).forward(f32(1, 3, 8), f32(1, 4, 8)));
       }},
  };
}

// --- models, sampling ---------------------------------------------------------------------------
nn::TransformerConfig tiny_transformer() {
  return {.src_vocab = 7,
          .tgt_vocab = 5,
          .d_model = 8,
          .n_heads = 2,
          .d_ff = 16,
          .n_encoder_layers = 1,
          .n_decoder_layers = 1,
          .max_len = 6};
}

nn::GPTConfig tiny_gpt() { return {.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8}; }

void good_gpt() {
  nn::GPT model(tiny_gpt());
  finite(model.loss(seq(1, 2, 3, 4), seq(2, 3, 4, 10)));
}

// A GPTConfig with one field changed.
template <class F>
nn::GPTConfig gpt_with(F change) {
  nn::GPTConfig c = tiny_gpt();
  change(c);
  return c;
}

std::vector<BadCall> model_rows() {
  return {
      {"nn::Transformer with a source id out of vocab",
       [] { nn::Transformer(tiny_transformer()).forward(seq(1, 7), seq(0)); },
       "embedding: id 7 at position 1 is outside the table's 7 rows",
       [] { finite(nn::Transformer(tiny_transformer()).forward(seq(1, 6), seq(0))); }},
      {"nn::Transformer with float source ids",
       [] { nn::Transformer(tiny_transformer()).forward(ones(shape(1, 2)), seq(0)); },
       "embedding: ids must be int64, got float32 with shape [1, 2]",
       [] { finite(nn::Transformer(tiny_transformer()).forward(seq(1, 1), seq(0))); }},
      {"nn::Transformer with 1-d source ids", [] { nn::Transformer(tiny_transformer()).forward(ids(1, 2, 3), seq(0)); },
       "Transformer: src must be int64 [B, S], got shape [3]",
       [] { finite(nn::Transformer(tiny_transformer()).forward(seq(1, 2, 3), seq(0))); }},
      {"nn::Transformer with a source longer than max_len",
       [] { nn::Transformer(tiny_transformer()).forward(seq(1, 1, 1, 1, 1, 1, 1), seq(0)); },
       "SinusoidalPositionalEncoding: positions 0 to 6 (input shape [1, 7, 8]) run past the table's 6 positions",
       [] { finite(nn::Transformer(tiny_transformer()).forward(seq(1, 1, 1, 1, 1, 1), seq(0))); }},
      {"nn::Transformer with a negative layer count",
       [] {
         nn::TransformerConfig c = tiny_transformer();
         c.n_encoder_layers = -1;
         nn::Transformer model(c);
       },
       "Transformer: layer counts must be non-negative, got -1 encoder and 1 decoder layers",
       [] {
         nn::TransformerConfig c = tiny_transformer();
         c.n_encoder_layers = 0;
         finite(nn::Transformer(c).forward(seq(1, 2), seq(0)));
       }},
      {"nn::GPT with T > block_size", [] { nn::GPT(tiny_gpt()).forward(ones(shape(1, 9), kInt64)); },
       "GPT: sequence length 9 (ids shape [1, 9], after 0 cached tokens) is longer than block_size 8",
       [] { finite(nn::GPT(tiny_gpt()).forward(ones(shape(1, 8), kInt64))); }},
      {"nn::GPT with an id out of vocab", [] { nn::GPT(tiny_gpt()).forward(seq(1, 11)); },
       "embedding: id 11 at position 1 is outside the table's 11 rows", good_gpt},
      {"nn::GPT with a negative id", [] { nn::GPT(tiny_gpt()).forward(seq(-1, 1)); },
       "embedding: id -1 at position 0 is outside the table's 11 rows", good_gpt},
      {"nn::GPT with 1-d ids", [] { nn::GPT(tiny_gpt()).forward(ids(1, 2, 3, 4)); },
       "GPT: ids must be int64 [B, T], got [4]", good_gpt},
      {"nn::GPT with an empty batch", [] { nn::GPT(tiny_gpt()).forward(zeros(shape(0, 4), kInt64)); },
       "GPT: ids of shape [0, 4] hold no tokens", good_gpt},
      {"nn::GPT with a cache for the wrong number of layers",
       [] {
         std::vector<nn::KVCache> cache(1);  // one layer's worth, for two layers
         nn::GPT(gpt_with([](auto& c) { c.n_layer = 2; })).forward(seq(1, 2), &cache);
       },
       "GPT: cache size 1 does not match the model's 2 layers",
       [] {
         std::vector<nn::KVCache> cache;
         nn::GPT model(gpt_with([](auto& c) { c.n_layer = 2; }));
         finite(model.forward(seq(1, 2), &cache));
         finite(model.forward(seq(3), &cache));
       }},
      {"nn::GPT loss with a target out of vocab", [] { nn::GPT(tiny_gpt()).loss(seq(1, 2, 3, 4), seq(2, 3, 4, 11)); },
       "cross_entropy: target 11 at position 3 is outside [0, 11)", good_gpt},
      {"nn::GPT loss with targets of the wrong shape", [] { nn::GPT(tiny_gpt()).loss(seq(1, 2, 3, 4), seq(2, 3, 4)); },
       "cross_entropy: logits of shape [1, 4, 11] need targets of shape [1, 4], got [1, 3]", good_gpt},
      {"nn::GPT with vocab_size 0", [] { nn::GPT(gpt_with([](auto& c) { c.vocab_size = 0; })); },
       "GPT: vocab_size, block_size and n_layer must be positive, got 0, 8 and 1", good_gpt},
      {"nn::GPT with a negative block_size", [] { nn::GPT(gpt_with([](auto& c) { c.block_size = -8; })); },
       "GPT: vocab_size, block_size and n_layer must be positive, got 11, -8 and 1", good_gpt},
      {"nn::GPT with n_embd not divisible by n_head", [] { nn::GPT(gpt_with([](auto& c) { c.n_embd = 9; })); },
       "MultiHeadAttention: d_model 9 is not divisible into 2 heads", good_gpt},
      {"nn::GPT with n_embd 0", [] { nn::GPT(gpt_with([](auto& c) { c.n_embd = 0; })); },
       "Embedding: sizes must be positive, got num=11 dim=0", good_gpt},
      {"nn::GPT with n_head -2", [] { nn::GPT(gpt_with([](auto& c) { c.n_head = -2; })); },
       "MultiHeadAttention: d_model 8 is not divisible into -2 heads", good_gpt},
      {"nn::GPT with dropout 1.5", [] { nn::GPT(gpt_with([](auto& c) { c.dropout = 1.5; })); },
       "Dropout: probability must be in [0, 1], got 1.5", good_gpt},
      {"sample_token of 2-d logits",
       [] {
         Generator gen(0);
         nn::sample_token(f32(1, 4), 1.0, 0, gen);
       },
       "sample_token: expects one row of logits [V], got shape [1, 4]",
       [] {
         Generator gen(0);
         std::int64_t id = nn::sample_token(f32(4), 1.0, 0, gen);
         EXPECT_TRUE(id >= 0 && id < 4);
       }},
      {"sample_token with a negative temperature",
       [] {
         Generator gen(0);
         nn::sample_token(f32(4), -1.0, 0, gen);
       },
       "sample_token: temperature must be >= 0, got -1",
       [] {
         Generator gen(0);
         EXPECT_EQ(nn::sample_token(tensor({0, 3, 1, 2}, {4}), 0.0, 0, gen), 1);
       }},
      {"sample_token with a negative top_k",
       [] {
         Generator gen(0);
         nn::sample_token(f32(4), 1.0, -1, gen);
       },
       "sample_token: top_k must be >= 0, got -1",
       [] {
         Generator gen(0);
         EXPECT_EQ(nn::sample_token(tensor({0, 3, 1, 2}, {4}), 1.0, 1, gen), 1);
       }},
      {"generate from an empty prompt",
       [] {
         Generator gen(0);
         nn::GPT model(tiny_gpt());
         nn::generate(model, {}, {.max_new_tokens = 2}, gen);
       },
       "generate: the prompt must hold at least one token",
       [] {
         Generator gen(0);
         nn::GPT model(tiny_gpt());
         EXPECT_EQ(nn::generate(model, {1}, {.max_new_tokens = 2}, gen).size(), 3u);
       }},
      {"generate with a negative max_new_tokens",
       [] {
         Generator gen(0);
         nn::GPT model(tiny_gpt());
         nn::generate(model, {1}, {.max_new_tokens = -1}, gen);
       },
       "generate: max_new_tokens must be non-negative, got -1",
       [] {
         Generator gen(0);
         nn::GPT model(tiny_gpt());
         EXPECT_EQ(nn::generate(model, {1}, {.max_new_tokens = 0}, gen).size(), 1u);
       }},
  };
}

// --- optimizers ---------------------------------------------------------------------------------
// One optimizer step on w with a gradient; the updated w must be finite.
template <class Optimizer, class Options>
void step_once(Options options) {
  Tensor w = leaf(3);
  Optimizer opt(std::vector<Tensor>{w}, options);
  (w * w).sum().backward();
  opt.step();
  finite(w);
}

std::vector<BadCall> optimizer_rows() {
  using optim::Adam;
  using optim::AdamW;
  using optim::SGD;
  return {
      {"SGD with a negative lr", [] { SGD({leaf(3)}, {.lr = -0.1}); },
       "SGD: learning rate must be non-negative, got -0.1", [] { step_once<SGD>(optim::SGDOptions{.lr = 0.1}); }},
      {"SGD with nesterov and no momentum", [] { SGD({leaf(3)}, {.nesterov = true}); },
       "SGD: nesterov momentum needs momentum > 0 and dampening 0",
       [] { step_once<SGD>(optim::SGDOptions{.momentum = 0.9, .nesterov = true}); }},
      {"SGD with a negative momentum", [] { SGD({leaf(3)}, {.momentum = -0.5}); },
       "SGD: momentum must be non-negative, got -0.5", [] { step_once<SGD>(optim::SGDOptions{.momentum = 0.5}); }},
      {"SGD with a negative weight decay", [] { SGD({leaf(3)}, {.weight_decay = -0.01}); },
       "SGD: weight decay must be non-negative, got -0.01",
       [] { step_once<SGD>(optim::SGDOptions{.weight_decay = 0.01}); }},
      {"AdamW with a negative lr", [] { AdamW({leaf(3)}, {.lr = -1e-3}); },
       "AdamW: learning rate must be non-negative, got -0.001",
       [] { step_once<AdamW>(optim::AdamWOptions{.lr = 1e-3}); }},
      {"AdamW with beta1 = 1", [] { AdamW({leaf(3)}, {.beta1 = 1.0}); },
       "AdamW: betas must be in [0, 1), got (1, 0.999)", [] { step_once<AdamW>(optim::AdamWOptions{.beta1 = 0.0}); }},
      {"AdamW with a negative beta2", [] { AdamW({leaf(3)}, {.beta2 = -0.1}); },
       "AdamW: betas must be in [0, 1), got (0.9, -0.1)", [] { step_once<AdamW>(optim::AdamWOptions{.beta2 = 0.5}); }},
      {"Adam with a negative eps", [] { Adam({leaf(3)}, {.eps = -1e-8}); },
       "Adam: eps must be non-negative, got -1e-08", [] { step_once<Adam>(optim::AdamOptions{.eps = 0.0}); }},
      {"Adam with a NaN lr", [] { Adam({leaf(3)}, {.lr = kNaN}); }, "Adam: learning rate must be non-negative, got nan",
       [] { step_once<Adam>(optim::AdamOptions{.lr = 0.0}); }},
      {"Adam with a negative weight decay", [] { Adam({leaf(3)}, {.weight_decay = -1.0}); },
       "Adam: weight decay must be non-negative, got -1",
       [] { step_once<Adam>(optim::AdamOptions{.weight_decay = 1.0}); }},
      {"an optimizer over a computed tensor", [] { SGD({leaf(3) * 2.0}, {}); },
       "SGD: every parameter must be a leaf tensor that requires grad", [] { step_once<SGD>(optim::SGDOptions{}); }},
      {"an optimizer over a tensor that needs no grad", [] { AdamW({f32(3)}, {}); },
       "AdamW: every parameter must be a leaf tensor that requires grad",
       [] { step_once<AdamW>(optim::AdamWOptions{}); }},
      {"an optimizer given one parameter twice",
       [] {
         Tensor w = leaf(3);
         AdamW({optim::ParamGroup{{w}, 0.1}, optim::ParamGroup{{w}, 0.0}});
       },
       "AdamW: parameter 1 (shape [3]) is parameter 0 again",
       [] {
         Tensor w = leaf(3), b = leaf(3);
         AdamW opt({optim::ParamGroup{{w}, 0.1}, optim::ParamGroup{{b}, 0.0}});
         (w * b).sum().backward();
         opt.step();
         finite(w);
         finite(b);
       }},
      {"set_lr with a negative lr",
       [] {
         SGD opt({leaf(3)}, {});
         opt.set_lr(-1.0);
       },
       "SGD: learning rate must be non-negative, got -1",
       [] {
         SGD opt({leaf(3)}, {});
         opt.set_lr(0.5);
         EXPECT_EQ(opt.lr(), 0.5);
       }},
      {"load_state without a step",
       [] {
         AdamW opt({leaf(3)});
         opt.load_state({});
       },
       "AdamW: state has no 'step' entry",
       [] {
         AdamW opt({leaf(3)});
         opt.load_state(opt.state());
       }},
      {"load_state with a moment of the wrong shape",
       [] {
         AdamW opt({leaf(3)});
         opt.load_state({{"step", scalar(1, kInt64)}, {"0.exp_avg", zeros({4})}});
       },
       "AdamW: state '0.exp_avg' is float32 [4] but parameter 0 is float32 [3]",
       [] {
         AdamW opt({leaf(3)});
         opt.load_state({{"step", scalar(1, kInt64)}, {"0.exp_avg", zeros({3})}, {"0.exp_avg_sq", zeros({3})}});
       }},
      {"load_state with one moment of a parameter's two",
       [] {
         AdamW opt({leaf(3)});
         opt.load_state({{"step", scalar(1, kInt64)}, {"0.exp_avg", zeros({3})}});
       },
       "AdamW: state has '0.exp_avg' but not '0.exp_avg_sq'",
       [] {
         AdamW opt({leaf(3), leaf(2)});  // the second parameter has had no gradient: no slots at all
         opt.load_state({{"step", scalar(1, kInt64)}, {"0.exp_avg", zeros({3})}, {"0.exp_avg_sq", zeros({3})}});
       }},
      {"load_state with an index spelt with a leading zero",
       [] {
         Adam opt({leaf(3)});
         opt.load_state({{"step", scalar(1, kInt64)}, {"00.exp_avg", zeros({3})}, {"00.exp_avg_sq", zeros({3})}});
       },
       "Adam: unexpected state entry '00.exp_avg'",
       [] {
         Adam opt({leaf(3)});
         opt.load_state({{"step", scalar(1, kInt64)}, {"0.exp_avg", zeros({3})}, {"0.exp_avg_sq", zeros({3})}});
       }},
      {"clip_grad_norm with max_norm 0", [] { optim::clip_grad_norm({leaf(3)}, 0.0); },
       "clip_grad_norm: max_norm must be positive, got 0",
       [] {
         Tensor w = leaf(3);
         (w * w).sum().backward();
         EXPECT_TRUE(std::isfinite(optim::clip_grad_norm({w}, 1.0)));
         finite(w.grad());
       }},
      {"WarmupCosine at a negative step", [] { optim::WarmupCosine{}.lr_at(-1); },
       "WarmupCosine: step must be non-negative, got -1", [] { EXPECT_GT(optim::WarmupCosine{}.lr_at(0), 0.0); }},
  };
}

std::vector<BadCall> all_rows() {
  std::vector<BadCall> rows;
  for (auto family : {tensor_rows, arithmetic_rows, shape_rows, matmul_softmax_mask_rows, nn_op_rows, attention_rows,
                      module_rows, model_rows, optimizer_rows})
    for (BadCall& row : family()) rows.push_back(std::move(row));
  return rows;
}

TEST(BadCalls, EachThrowsAClearErrorAndTheGoodCallStillWorks) {
  std::vector<BadCall> rows = all_rows();
  EXPECT_GE(rows.size(), 60u);
  for (const BadCall& row : rows) {
    SCOPED_TRACE(row.name);
    EXPECT_TRUE(throws_with<std::invalid_argument>(row.bad, row.expected_substring));
    EXPECT_NO_THROW(row.good());
  }
}

// Every mix of dtypes goes through one check (autograd/dispatch.h), and every path through it
// ends with the .to() that fixes the call.
TEST(BadCalls, DtypeMixesSuggestTo) {
  Tensor a = ones({2, 3}), b = ones({3, 2}, kFloat64), ids = arange(3);
  struct Case {
    std::function<void()> call;
    std::string expected;
  };
  std::vector<Case> cases = {
      {[&] { a + ones({3}, kFloat64); },
       "add: dtypes differ: float32 with shape [2, 3] and float64 with shape [3] (convert one with .to(ag::kFloat32))"},
      {[&] { b* ones({2}); },
       "mul: dtypes differ: float64 with shape [3, 2] and float32 with shape [2] (convert one "
       "with .to(ag::kFloat64))"},
      {[&] { matmul(a, b); },
       "matmul: dtypes differ: float32 with shape [2, 3] and float64 with shape [3, 2] "
       "(convert one with .to(ag::kFloat32))"},
      {[&] { ones({3}) - ids; },
       "sub: expected a float32 or float64 tensor, got int64 with shape [3] beside float32 "
       "with shape [3] (convert one with .to(ag::kFloat32))"},
      {[&] { ids / ones({3}, kFloat64); },
       "div: expected a float32 or float64 tensor, got int64 with shape [3] beside "
       "float64 with shape [3] (convert one with .to(ag::kFloat64))"},
      {[&] {
         linear(a, ones({4, 3}, kFloat64));
       },
       "linear: dtypes differ"},
      {[&] {
         linear(a, ones({4, 3}), ones({4}, kFloat64));
       },
       "(convert one with .to(ag::kFloat32))"},
      {[&] { layer_norm(a, ones({3}, kFloat64), {}); }, "(convert one with .to(ag::kFloat32))"},
      {[&] {
         cat({a, ones({2, 3}, kFloat64)}, 0);
       },
       "cat: tensor 1 is float64 but tensor 0 is float32 (convert one with .to(ag::kFloat32))"},
      {[&] { exp(ids); },
       "exp: expected a float32 or float64 tensor, got int64 with shape [3] (convert it with "
       ".to(ag::kFloat32))"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    EXPECT_TRUE(throws_with<std::invalid_argument>(c.call, c.expected));
  }
  Tensor q = ones({1, 1, 2, 4}), k = ones({1, 1, 2, 4}, kFloat64);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { scaled_dot_product_attention(q, k, k); },
                                                 "(convert one with .to(ag::kFloat32))"));
}

}  // namespace
}  // namespace ag
