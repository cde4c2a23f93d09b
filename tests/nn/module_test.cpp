// Checks nn/module.cpp: registration, dotted names, modes, dtype conversion.
#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

// A two-level module written for the test: a Linear and a list of two LayerNorms.
class Toy : public nn::Module {
 public:
  Toy() {
    proj = register_module("proj", std::make_shared<nn::Linear>(3, 4));
    norms = register_module("norms", std::make_shared<nn::ModuleList<nn::LayerNorm>>());
    norms->push_back(std::make_shared<nn::LayerNorm>(4));
    norms->push_back(std::make_shared<nn::LayerNorm>(4, 1e-5, /*bias=*/false));
    scale = register_parameter("scale", ones({1}));
    table = register_buffer("table", zeros({2, 2}));
  }
  void register_again() { register_parameter("scale", ones({1})); }
  void register_dotted() { register_parameter("a.b", ones({1})); }
  void share(const Tensor& t) { register_parameter("shared", t); }

  std::shared_ptr<nn::Linear> proj;
  std::shared_ptr<nn::ModuleList<nn::LayerNorm>> norms;
  Tensor scale, table;
};

std::vector<std::string> names_of(const std::vector<nn::NamedTensor>& named) {
  std::vector<std::string> names;
  for (const auto& [name, _] : named) names.push_back(name);
  return names;
}

TEST(Module, DottedNamesInRegistrationOrder) {
  Toy toy;
  EXPECT_EQ(names_of(toy.named_parameters()),
            (std::vector<std::string>{"scale", "proj.weight", "proj.bias", "norms.0.weight", "norms.0.bias",
                                      "norms.1.weight"}));
  EXPECT_EQ(names_of(toy.named_buffers()), (std::vector<std::string>{"table"}));
  // 1 + (3*4 + 4) + (4 + 4) + 4
  EXPECT_EQ(toy.parameter_count(), 29);
  for (const Tensor& p : toy.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, SharedTensorCountsOnce) {
  Toy toy;
  toy.share(toy.proj->weight);
  EXPECT_EQ(toy.parameter_count(), 29);
}

TEST(Module, ZeroGradTrainEval) {
  Toy toy;
  Tensor x = ones({2, 3});
  toy.norms->operator[](0).forward(toy.proj->forward(x)).sum().backward();
  EXPECT_TRUE(toy.proj->weight.grad().defined());
  toy.zero_grad();
  for (const Tensor& p : toy.parameters()) EXPECT_FALSE(p.grad().defined());
  toy.eval();
  EXPECT_FALSE(toy.is_training());
  EXPECT_FALSE(toy.norms->operator[](1).is_training());
  toy.train();
  EXPECT_TRUE(toy.proj->is_training());
}

TEST(Module, ToConvertsParametersAndBuffersInPlace) {
  Toy toy;
  Tensor handle = toy.proj->weight;  // a handle taken before the conversion
  float before = handle.at<float>({1, 2});
  toy.to(kFloat64);
  EXPECT_EQ(handle.dtype(), kFloat64);  // the same tensor, converted
  EXPECT_EQ(handle.at<double>({1, 2}), static_cast<double>(before));
  EXPECT_EQ(toy.table.dtype(), kFloat64);
  EXPECT_TRUE(handle.requires_grad());
  for (const Tensor& p : toy.parameters()) EXPECT_EQ(p.dtype(), kFloat64);
}

TEST(Module, Errors) {
  Toy toy;
  EXPECT_EQ(&(*toy.norms)[1], toy.norms->begin()[1].get());
  EXPECT_TRUE(throws_with<std::out_of_range>(
      [&] { (*toy.norms)[2]; }, "ModuleList<ag::nn::LayerNorm>: index 2 is out of range for its 2 modules"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { toy.register_again(); }, "Module: name 'scale' is already registered"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { toy.register_dotted(); },
                                                 "Module: name 'a.b' must be non-empty and contain no '.'"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { toy.to(kInt64); }, "Module::to: modules hold float tensors"));
}

TEST(Module, NamedModulesAndApplyVisitEveryModuleParentsFirst) {
  Toy toy;
  std::vector<std::string> names;
  for (auto& [name, m] : toy.named_modules()) names.push_back(name + ":" + nn::type_name(typeid(*m)));
  EXPECT_EQ(names, (std::vector<std::string>{":ag::(anonymous namespace)::Toy", "proj:ag::nn::Linear",
                                              "norms:ag::nn::ModuleList<ag::nn::LayerNorm>",
                                              "norms.0:ag::nn::LayerNorm", "norms.1:ag::nn::LayerNorm"}));
  // The const form lists the same modules.
  const Toy& same = toy;
  ASSERT_EQ(same.named_modules().size(), 5u);
  EXPECT_EQ(same.named_modules()[3].second, toy.norms->named_children()[0].second.get());
  // apply: a hand-written initialisation of every LayerNorm's weight, picked with dynamic_cast.
  int layer_norms = 0;
  toy.apply([&](nn::Module& m) {
    if (auto* ln = dynamic_cast<nn::LayerNorm*>(&m)) {
      ++layer_norms;
      NoGradGuard no_grad;
      for (Tensor p : ln->parameters()) p.fill_(0.5);
    }
  });
  EXPECT_EQ(layer_norms, 2);
  for (auto& [name, p] : toy.named_parameters()) {
    if (name.starts_with("norms.")) {
      EXPECT_TRUE(test::all_close(p, std::vector<double>(4, 0.5), 0)) << name;
    }
  }
}

// Every module can be called as m(args...), with forward's defaults, as in libtorch.
TEST(Module, EveryModuleIsCallable) {
  Generator gen(2);
  Tensor x = randn({2, 5, 8}, gen);
  nn::MultiHeadAttention mha(8, 2, {}, gen);
  EXPECT_TRUE(test::all_close(mha(x, x), mha.forward(x, x), 0));
  nn::SelfAttentionBlock block({.d_model = 8, .n_heads = 2, .d_ff = 16}, gen);
  EXPECT_TRUE(test::all_close(block(x), block.forward(x), 0));
  EXPECT_TRUE(test::all_close(block(x, Tensor(), true), block.forward(x, Tensor(), true), 0));
  nn::LearnedPositionalEmbedding learned(5, 8, gen);
  nn::SinusoidalPositionalEncoding sinusoidal(5, 8);
  EXPECT_TRUE(test::all_close(learned(x), learned.forward(x), 0));
  EXPECT_TRUE(test::all_close(sinusoidal(x), sinusoidal.forward(x), 0));
  nn::TransformerDecoderBlock decoder({.d_model = 8, .n_heads = 2, .d_ff = 16}, gen);
  EXPECT_TRUE(test::all_close(decoder(x, x), decoder.forward(x, x), 0));
  nn::GRU gru(8, 3, true, gen);
  EXPECT_TRUE(test::all_close(gru(x).last, gru.forward(x).last, 0));
  nn::GPT gpt({.vocab_size = 7, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 8}, gen);
  Tensor ids = randint(7, {2, 4}, gen);
  EXPECT_TRUE(test::all_close(gpt(ids), gpt.forward(ids), 0));
}

}  // namespace
}  // namespace ag
