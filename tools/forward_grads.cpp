// forward_grads: the attograd side of the forward-mode PyTorch parity check
// (tools/forward_parity.py).
//
//   forward_grads CASE IN_DIR OUT_DIR
//
// Reads the case's inputs from IN_DIR/<name>.npy and, for each input that moves, its tangent
// from IN_DIR/t_<name>.npy (float64; targets and lengths int64, flags bool). Runs the case's
// function once with ag::jvp (autograd/functional.h) and writes its value as OUT_DIR/output.npy
// and its tangent J v as OUT_DIR/tangent.npy; then the same under the reference kernels
// (ag::Kernels::Reference, the readable twins' own forward rules) as reference_output.npy and
// reference_tangent.npy. The cases:
//
//   attention      scaled_dot_product_attention(q, k, v); optional lengths (int64 [B], a key
//                  padding mask), causal (bool []) and scale (float64 [])
//   layer_norm     layer_norm(x, weight, bias, 1e-5)
//   cross_entropy  cross_entropy(logits, targets), targets int64 with -100 ignored
//   gelu           gelu(x), exact, or the tanh form when tanh (bool []) is true
//   block          a pre-norm GPT block on x [B, T, C] with `heads` (int64 []) causal heads:
//                  h = x + proj(attention(qkv(ln1(x)))), y = h + fc2(gelu(fc1(ln2(h)))), every
//                  weight and bias moving with x
#include <attograd/attograd.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "npy_case.h"

namespace {

using tools::Case;

using Function = std::function<ag::Tensor(const std::vector<ag::Tensor>&)>;

// f of the named inputs, each moving along its tangent t_<name> when the case gives one: the
// value and J v, by the fast kernels and by the reference twins.
void run(const Case& c, const std::vector<std::string>& names, const Function& f) {
  std::vector<ag::Tensor> inputs, tangents;
  for (const std::string& name : names) {
    inputs.push_back(c.read(name));
    tangents.push_back(c.has("t_" + name) ? c.read("t_" + name) : ag::Tensor());
  }
  ag::JvpResult fast = ag::jvp(f, inputs, tangents);
  c.write("output", fast.output);
  c.write("tangent", fast.tangent);
  ag::KernelGuard reference(ag::Kernels::Reference);
  ag::JvpResult twin = ag::jvp(f, inputs, tangents);
  c.write("reference_output", twin.output);
  c.write("reference_tangent", twin.tangent);
}

void attention(const Case& c) {
  ag::Tensor mask = c.has("lengths")
                        ? ag::key_padding_mask(c.read("lengths").to_vector<std::int64_t>(), c.read("k").size(2))
                        : ag::Tensor();
  bool causal = c.has("causal") && c.read("causal").item<bool>();
  std::optional<double> scale;
  if (c.has("scale")) scale = c.read("scale").item();
  run(c, {"q", "k", "v"}, [&](const std::vector<ag::Tensor>& in) {
    return ag::scaled_dot_product_attention(in[0], in[1], in[2], mask, causal, false, scale).output;
  });
}

void layer_norm(const Case& c) {
  run(c, {"x", "weight", "bias"},
      [](const std::vector<ag::Tensor>& in) { return ag::layer_norm(in[0], in[1], in[2], 1e-5); });
}

void cross_entropy(const Case& c) {
  ag::Tensor targets = c.read("targets");
  run(c, {"logits"}, [&](const std::vector<ag::Tensor>& in) { return ag::cross_entropy(in[0], targets); });
}

void gelu(const Case& c) {
  auto form = c.has("tanh") && c.read("tanh").item<bool>() ? ag::GeluApproximation::Tanh : ag::GeluApproximation::None;
  run(c, {"x"}, [form](const std::vector<ag::Tensor>& in) { return in[0].gelu(form); });
}

void block(const Case& c) {
  std::int64_t heads = c.read("heads").item<std::int64_t>();
  std::vector<std::string> names = {"x",    "ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w", "proj_b",
                                    "ln2_w", "ln2_b", "fc1_w", "fc1_b", "fc2_w", "fc2_b"};
  run(c, names, [heads](const std::vector<ag::Tensor>& in) {
    const ag::Tensor& x = in[0];
    std::int64_t b = x.size(0), t = x.size(1), width = x.size(2);
    ag::Tensor qkv = ag::linear(ag::layer_norm(x, in[1], in[2], 1e-5), in[3], in[4]);
    ag::Tensor attended = ag::scaled_dot_product_attention_packed(qkv, heads, {}, true).output;  // [B, T, H, d]
    ag::Tensor h = x + ag::linear(attended.reshape({b, t, width}), in[5], in[6]);
    ag::Tensor mlp = ag::linear(ag::linear_gelu(ag::layer_norm(h, in[7], in[8], 1e-5), in[9], in[10]), in[11], in[12]);
    return h + mlp;
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: forward_grads attention|layer_norm|cross_entropy|gelu|block IN_DIR OUT_DIR\n";
    return 2;
  }
  std::string name = argv[1];
  Case c{argv[2], argv[3]};
  try {
    if (name == "attention")
      attention(c);
    else if (name == "layer_norm")
      layer_norm(c);
    else if (name == "cross_entropy")
      cross_entropy(c);
    else if (name == "gelu")
      gelu(c);
    else if (name == "block")
      block(c);
    else {
      std::cerr << "forward_grads: unknown case '" << name << "'\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "forward_grads: " << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
