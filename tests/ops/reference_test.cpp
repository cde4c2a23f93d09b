// Checks ops/reference/: each reference kernel against its fast twin, op by op, value and every
// input's gradient, in float64 (to 1e-12 of the largest element) and float32 (1e-5), over odd,
// non-square shapes and every optional argument; and each reference kernel by finite differences
// on its own, called directly.
#include <cmath>
#include <functional>

#include "../../ops/call_counts.h"
#include "../test_util.h"

namespace ag {
namespace {

using test::normal_leaf;

double relative_error(const Tensor& fast, const Tensor& reference) {
  EXPECT_EQ(fast.shape(), reference.shape());
  Tensor a = fast.to(kFloat64), b = reference.to(kFloat64);
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(a.data_ptr<double>()[i] - b.data_ptr<double>()[i]));
    scale = std::max(scale, std::abs(b.data_ptr<double>()[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `op` on copies of `inputs` (float64 leaves) in `dtype` under each kernel setting, with
// a fixed random weighting of the output as the loss; the outputs and every input's gradient
// must agree. Also checks that the reference run really called the reference kernel `name`.
void expect_routes_agree(const std::string& name, const Op& op, const std::vector<Tensor>& inputs, DType dtype) {
  SCOPED_TRACE(fmt::format("{} in {}", name, dtype_name(dtype)));
  double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
  std::vector<Tensor> outputs, grads[2];
  for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
    KernelGuard guard(k);
    testing::CountCalls counting;
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) in.push_back(is_floating(t.dtype()) ? t.detach().to(dtype).requires_grad_() : t);
    Tensor y = op(in);
    Generator gen(1);
    (y * randn(y.shape(), gen, dtype)).sum().backward();
    outputs.push_back(y.detach());
    std::size_t route = k == Kernels::Fast ? 0 : 1;
    for (const Tensor& t : in)
      if (is_floating(t.dtype())) grads[route].push_back(t.grad());
    EXPECT_EQ(counting.reference()[name], k == Kernels::Fast ? 0 : 1);
  }
  EXPECT_LE(relative_error(outputs[0], outputs[1]), tol) << "output";
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_EQ(grads[0][i].defined(), grads[1][i].defined()) << "gradient of input " << i;
    if (grads[0][i].defined() && grads[1][i].defined()) {  // undefined: an input the call did not use
      EXPECT_LE(relative_error(grads[0][i], grads[1][i]), tol) << "gradient of input " << i;
    }
  }
}

void expect_routes_agree(const std::string& name, const Op& op, const std::vector<Tensor>& inputs) {
  for (DType dtype : {kFloat64, kFloat32}) expect_routes_agree(name, op, inputs, dtype);
}

// The reference kernel itself, by finite differences (it is a composition, so this checks that
// it is differentiable through, not just equal to the fast op).
void expect_gradcheck(const Op& op, const std::vector<Tensor>& inputs) {
  KernelGuard guard(Kernels::Reference);
  EXPECT_TRUE(gradcheck(op, inputs));
}

TEST(Reference, Linear) {
  Generator gen(2);
  Tensor x = normal_leaf({3, 5, 7}, gen), w = normal_leaf({6, 7}, gen), b = normal_leaf({6}, gen);
  Tensor x1 = normal_leaf({7}, gen);
  for (bool bias : {true, false}) {
    Op f = [bias](const std::vector<Tensor>& in) { return linear(in[0], in[1], bias ? in[2] : Tensor()); };
    expect_routes_agree("linear", f, {x, w, b});
    expect_routes_agree("linear", f, {x1, w, b});  // a single row, 1-d
    expect_gradcheck(f, {x, w, b});
  }
}

TEST(Reference, GeluAndLinearGelu) {
  Generator gen(3);
  Tensor x = normal_leaf({4, 9}, gen) * 3.0, w = normal_leaf({5, 9}, gen), b = normal_leaf({5}, gen);
  x = x.detach().requires_grad_();
  for (GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
    Op g = [a](const std::vector<Tensor>& in) { return gelu(in[0], a); };
    expect_routes_agree("gelu", g, {x});
    expect_gradcheck(g, {x});
    for (bool bias : {true, false}) {
      Op f = [a, bias](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], bias ? in[2] : Tensor(), a); };
      expect_routes_agree("linear_gelu", f, {x, w, b});
      expect_gradcheck(f, {x, w, b});
    }
  }
}

TEST(Reference, GeluFarTails) {
  // GELU(x) for x far below 0 is tiny and must not cancel to 0 (Phi is written with erfc).
  KernelGuard guard(Kernels::Reference);
  Tensor x = from_vector<double>({-30.0, -10.0, 0.0, 10.0}, {4});
  Tensor y = gelu(x);
  EXPECT_NEAR(y.data_ptr<double>()[1] / (-10.0 * 0.5 * std::erfc(10.0 / std::sqrt(2.0))), 1.0, 1e-14);
  EXPECT_EQ(y.data_ptr<double>()[2], 0.0);
  EXPECT_NEAR(y.data_ptr<double>()[3], 10.0, 1e-14);
}

