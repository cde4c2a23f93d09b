// ops_grads: the attograd side of the elementwise and reduction ops' PyTorch parity check
// (tools/ops_parity.py).
//
//   ops_grads OP IN_DIR OUT_DIR
//
// Reads the op's operands from IN_DIR/<name>.npy (float64 operands, and the op's other
// arguments: a bool condition, an int64 dim, a bool keepdim, float64 bounds lo and hi). Writes
// the op's result as OUT_DIR/output.npy. When the result is floating it also writes, for each
// float64 operand <name>, the gradient of sum(output * weight) (weight from IN_DIR/weight.npy)
// as grad_<name>.npy, and the tangent of the output when every operand moves along its
// IN_DIR/t_<name>.npy as tangent.npy (ag::jvp). The same again with the naive backend's kernels
// (ag::Kernels::Naive) as naive_output.npy, naive_grad_<name>.npy and naive_tangent.npy.
//
// The ops: abs; maximum, minimum (a, b); where (cond; a, b); clamp (x; lo and/or hi);
// max_dim, min_dim, max_indices, min_indices, amax, amin, argmin (x; dim, keepdim); max_all,
// min_all (x); eq, ne, lt, le, gt, ge (a, b); sum_bool, mean_bool (mask); sum_int64 (ids);
// index_select, gather (x; index, dim); index_add, scatter_add (self, src; index, dim); stack
// (a, b; dim).
#include <attograd/attograd.h>

#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "npy_case.h"

namespace {

using tools::Case;

// An op: the names of its float64 operands, and the op as a function of them (other arguments
// read from the case).
struct Op {
  std::vector<std::string> operands;
  std::function<ag::Tensor(const Case&, const std::vector<ag::Tensor>&)> f;
};

std::int64_t dim_of(const Case& c) { return c.read("dim").item<std::int64_t>(); }
bool keepdim_of(const Case& c) { return c.has("keepdim") && c.read("keepdim").item<bool>(); }

std::map<std::string, Op> ops() {
  using V = const std::vector<ag::Tensor>&;
  std::map<std::string, Op> m;
  m["abs"] = {{"x"}, [](const Case&, V in) { return in[0].abs(); }};
  m["maximum"] = {{"a", "b"}, [](const Case&, V in) { return ag::maximum(in[0], in[1]); }};
  m["minimum"] = {{"a", "b"}, [](const Case&, V in) { return ag::minimum(in[0], in[1]); }};
  m["where"] = {{"a", "b"}, [](const Case& c, V in) { return ag::where(c.read("cond"), in[0], in[1]); }};
  m["clamp"] = {{"x"}, [](const Case& c, V in) {
                  std::optional<double> lo, hi;
                  if (c.has("lo")) lo = c.read("lo").item();
                  if (c.has("hi")) hi = c.read("hi").item();
                  return ag::clamp(in[0], lo, hi);
                }};
  m["max_dim"] = {{"x"}, [](const Case& c, V in) { return std::get<0>(in[0].max(dim_of(c), keepdim_of(c))); }};
  m["min_dim"] = {{"x"}, [](const Case& c, V in) { return std::get<0>(in[0].min(dim_of(c), keepdim_of(c))); }};
  m["max_indices"] = {{"x"}, [](const Case& c, V in) { return std::get<1>(in[0].max(dim_of(c), keepdim_of(c))); }};
  m["min_indices"] = {{"x"}, [](const Case& c, V in) { return std::get<1>(in[0].min(dim_of(c), keepdim_of(c))); }};
  m["amax"] = {{"x"}, [](const Case& c, V in) { return in[0].amax(dim_of(c), keepdim_of(c)); }};
  m["amin"] = {{"x"}, [](const Case& c, V in) { return in[0].amin(dim_of(c), keepdim_of(c)); }};
  m["argmin"] = {{"x"}, [](const Case& c, V in) { return in[0].argmin(dim_of(c), keepdim_of(c)); }};
  m["max_all"] = {{"x"}, [](const Case&, V in) { return in[0].max(); }};
  m["min_all"] = {{"x"}, [](const Case&, V in) { return in[0].min(); }};
  m["eq"] = {{"a", "b"}, [](const Case&, V in) { return in[0] == in[1]; }};
  m["ne"] = {{"a", "b"}, [](const Case&, V in) { return in[0] != in[1]; }};
  m["lt"] = {{"a", "b"}, [](const Case&, V in) { return in[0] < in[1]; }};
  m["le"] = {{"a", "b"}, [](const Case&, V in) { return in[0] <= in[1]; }};
  m["gt"] = {{"a", "b"}, [](const Case&, V in) { return in[0] > in[1]; }};
  m["ge"] = {{"a", "b"}, [](const Case&, V in) { return in[0] >= in[1]; }};
  m["index_select"] = {{"x"}, [](const Case& c, V in) { return ag::index_select(in[0], dim_of(c), c.read("index")); }};
  m["index_add"] = {{"self", "src"},
                    [](const Case& c, V in) { return ag::index_add(in[0], dim_of(c), c.read("index"), in[1]); }};
  m["gather"] = {{"x"}, [](const Case& c, V in) { return ag::gather(in[0], dim_of(c), c.read("index")); }};
  m["scatter_add"] = {{"self", "src"},
                      [](const Case& c, V in) { return ag::scatter_add(in[0], dim_of(c), c.read("index"), in[1]); }};
  m["stack"] = {{"a", "b"}, [](const Case& c, V in) { return ag::stack({in[0], in[1]}, dim_of(c)); }};
  m["sum_bool"] = {{}, [](const Case& c, V) { return c.read("mask").sum(-1); }};
  m["mean_bool"] = {{}, [](const Case& c, V) { return c.read("mask").mean(); }};
  m["sum_int64"] = {{}, [](const Case& c, V) { return c.read("ids").sum(0); }};
  return m;
}

// The op's result, gradients and tangent, each file name starting with `prefix`.
void run(const Case& c, const Op& op, const std::string& prefix) {
  std::vector<ag::Tensor> inputs, tangents;
  for (const std::string& name : op.operands) {
    inputs.push_back(c.read(name).requires_grad_());
    tangents.push_back(c.has("t_" + name) ? c.read("t_" + name) : ag::Tensor());
  }
  ag::Tensor y = op.f(c, inputs);
  c.write(prefix + "output", y.detach());
  if (!ag::is_floating(y.dtype()) || inputs.empty()) return;  // indices, bools, counts: no derivative
  std::vector<ag::Tensor> grads = ag::grad({(y * c.read("weight")).sum()}, inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i) c.write(prefix + "grad_" + op.operands[i], grads[i]);
  ag::JvpResult moved = ag::jvp([&](const std::vector<ag::Tensor>& in) { return op.f(c, in); }, inputs, tangents);
  c.write(prefix + "tangent", moved.tangent);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: ops_grads OP IN_DIR OUT_DIR\n";
    return 2;
  }
  std::string name = argv[1];
  auto all = ops();
  auto op = all.find(name);
  if (op == all.end()) {
    std::cerr << "ops_grads: unknown op '" << name << "'\n";
    return 2;
  }
  Case c{argv[2], argv[3]};
  try {
    run(c, op->second, "");
    ag::KernelGuard naive(ag::Kernels::Naive);
    run(c, op->second, "naive_");
  } catch (const std::exception& e) {
    std::cerr << "ops_grads: " << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
