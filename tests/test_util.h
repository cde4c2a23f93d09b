// Small helpers shared by the test suites.
#pragma once

#include <attograd/attograd.h>
#include <attograd/testing.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ag::test {

// Every element of `t` (converted to double) within `tol` of `expected`, and the same count.
inline ::testing::AssertionResult all_close(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  const Tensor d = t.dtype() == kFloat64 ? t : t.to(kFloat64);  // const: reading is not a write
  if (d.numel() != static_cast<std::int64_t>(expected.size()))
    return ::testing::AssertionFailure() << "tensor has " << d.numel() << " elements, expected " << expected.size();
  const double* p = d.data_ptr<double>();
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (!(p[i] == expected[i] || std::abs(p[i] - expected[i]) <= tol))  // == lets equal infinities pass
      return ::testing::AssertionFailure() << "element " << i << " is " << p[i] << ", expected " << expected[i]
                                           << " (tolerance " << tol << ")\nin " << t;
  return ::testing::AssertionSuccess();
}

// Two tensors of the same shape, elementwise within `tol`.
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes differ: " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  const Tensor bd = b.to(kFloat64);
  return all_close(a, std::vector<double>(bd.data_ptr<double>(), bd.data_ptr<double>() + bd.numel()), tol);
}

// `call` throws E whose message contains `expected`.
template <class E, class F>
::testing::AssertionResult throws_with(F&& call, const std::string& expected) {
  try {
    call();
  } catch (const E& e) {
    if (std::string(e.what()).find(expected) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message \"" << e.what() << "\" does not contain \"" << expected << "\"";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw; expected \"" << expected << "\"";
}

// Random float64 leaf with values in [lo, hi), requiring grad.
inline Tensor uniform_leaf(const Shape& shape, Generator& gen, double lo = -1.0, double hi = 1.0) {
  Tensor t = rand(shape, gen, kFloat64) * (hi - lo) + lo;
  return t.detach().requires_grad_();
}

inline Tensor normal_leaf(const Shape& shape, Generator& gen) { return randn(shape, gen, kFloat64).requires_grad_(); }

// part 0, 1 or 2 (query, key or value) of a MultiHeadAttention's projections applied to x, with
// the weight rows read out of its stacked parameters: qkv_proj for self-attention, q_proj and
// kv_proj for cross-attention.
inline Tensor project_by_hand(const nn::MultiHeadAttention& m, std::int64_t part, const Tensor& x) {
  const nn::Linear& l = m.cross ? (part == 0 ? *m.q_proj : *m.kv_proj) : *m.qkv_proj;
  std::int64_t row = m.cross && part > 0 ? part - 1 : part, d = m.d_model;
  Tensor w = slice(l.weight, 0, row * d, (row + 1) * d);
  Tensor b = l.bias.defined() ? slice(l.bias, 0, row * d, (row + 1) * d) : Tensor();
  return linear(x, w, b);
}

// gradcheck of `f` (a module's forward) with respect to `inputs` and every parameter of
// `module`, which must already be float64. Inputs must be float64 leaves requiring grad.
// Both modes: the gradient of every input and parameter, and the tangent of the output when each
// of their elements moves (forward mode, autograd/forward.h), against central differences.
inline ::testing::AssertionResult gradcheck_module(const nn::Module& module, const std::vector<Tensor>& inputs,
                                                   const std::function<Tensor()>& f) {
  std::vector<Tensor> tensors = inputs;
  for (const Tensor& p : module.parameters()) tensors.push_back(p);
  return testing::gradcheck_in_place(f, tensors, {.check_forward_ad = true});
}

// Sets the thread count for a test's scope and restores the previous one after.
struct ThreadCount {
  explicit ThreadCount(int n) : previous(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(previous); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;
  int previous;
};

}  // namespace ag::test
