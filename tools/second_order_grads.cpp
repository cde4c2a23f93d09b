// second_order_grads: the attograd side of the second-order PyTorch parity check
// (tools/second_order_parity.py).
//
//   second_order_grads CASE IN_DIR OUT_DIR
//
// Reads the case's inputs from IN_DIR/<name>.npy (float64, targets and lengths int64, flags
// bool), differentiates twice with ag::grad(..., {.create_graph = true}), and writes every
// result as OUT_DIR/<name>.npy (float64; a scalar as a 0-d array). The cases:
//
//   attention       L = sum(sdpa(q, k, v) * g). Writes loss, grad_{q,k,v} = dL/d{q,k,v} and
//                   hvp_{q,k,v} = H u, the product of the joint Hessian of L in (q, k, v) with
//                   the direction (u_q, u_k, u_v); also hvp_q_only, ag::hvp (functional.h) of L
//                   as a function of q alone in the direction u_q. Optional inputs: lengths
//                   (int64 [B]: a key padding mask from ag::key_padding_mask), causal (bool [],
//                   true for causal attention) and scale (float64 [], else 1 / sqrt(d)).
//   layer_norm      y = layer_norm(x, weight, bias, 1e-5), L = sum(y * g) + sum(y * y) / 2.
//                   Writes loss, grad_{x,weight,bias} and hvp_{x,weight,bias} for the direction
//                   (u_x, u_weight, u_bias).
//   gradient_penalty  the MLP logits = linear(gelu(linear(x, w1, b1)), w2, b2) (erf GELU), the
//                   loss L = cross_entropy(logits, targets) and the penalty P = ||dL/dx||^2.
//                   Writes loss, grad_x = dL/dx, penalty, and dP/d{x,w1,b1,w2,b2} as
//                   penalty_grad_<name>; then the same with the fused ag::linear_gelu for the
//                   first layer, under the prefix "fused_".
//   rms_norm        y = rms_norm(x, weight, 1e-5), L = sum(y * g) + sum(y * y) / 2. Writes loss,
//                   grad_{x,weight} and hvp_{x,weight} for the direction (u_x, u_weight).
//   swiglu          y = swiglu(x, gate, up, down), L = sum(y * g) + sum(y * y) / 2. Writes loss,
//                   grad_{x,gate,up,down} and hvp_{x,gate,up,down} for the direction
//                   (u_x, u_gate, u_up, u_down); also hvp_x_only, ag::hvp (forward over reverse)
//                   of L as a function of x alone in the direction u_x.
#include <attograd/attograd.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Case {
  std::string in_dir, out_dir;

  bool has(const std::string& name) const { return std::filesystem::exists(path(in_dir, name)); }
  ag::Tensor read(const std::string& name) const { return ag::io::load_npy(path(in_dir, name)); }
  // An input to differentiate with respect to: a fresh leaf that requires grad.
  ag::Tensor leaf(const std::string& name) const { return read(name).requires_grad_(); }
  void write(const std::string& name, const ag::Tensor& t) const { ag::io::save_npy(path(out_dir, name), t.detach()); }
  void write_all(const std::string& prefix, const std::vector<std::string>& names,
                 const std::vector<ag::Tensor>& values) const {
    for (std::size_t i = 0; i < names.size(); ++i) write(prefix + names[i], values[i]);
  }

  static std::string path(const std::string& dir, const std::string& name) { return dir + "/" + name + ".npy"; }
};

// The gradient of `loss` in `inputs` and the product of its joint Hessian with the direction
// `u` (one tensor per input). The first pass keeps its graph (create_graph), so the gradient
// is a function of the inputs again; differentiating sum_i <grad_i, u_i> once more, which
// ag::grad does when given u as the gradient of its outputs, gives H u.
struct FirstAndSecond {
  std::vector<ag::Tensor> grad, hvp;
};
FirstAndSecond grad_and_hvp(const ag::Tensor& loss, const std::vector<ag::Tensor>& inputs,
                            const std::vector<ag::Tensor>& u) {
  std::vector<ag::Tensor> g = ag::grad({loss}, inputs, {}, {.create_graph = true});
  std::vector<ag::Tensor> hv = ag::grad(g, inputs, u);
  return {g, hv};
}

// Attention: the Hessian of a loss linear in the output is not zero, since the output is not
// linear in q and k (softmax) nor jointly in (k, v) or (q, v) (weights times v). The fused op's
// backward pass recomputes the attention from q, k and v with ops when create_graph is on; this
// checks that route, masks included, against PyTorch.
void attention(const Case& c) {
  ag::Tensor q = c.leaf("q"), k = c.leaf("k"), v = c.leaf("v"), g = c.read("g");
  ag::Tensor mask =
      c.has("lengths") ? ag::key_padding_mask(c.read("lengths").to_vector<std::int64_t>(), k.size(2)) : ag::Tensor();
  bool causal = c.has("causal") && c.read("causal").item<bool>();
  std::optional<double> scale;
  if (c.has("scale")) scale = c.read("scale").item();
  auto loss_of = [&](const ag::Tensor& q_, const ag::Tensor& k_, const ag::Tensor& v_) {
    return (ag::scaled_dot_product_attention(q_, k_, v_, mask, causal, false, scale).output * g).sum();
  };

  std::vector<std::string> names = {"q", "k", "v"};
  ag::Tensor loss = loss_of(q, k, v);
  FirstAndSecond r = grad_and_hvp(loss, {q, k, v}, {c.read("u_q"), c.read("u_k"), c.read("u_v")});
  c.write("loss", loss);
  c.write_all("grad_", names, r.grad);
  c.write_all("hvp_", names, r.hvp);
  // The q-q block alone, through autograd/functional.h.
  c.write("hvp_q_only",
          ag::hvp([&](const ag::Tensor& x) { return loss_of(x, k.detach(), v.detach()); }, q.detach(), c.read("u_q")));
}

