// Checks nn/sequential.h: order, names, parameters, state, gradients and errors.
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;

std::shared_ptr<nn::Sequential> mlp(Generator& gen) {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 5, true, gen), std::make_shared<nn::Tanh>(),
                                          std::make_shared<nn::Linear>(5, 2, true, gen));
}

TEST(Sequential, ForwardChainsTheModulesInOrder) {
  Generator gen(1);
  auto seq = mlp(gen);
  Tensor x = randn({4, 3}, gen);
  auto first = seq->ptr<nn::Linear>(0), last = seq->ptr<nn::Linear>(2);
  Tensor by_hand = last->forward(first->forward(x).tanh());
  EXPECT_TRUE(all_close(seq->forward(x), by_hand, 0));
  EXPECT_TRUE(all_close((*seq)(x), by_hand, 0));
  EXPECT_TRUE(all_close((*first)(x), first->forward(x), 0));  // a layer's call is its forward
  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ(&(*seq)[1], seq->ptr<nn::Tanh>(1).get());
}

TEST(Sequential, NamesItsModulesByPositionAndCountsTheirParameters) {
  Generator gen(2);
  auto seq = mlp(gen);
  std::vector<std::string> names;
  for (const auto& [name, t] : seq->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(seq->parameter_count(),
            seq->ptr<nn::Linear>(0)->parameter_count() + seq->ptr<nn::Linear>(2)->parameter_count());
  EXPECT_EQ(seq->parameter_count(), 3 * 5 + 5 + 5 * 2 + 2);
  // Nested, the names join with dots like any submodule's.
  nn::Sequential outer(std::make_shared<nn::ReLU>(), seq);
  EXPECT_EQ(outer.named_parameters()[0].first, "1.0.weight");
}

TEST(Sequential, StateRoundTripsByName) {
  Generator gen(3), other(4);
  auto saved = mlp(gen), restored = mlp(other);
  Tensor x = randn({2, 3}, gen);
  ASSERT_FALSE(all_close(saved->forward(x), restored->forward(x), 1e-3));
  io::TensorFile file = io::parse_safetensors(io::safetensors_bytes(saved->named_parameters()));
  for (auto& [name, t] : restored->named_parameters()) {
    const Tensor* stored = file.find(name);
    ASSERT_NE(stored, nullptr) << name;
    Tensor(t).set_data(stored->clone());
  }
  EXPECT_TRUE(all_close(restored->forward(x), saved->forward(x), 0));
}

TEST(Sequential, ModesReachEveryModule) {
  Generator gen(5);
  nn::Sequential seq(std::make_shared<nn::Linear>(3, 3, true, gen), std::make_shared<nn::Dropout>(0.5, gen));
  Tensor x = randn({4, 3}, gen);
  seq.eval();
  EXPECT_FALSE(seq.ptr<nn::Dropout>(1)->is_training());
  EXPECT_TRUE(all_close(seq.forward(x), seq.ptr<nn::Linear>(0)->forward(x), 0));  // dropout is the identity
}

TEST(Sequential, Gradcheck) {
  Generator gen(6);
  nn::Sequential seq(std::make_shared<nn::Linear>(3, 5, true, gen), std::make_shared<nn::GELU>(),
                     std::make_shared<nn::Linear>(5, 4, true, gen), std::make_shared<nn::Sigmoid>(),
                     std::make_shared<nn::Linear>(4, 2, true, gen), std::make_shared<nn::ReLU>());
  seq.to(kFloat64);
  Tensor x = test::normal_leaf({7, 3}, gen);
  EXPECT_TRUE(test::gradcheck_module(seq, {x}, [&] { return seq.forward(x); }));
}

TEST(Sequential, ErrorsNameSequential) {
  Generator gen(7);
  auto seq = mlp(gen);
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { nn::Sequential().forward(ones({2})); },
                                                 "Sequential: forward on an empty Sequential"));
  EXPECT_TRUE(
      throws_with<std::out_of_range>([&] { (*seq)[3]; }, "Sequential: index 3 is out of range for its 3 modules"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { seq->ptr<nn::Linear>(1); },
                                                 "Sequential: module 1 is ag::nn::Tanh, not ag::nn::Linear"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { seq->push_back(std::shared_ptr<nn::ReLU>()); },
                                                 "Sequential: push_back got a null module"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        seq->forward(ones({4, 6}));
      },
      "Sequential: module 0 (ag::nn::Linear): linear: input of shape [4, 6] does not fit weight of shape [5, 3]"));
}

}  // namespace
}  // namespace ag