TEST(Reference, Embedding) {
  Generator gen(4);
  Tensor w = normal_leaf({11, 6}, gen);
  Tensor ids = from_vector<std::int64_t>({3, 0, 10, 3, 3, 7}, {2, 3});  // repeated ids add up
  Op f = [ids](const std::vector<Tensor>& in) { return embedding(in[0], ids); };
  expect_routes_agree("embedding", f, {w});
  expect_gradcheck(f, {w});
}

TEST(Reference, LayerNorm) {
  Generator gen(5);
  Tensor x = normal_leaf({3, 4, 21}, gen), w = normal_leaf({21}, gen), b = normal_leaf({21}, gen);
  for (bool affine_w : {true, false})
    for (bool affine_b : {true, false}) {
      Op f = [=](const std::vector<Tensor>& in) {
        return layer_norm(in[0], affine_w ? in[1] : Tensor(), affine_b ? in[2] : Tensor(), 1e-3);
      };
      expect_routes_agree("layer_norm", f, {x, w, b});
      expect_gradcheck(f, {x, w, b});
    }
}

TEST(Reference, RmsNorm) {
  Generator gen(15);
  Tensor x = normal_leaf({3, 4, 21}, gen), w = normal_leaf({21}, gen);
  for (bool affine : {true, false}) {
    Op f = [=](const std::vector<Tensor>& in) { return rms_norm(in[0], affine ? in[1] : Tensor(), 1e-3); };
    expect_routes_agree("rms_norm", f, {x, w});
    expect_gradcheck(f, {x, w});
  }
}

TEST(Reference, Swiglu) {
  Generator gen(18);
  Tensor x = normal_leaf({3, 4, 7}, gen), g = normal_leaf({10, 7}, gen), u = normal_leaf({10, 7}, gen),
         d = normal_leaf({5, 10}, gen);
  Op f = [](const std::vector<Tensor>& in) { return swiglu(in[0], in[1], in[2], in[3]); };
  expect_routes_agree("swiglu", f, {x, g, u, d});
  expect_gradcheck(f, {x, g, u, d});
}

TEST(Reference, CrossEntropy) {
  Generator gen(6);
  Tensor logits = normal_leaf({3, 5, 13}, gen);
  Tensor targets = from_vector<std::int64_t>({0, 12, 4, -100, 7, 1, 1, 2, 3, -100, 11, 5, 6, 8, 9}, {3, 5});
  Op f = [targets](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); };
  expect_routes_agree("cross_entropy", f, {logits});
  expect_gradcheck(f, {logits});
  // Every position ignored: loss 0 and zero gradient on both routes.
  Tensor ignored = full({3, 5}, -100, kInt64);
  Op g = [ignored](const std::vector<Tensor>& in) { return cross_entropy(in[0], ignored); };
  expect_routes_agree("cross_entropy", g, {logits});
  KernelGuard guard(Kernels::Reference);
  EXPECT_EQ(cross_entropy(logits, ignored).item(), 0.0);
}

struct MaskCase {
  const char* name;
  Tensor mask;
  bool causal;
};

std::vector<MaskCase> mask_cases(std::int64_t b, std::int64_t tq, std::int64_t tk) {
  Tensor pattern = full({tq, tk}, 1, kBool);
  pattern.mutable_data_ptr<bool>()[1] = false;
  Tensor all_masked_row = full({tq, tk}, 1, kBool);  // query 0 sees no key: zero weights, zero output
  for (std::int64_t j = 0; j < tk; ++j) all_masked_row.mutable_data_ptr<bool>()[j] = false;
  std::vector<std::int64_t> lengths;
  for (std::int64_t i = 0; i < b; ++i) lengths.push_back(tk - i);
  return {{"none", {}, false},
          {"causal", {}, true},
          {"key padding", key_padding_mask(lengths, tk), false},
          {"key padding and causal", key_padding_mask(lengths, tk), true},
          {"pattern", pattern, false},
          {"fully masked row", all_masked_row, false}};
}

