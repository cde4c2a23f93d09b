// The fused ops as functions of float64 leaves, each optional argument on and off: the cases
// whose second derivatives forward_test.cpp (forward over reverse against reverse over reverse)
// and higher_order_test.cpp (the fused double backward against the composition) hold equal.
#pragma once

#include <string>
#include <vector>

#include "../test_util.h"

namespace ag::test {

struct FusedOpCase {
  std::string name;
  TensorFunction f;
  std::vector<Tensor> inputs;
};

// Fresh leaves holding the inputs' values, and a random direction v for each (float64).
struct LeavesAndDirections {
  std::vector<Tensor> leaves, v;
};
inline LeavesAndDirections leaves_and_directions(const std::vector<Tensor>& inputs, Generator& gen) {
  LeavesAndDirections r;
  for (const Tensor& in : inputs) {
    r.leaves.push_back(in.detach().clone().requires_grad_());
    r.v.push_back(randn(in.shape(), gen, kFloat64));
  }
  return r;
}

inline std::vector<FusedOpCase> fused_op_cases(Generator& gen) {
  Tensor x = uniform_leaf({2, 3, 5}, gen, -2.0, 2.0), x1 = uniform_leaf({5}, gen);
  Tensor w = uniform_leaf({5}, gen, 0.5, 1.5), b = uniform_leaf({5}, gen);
  Tensor lw = uniform_leaf({4, 5}, gen), lb = uniform_leaf({4}, gen);
  Tensor table = uniform_leaf({5, 3}, gen);
  Tensor gate = uniform_leaf({6, 5}, gen), up = uniform_leaf({6, 5}, gen), down = uniform_leaf({3, 6}, gen);
  Tensor ids = from_vector<std::int64_t>({4, 0, 4, 2, 1, 4}, {2, 3});
  Tensor targets = from_vector<std::int64_t>({1, -100, 4, 0, 2, -100}, {2, 3});
  Tensor all_ignored = from_vector<std::int64_t>({7, 7, 7, 7, 7, 7}, {2, 3});
  using In = const std::vector<Tensor>&;
  return {
      {"linear", [](In in) { return linear(in[0], in[1], in[2]).tanh(); }, {x, lw, lb}},
      {"linear, no bias", [](In in) { return linear(in[0], in[1]).pow(2.0); }, {x, lw}},
      {"linear, 1-d input", [](In in) { return linear(in[0], in[1], in[2]).exp(); }, {x1, lw, lb}},
      {"linear, the same tensor twice", [](In in) { return linear(in[0], in[0]).tanh(); }, {lw.slice(1, 0, 4)}},
      {"linear_gelu", [](In in) { return linear_gelu(in[0], in[1], in[2]); }, {x, lw, lb}},
      {"linear_gelu tanh, no bias",
       [](In in) { return linear_gelu(in[0], in[1], {}, GeluApproximation::Tanh); },
       {x, lw}},
      {"gelu", [](In in) { return in[0].gelu(); }, {x}},
      {"gelu tanh", [](In in) { return in[0].gelu(GeluApproximation::Tanh); }, {x}},
      {"layer_norm", [](In in) { return layer_norm(in[0], in[1], in[2], 1e-5); }, {x, w, b}},
      {"layer_norm, no affine", [](In in) { return layer_norm(in[0], {}, {}, 1e-5); }, {x}},
      {"layer_norm, squared", [](In in) { return layer_norm(in[0], in[1], in[2], 1e-3).pow(2.0); }, {x, w, b}},
      {"rms_norm", [](In in) { return rms_norm(in[0], in[1], 1e-5); }, {x, w}},
      {"rms_norm, no weight", [](In in) { return rms_norm(in[0], {}, 1e-5).pow(2.0); }, {x}},
      {"swiglu", [](In in) { return swiglu(in[0], in[1], in[2], in[3]); }, {x, gate, up, down}},
      {"swiglu, squared", [](In in) { return swiglu(in[0], in[1], in[2], in[3]).pow(2.0); }, {x, gate, up, down}},
      {"swiglu, 1-d input", [](In in) { return swiglu(in[0], in[1], in[2], in[3]).tanh(); }, {x1, gate, up, down}},
      {"embedding", [ids](In in) { return embedding(in[0], ids).pow(2.0); }, {table}},
      {"cross_entropy", [targets](In in) { return cross_entropy(in[0], targets); }, {x}},
      {"cross_entropy, squared", [targets](In in) { return cross_entropy(in[0], targets).pow(2.0); }, {x}},
      {"cross_entropy, every row ignored",
       [all_ignored](In in) { return cross_entropy(in[0], all_ignored, 7) + in[0].pow(3.0).sum(); },
       {x}},
  };
}

}  // namespace ag::test
