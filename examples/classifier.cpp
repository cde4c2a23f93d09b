// classifier: a small Transformer encoder learns whether a sequence's first token comes back
// later in it, from a fixed dataset dealt out in shuffled batches (ag::data::TensorDataset and
// DataLoader), the way a torch.utils.data training loop reads. Every step of the data is a
// tensor op: the labels, the batches, the accuracy. With --state FILE it saves the model, the
// optimizer and the loader's place after every epoch, and a run started again with the same
// FILE goes on from there exactly as if it had not stopped. Exits 1 if the held-out accuracy is
// below --min-accuracy (a test runs it so).
#include <attograd/attograd.h>
#include <fmt/core.h>

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "common/cli.h"

namespace po = boost::program_options;

namespace {

constexpr std::int64_t kVocab = 16, kLength = 12, kDim = 32;

// n sequences of kLength tokens, and 1 where the first token appears again (about half do).
std::pair<ag::Tensor, ag::Tensor> make_data(std::int64_t n, ag::Generator& gen) {
  ag::Tensor x = ag::randint(kVocab, {n, kLength}, gen);
  ag::Tensor repeated = (x.slice(1, 1, kLength) == x.slice(1, 0, 1)).sum(1) > 0;
  return {x, repeated.to(ag::kInt64)};
}

struct Classifier : ag::nn::Module {
  explicit Classifier(ag::Generator& gen) {
    tokens = register_module("tokens", std::make_shared<ag::nn::Embedding>(kVocab, kDim, gen));
    positions = register_module("positions", std::make_shared<ag::nn::LearnedPositionalEmbedding>(kLength, kDim, gen));
    block = register_module("block", std::make_shared<ag::nn::SelfAttentionBlock>(
                                         ag::nn::BlockOptions{.d_model = kDim, .n_heads = 2, .d_ff = 64}, gen));
    head = register_module("head", std::make_shared<ag::nn::Linear>(kDim, 2, true, gen));
  }
  // ids int64 [B, kLength] -> scores [B, 2]: mean of the encoded positions, then a linear map.
  ag::Tensor forward(const ag::Tensor& ids) {
    return head->forward(block->forward(positions->forward(tokens->forward(ids))).mean(1));
  }
  std::shared_ptr<ag::nn::Embedding> tokens;
  std::shared_ptr<ag::nn::LearnedPositionalEmbedding> positions;
  std::shared_ptr<ag::nn::SelfAttentionBlock> block;
  std::shared_ptr<ag::nn::Linear> head;
};

}  // namespace

int main(int argc, char** argv) {
  double min_accuracy = 0.95;
  std::int64_t epochs = 12;
  std::string state_path;
  po::options_description options("classifier: a Transformer encoder trained on batches from a TensorDataset");
  options.add_options()("help,h", "show this help")("epochs", ag::examples::with_default(&epochs),
                                                    "passes over the training set, 1 to 1000")(
      "min-accuracy", ag::examples::with_default(&min_accuracy), "exit 1 below this held-out accuracy, 0 to 1")(
      "state", po::value(&state_path), "a file to save the run to after each epoch, and resume from");
  po::variables_map vm;
  try {
    ag::examples::store_command_line(argc, argv, options, vm);
    po::notify(vm);
    if (epochs < 1 || epochs > 1000) throw po::error(fmt::format("--epochs {} is not in 1..1000", epochs));
    if (!(min_accuracy >= 0 && min_accuracy <= 1))
      throw po::error(fmt::format("--min-accuracy {} is not in [0, 1]", min_accuracy));
    if (vm.count("state") && state_path.empty()) throw po::error("--state needs a file name");
  } catch (const po::error& e) {
    std::cerr << "classifier: " << e.what() << "\n" << options << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << options << "\n";
    return 0;
  }

  ag::Generator data_gen(1), init(0);
  auto [train_x, train_y] = make_data(4096, data_gen);
  auto [test_x, test_y] = make_data(1024, data_gen);
  ag::data::DataLoader loader(ag::data::TensorDataset(train_x, train_y),
                              {.batch_size = 64, .shuffle = true, .seed = 2});

  Classifier model(init);
  ag::optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  if (!state_path.empty() && std::filesystem::exists(state_path)) {
    try {
      ag::io::load_checkpoint(state_path, model, opt, &loader.order());
    } catch (const std::exception& e) {
      fmt::print(stderr, "classifier: cannot resume: {}\n", e.what());
      return 2;
    }
    fmt::print("resumed from {} at epoch {}\n", state_path, loader.epoch());
  }

  auto accuracy = [&](const ag::Tensor& x, const ag::Tensor& y) {
    ag::NoGradGuard no_grad;
    return (model.forward(x).argmax(1) == y).mean().item();
  };
  while (loader.epoch() < epochs) {
    double loss_sum = 0;
    for (auto [x, y] : loader) {
      ag::Tensor loss = ag::cross_entropy(model.forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.item();
    }
    fmt::print("epoch {:2}: loss {:.4f}, held-out accuracy {:.3f}\n", loader.epoch(),
               loss_sum / static_cast<double>(loader.size()), accuracy(test_x, test_y));
    if (!state_path.empty()) ag::io::save_checkpoint(state_path, model, opt, &loader.order());
  }
  double acc = accuracy(test_x, test_y);
  fmt::print("held-out accuracy: {:.2f}% of {} sequences (needed {:.2f}%)\n", 100 * acc, test_x.size(0),
             100 * min_accuracy);
  return acc >= min_accuracy ? 0 : 1;
}