TEST(Reference, AttentionEveryLayoutAndMask) {
  Generator gen(7);
  std::int64_t b = 2, h = 3, tq = 5, tk = 7, d = 4, dv = 6;
  Tensor q = normal_leaf({b, h, tq, d}, gen), k = normal_leaf({b, h, tk, d}, gen), v = normal_leaf({b, h, tk, dv}, gen);
  Tensor qt = normal_leaf({b, tq, h, d}, gen), kt = normal_leaf({b, tk, h, d}, gen),
         vt = normal_leaf({b, tk, h, dv}, gen);
  for (const MaskCase& c : mask_cases(b, tq, tk)) {
    SCOPED_TRACE(c.name);
    for (bool need_weights : {false, true}) {
      auto pick = [need_weights](const AttentionResult& r) {
        return need_weights ? r.output + r.weights.sum() : r.output;
      };
      Op heads_first = [&](const std::vector<Tensor>& in) {
        return pick(scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.causal, need_weights));
      };
      Op heads_last = [&](const std::vector<Tensor>& in) {
        return pick(scaled_dot_product_attention_bthd(in[0], in[1], in[2], c.mask, c.causal, need_weights, 0.3));
      };
      expect_routes_agree("scaled_dot_product_attention", heads_first, {q, k, v});
      expect_routes_agree("scaled_dot_product_attention", heads_last, {qt, kt, vt});
    }
    expect_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.causal).output;
        },
        {q, k, v});
  }
}

TEST(Reference, PackedAttention) {
  Generator gen(8);
  std::int64_t b = 2, t = 6, heads = 3, d = 4;
  Tensor qkv = normal_leaf({b, t, 3 * heads * d}, gen);
  for (const MaskCase& c : mask_cases(b, t, t)) {
    SCOPED_TRACE(c.name);
    Op f = [&](const std::vector<Tensor>& in) {
      return scaled_dot_product_attention_packed(in[0], heads, c.mask, c.causal).output;
    };
    expect_routes_agree("scaled_dot_product_attention", f, {qkv});
    expect_gradcheck(f, {qkv});
  }
}

TEST(Reference, BadCallsAreCheckedAsOnTheFastRoute) {
  // The public op checks its arguments before it picks a route: the same messages either way.
  KernelGuard guard(Kernels::Reference);
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [] {
        linear(zeros({2, 3}), zeros({4, 5}));
      },
      "linear: input of shape [2, 3] does not fit weight"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [] {
        scaled_dot_product_attention(zeros({1, 2, 3, 4}), zeros({1, 2, 5, 4}), zeros({1, 2, 5, 6}),
                                     full({2, 5}, 1, kBool));
      },
      "scaled_dot_product_attention: attn_mask of shape [2, 5] does not broadcast"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [] {
        cross_entropy(zeros({2, 3}), from_vector<std::int64_t>({0, 3}, {2}));
      },
      "cross_entropy: target 3"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [] {
        embedding(zeros({4, 2}), from_vector<std::int64_t>({4}, {1}));
      },
      "embedding: id 4 at position 0"));
}

// AdamW's update and clipping: the optimizer under each route, over many parameters of both
// dtypes, two groups and several steps.
TEST(Reference, AdamAndClipping) {
  for (DType dtype : {kFloat64, kFloat32})
    for (bool decoupled : {true, false}) {
      SCOPED_TRACE(fmt::format("{} decoupled {}", dtype_name(dtype), decoupled));
      std::vector<Tensor> after[2];
      double norms[2] = {};
      for (Kernels k : {Kernels::Fast, Kernels::Reference}) {
        KernelGuard guard(k);
        testing::CountCalls counting;
        Generator gen(9);
        std::vector<Tensor> a{randn({3, 17}, gen, dtype).requires_grad_(), randn({9001}, gen, dtype).requires_grad_()};
        std::vector<Tensor> b{randn({5}, gen, dtype).requires_grad_()};
        std::vector<optim::ParamGroup> groups{{a, 0.1}, {b, 0.0}};
        std::unique_ptr<optim::Optimizer> opt;
        if (decoupled)
          opt = std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
        else
          opt = std::make_unique<optim::Adam>(groups, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
        std::vector<Tensor> all{a[0], a[1], b[0]};
        for (int step = 0; step < 3; ++step) {
          opt->zero_grad();
          Tensor loss = (a[0] * a[0]).sum() + (a[1].exp()).sum() * 1e-3 + (b[0] * 3.0).sum();
          loss.backward();
          norms[k == Kernels::Fast ? 0 : 1] = optim::clip_grad_norm(all, 1.0);
          opt->step();
        }
        for (const Tensor& p : all) after[k == Kernels::Fast ? 0 : 1].push_back(p.detach().clone());
        EXPECT_EQ(counting.reference()["adam_update"], k == Kernels::Fast ? 0 : 3 * 3);
        EXPECT_EQ(counting.reference()["clip_grad_norm"], k == Kernels::Fast ? 0 : 3);
      }
      double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
      EXPECT_LE(std::abs(norms[0] - norms[1]) / norms[1], tol);
      for (std::size_t i = 0; i < after[0].size(); ++i) EXPECT_LE(relative_error(after[0][i], after[1][i]), tol) << i;
    }
}

}  // namespace
}  // namespace ag
