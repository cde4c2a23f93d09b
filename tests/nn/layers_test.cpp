// Checks nn/layers.cpp: initialisation, forward against the ops, gradients w.r.t. inputs and
// parameters.
#include <cmath>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::gradcheck_module;
using test::normal_leaf;
using test::throws_with;

TEST(Linear, PyTorchDefaultInitBounds) {
  Generator gen(1);
  nn::Linear layer(16, 8, true, gen);
  EXPECT_EQ(layer.weight.shape(), (Shape{8, 16}));
  EXPECT_EQ(layer.bias.shape(), (Shape{8}));
  double bound = 1 / std::sqrt(16.0);
  double max_seen = 0;
  for (float w : layer.weight.to_vector<float>()) max_seen = std::max(max_seen, std::abs(static_cast<double>(w)));
  EXPECT_LE(max_seen, bound);
  EXPECT_GT(max_seen, 0.8 * bound);  // 128 draws fill the range
  EXPECT_FALSE(nn::Linear(3, 2, false).bias.defined());
}

TEST(Linear, GradcheckInputAndParameters) {
  Generator gen(2);
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    nn::Linear layer(5, 3, bias, gen);
    layer.to(kFloat64);
    Tensor x = normal_leaf({2, 4, 5}, gen);
    EXPECT_TRUE(gradcheck_module(layer, {x}, [&] { return layer.forward(x); }));
    EXPECT_EQ(layer.parameter_count(), bias ? 18 : 15);
  }
}

TEST(Embedding, LookupAndGradcheck) {
  Generator gen(3);
  nn::Embedding table(6, 4, gen);
  table.to(kFloat64);
  Tensor ids = from_vector<std::int64_t>({5, 0, 5, 2}, {2, 2});
  Tensor y = table.forward(ids);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 4}));
  EXPECT_TRUE(all_close(y.slice(0, 0, 1).slice(1, 0, 1).reshape({1, 4}), table.weight.slice(0, 5, 6), 0));
  EXPECT_TRUE(gradcheck_module(table, {}, [&] { return table.forward(ids); }));
}

TEST(LayerNorm, GradcheckWithAndWithoutBias) {
  Generator gen(4);
  for (bool bias : {true, false}) {
    nn::LayerNorm norm(5, 1e-5, bias);
    norm.to(kFloat64);
    // Perturb weight and bias away from 1 and 0 so their gradients are not special cases.
    for (Tensor p : norm.parameters()) p.set_data((p.detach() + randn(p.shape(), gen, kFloat64) * 0.3).detach());
    Tensor x = normal_leaf({3, 2, 5}, gen);
    EXPECT_TRUE(gradcheck_module(norm, {x}, [&] { return norm.forward(x); }));
  }
}

TEST(RMSNorm, GradcheckAndChoiceByName) {
  Generator gen(14);
  nn::RMSNorm norm(5);
  norm.to(kFloat64);
  EXPECT_EQ(norm.named_parameters().size(), 1u);  // weight only: no bias
  norm.weight.set_data((norm.weight.detach() + randn({5}, gen, kFloat64) * 0.3).detach());
  Tensor x = normal_leaf({3, 2, 5}, gen);
  EXPECT_TRUE(gradcheck_module(norm, {x}, [&] { return norm.forward(x); }));
  EXPECT_TRUE(all_close(norm.forward(x), rms_norm(x, norm.weight, 1e-6), 0));
  EXPECT_NE(dynamic_cast<nn::RMSNorm*>(nn::make_norm(nn::NormKind::Rms, 4, true).get()), nullptr);
  EXPECT_NE(dynamic_cast<nn::LayerNorm*>(nn::make_norm(nn::NormKind::Layer, 4, true).get()), nullptr);
  EXPECT_EQ(nn::parse_norm(nn::norm_name(nn::NormKind::Rms)), nn::NormKind::Rms);
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::parse_norm("batch"); },
                                                 "norm: unknown normalisation 'batch': expected 'layer' or 'rms'"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::RMSNorm(0); }, "RMSNorm: dim must be positive"));
}