// Layer norm: the loss has a linear part, whose Hessian is layer norm's own second derivative
// (x-x and the mixed x-weight blocks; it is zero in bias), and a quadratic part, which couples
// every pair, bias included.
void layer_norm(const Case& c) {
  ag::Tensor x = c.leaf("x"), weight = c.leaf("weight"), bias = c.leaf("bias"), g = c.read("g");
  ag::Tensor y = ag::layer_norm(x, weight, bias, 1e-5);
  ag::Tensor loss = (y * g).sum() + (y * y).sum() * 0.5;
  std::vector<std::string> names = {"x", "weight", "bias"};
  FirstAndSecond r = grad_and_hvp(loss, {x, weight, bias}, {c.read("u_x"), c.read("u_weight"), c.read("u_bias")});
  c.write("loss", loss);
  c.write_all("grad_", names, r.grad);
  c.write_all("hvp_", names, r.hvp);
}

// The loss of the layer_norm case, for any layer: a linear part, whose Hessian is the layer's
// own second derivative, and a quadratic part, which couples every pair of inputs.
ag::Tensor linear_and_square(const ag::Tensor& y, const ag::Tensor& g) { return (y * g).sum() + (y * y).sum() * 0.5; }

// RMSNorm: as layer norm, without the centring and the bias.
void rms_norm(const Case& c) {
  ag::Tensor x = c.leaf("x"), weight = c.leaf("weight");
  ag::Tensor loss = linear_and_square(ag::rms_norm(x, weight, 1e-5), c.read("g"));
  std::vector<std::string> names = {"x", "weight"};
  FirstAndSecond r = grad_and_hvp(loss, {x, weight}, {c.read("u_x"), c.read("u_weight")});
  c.write("loss", loss);
  c.write_all("grad_", names, r.grad);
  c.write_all("hvp_", names, r.hvp);
}

// SwiGLU: its second derivative couples each weight with x and with the other weights (the
// gate multiplies the up projection), and silu'' enters through the gate.
void swiglu(const Case& c) {
  std::vector<std::string> names = {"x", "gate", "up", "down"};
  std::vector<ag::Tensor> in, u;
  for (const std::string& name : names) {
    in.push_back(c.leaf(name));
    u.push_back(c.read("u_" + name));
  }
  ag::Tensor g = c.read("g");
  auto loss_of = [&](const ag::Tensor& x) { return linear_and_square(ag::swiglu(x, in[1], in[2], in[3]), g); };
  ag::Tensor loss = loss_of(in[0]);
  FirstAndSecond r = grad_and_hvp(loss, in, u);
  c.write("loss", loss);
  c.write_all("grad_", names, r.grad);
  c.write_all("hvp_", names, r.hvp);
  c.write("hvp_x_only", ag::hvp(loss_of, in[0].detach(), u[0]));
}

// A gradient penalty (as in WGAN-GP or input-gradient regularisation): P = ||dL/dx||^2 is a
// function of the first gradient, so dP/dtheta goes through the backward pass of every op:
// cross_entropy's softmax, both linears, and GELU's second derivative.
void gradient_penalty(const Case& c) {
  using Layer = std::function<ag::Tensor(const ag::Tensor&, const ag::Tensor&, const ag::Tensor&)>;
  Layer separate = [](const ag::Tensor& x, const ag::Tensor& w, const ag::Tensor& b) {
    return ag::gelu(ag::linear(x, w, b), ag::GeluApproximation::None);
  };
  Layer fused = [](const ag::Tensor& x, const ag::Tensor& w, const ag::Tensor& b) {
    return ag::linear_gelu(x, w, b, ag::GeluApproximation::None);
  };
  ag::Tensor targets = c.read("targets");
  for (auto [prefix, first_layer] : {std::pair{"", separate}, std::pair{"fused_", fused}}) {
    std::vector<std::string> names = {"x", "w1", "b1", "w2", "b2"};
    std::vector<ag::Tensor> leaves;
    for (const std::string& name : names) leaves.push_back(c.leaf(name));
    const ag::Tensor &x = leaves[0], &w1 = leaves[1], &b1 = leaves[2], &w2 = leaves[3], &b2 = leaves[4];
    ag::Tensor loss = ag::cross_entropy(ag::linear(first_layer(x, w1, b1), w2, b2), targets);
    ag::Tensor dx = ag::grad({loss}, {x}, {}, {.create_graph = true})[0];
    ag::Tensor penalty = (dx * dx).sum();
    std::string p = prefix;
    c.write(p + "loss", loss);
    c.write(p + "grad_x", dx);
    c.write(p + "penalty", penalty);
    c.write_all(p + "penalty_grad_", names, ag::grad({penalty}, leaves));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: second_order_grads attention|layer_norm|gradient_penalty|rms_norm|swiglu IN_DIR OUT_DIR\n";
    return 2;
  }
  std::string name = argv[1];
  Case c{argv[2], argv[3]};
  try {
    if (name == "attention")
      attention(c);
    else if (name == "layer_norm")
      layer_norm(c);
    else if (name == "gradient_penalty")
      gradient_penalty(c);
    else if (name == "rms_norm")
      rms_norm(c);
    else if (name == "swiglu")
      swiglu(c);
    else {
      std::cerr << "second_order_grads: unknown case '" << name << "'\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "second_order_grads: " << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