TEST(Dropout, TrainVersusEval) {
  Generator gen(5);
  nn::Dropout drop(0.5, gen);
  Tensor x = ones({1000});
  Tensor y = drop.forward(x);
  double zeros_seen = 0;
  for (float v : y.to_vector<float>()) zeros_seen += v == 0.0f;
  EXPECT_GT(zeros_seen, 400);
  EXPECT_LT(zeros_seen, 600);
  drop.eval();
  EXPECT_TRUE(all_close(drop.forward(x), std::vector<double>(1000, 1.0), 0));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::Dropout(-0.1); },
                                                 "Dropout: probability must be in [0, 1], got -0.1"));
}

TEST(FeedForward, GradcheckBothGelus) {
  Generator gen(6);
  for (GeluApproximation g : {GeluApproximation::None, GeluApproximation::Tanh}) {
    nn::FeedForward ff(4, 7, 0.0, true, gen, g);
    ff.to(kFloat64);
    Tensor x = normal_leaf({2, 3, 4}, gen);
    EXPECT_TRUE(gradcheck_module(ff, {x}, [&] { return ff.forward(x); }));
  }
}

TEST(SwiGLU, GradcheckAndChoiceByName) {
  Generator gen(7);
  nn::SwiGLU mlp(5, 7, 0.0, gen);
  mlp.to(kFloat64);
  std::vector<std::string> names;
  for (const auto& [name, p] : mlp.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"gate_proj.weight", "up_proj.weight", "down_proj.weight"}));  // no biases
  Tensor x = normal_leaf({2, 3, 5}, gen);
  EXPECT_TRUE(gradcheck_module(mlp, {x}, [&] { return mlp.forward(x); }));
  EXPECT_TRUE(
      all_close(mlp.forward(x), swiglu(x, mlp.gate_proj->weight, mlp.up_proj->weight, mlp.down_proj->weight), 0));
  // Two thirds of the GELU MLP's hidden size, rounded up to a multiple of 8: the same parameters.
  EXPECT_EQ(nn::swiglu_hidden(512), 344);  // 341.3 -> 344
  EXPECT_EQ(nn::swiglu_hidden(192), 128);
  EXPECT_EQ(nn::swiglu_hidden(1), 8);
  EXPECT_NE(dynamic_cast<nn::SwiGLU*>(nn::make_mlp(nn::MlpKind::Swiglu, 4, 16, 0.0, true, gen).get()), nullptr);
  EXPECT_NE(dynamic_cast<nn::FeedForward*>(nn::make_mlp(nn::MlpKind::Gelu, 4, 16, 0.0, true, gen).get()), nullptr);
  EXPECT_EQ(nn::make_mlp(nn::MlpKind::Swiglu, 4, 16, 0.0, true, gen)->named_parameters()[0].second.shape(),
            (Shape{16, 4}));  // swiglu_hidden(16) = 16
  EXPECT_EQ(nn::parse_mlp(nn::mlp_name(nn::MlpKind::Swiglu)), nn::MlpKind::Swiglu);
  EXPECT_EQ(nn::parse_mlp(nn::mlp_name(nn::MlpKind::Gelu)), nn::MlpKind::Gelu);
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::parse_mlp("relu"); },
                                                 "mlp: unknown MLP 'relu': expected 'gelu' or 'swiglu'"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::swiglu_hidden(0); }, "swiglu_hidden: the GELU MLP's"));
}

TEST(Layers, Errors) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::Linear(0, 3); },
                                                 "Linear: sizes must be positive, got in_features=0"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        nn::Linear(4, 3).forward(ones({2, 5}));
      },
      "linear: input of shape [2, 5] does not fit weight of shape [3, 4]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        nn::LayerNorm(4).forward(ones({2, 5}));
      },
      "layer_norm: weight has shape [4], expected [5]"));
}

}  // namespace
}  // namespace ag
