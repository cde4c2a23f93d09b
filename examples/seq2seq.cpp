// seq2seq: an encoder-decoder Transformer learns to reverse (or sort) digit sequences.
//
// The encoder reads the source digits; the decoder writes the answer one digit at a time,
// attending to its own past outputs (causal self-attention) and to the encoder's output
// (cross-attention). For reversal, output position i must look at source position n-1-i, so
// the cross-attention map of a trained model shows an anti-diagonal.
//
//   source  3 1 4 1 5          decoder input   <s> 5 1 4 1 3
//   target  5 1 4 1 3 </s>     (teacher forcing: the right answer so far, shifted by one)
//
// Held-out sequences are never trained on: a sequence is held out when its hash says so, and
// the training sampler skips those. The last line reports exact-sequence accuracy on them.
#include <attograd/attograd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "common/digit_tasks.h"
#include "common/kernels_option.h"
#include "common/plot.h"

namespace po = boost::program_options;
using ag::Tensor;

namespace {

using namespace ag::examples::digits;

struct Options {
  std::string task = "reverse";
  std::int64_t min_len = 4, max_len = 8;
  std::int64_t steps = 1500, batch = 64, held_out = 500;
  std::int64_t d_model = 64, heads = 4, layers = 2;
  double lr = 2e-3;
  std::uint64_t seed = 1;
  std::string out = "seq2seq-out";
  double min_accuracy = 0;  // exit non-zero below this (for tests)
};

int run(const Options& o) {
  if (o.task != "reverse" && o.task != "sort") throw std::invalid_argument("--task must be reverse or sort");
  Task task{.kind = o.task, .min_len = o.min_len, .max_len = o.max_len};
  if (o.min_len < 1 || o.max_len < o.min_len) throw std::invalid_argument("need 1 <= --min-len <= --max-len");
  ag::Generator init(o.seed), data(o.seed + 1), eval_gen(o.seed + 2);
  ag::nn::Transformer model({.src_vocab = kVocab,
                             .tgt_vocab = kVocab,
                             .d_model = o.d_model,
                             .n_heads = o.heads,
                             .d_ff = 2 * o.d_model,
                             .n_encoder_layers = o.layers,
                             .n_decoder_layers = o.layers,
                             .max_len = o.max_len + 2},
                            init);
  fmt::print(
      "task: {} digit sequences of length {} to {}; model: {} + {} layers, d_model {}, {} heads, {} parameters\n",
      o.task, o.min_len, o.max_len, o.layers, o.layers, o.d_model, o.heads, model.parameter_count());
  train(model, task, {.steps = o.steps, .batch = o.batch, .lr = o.lr}, data);

  std::vector<Sequence> held_out = held_out_set(task, o.held_out, eval_gen);
  if (held_out.empty())
    throw std::invalid_argument(
        fmt::format("no sequence of length {} to {} is held out; use longer sequences", o.min_len, o.max_len));
  double accuracy = exact_accuracy(model, task, held_out);
  auto correct = static_cast<std::int64_t>(std::lround(accuracy * static_cast<double>(held_out.size())));

  // The cross-attention map of one held-out example: last decoder layer, averaged over heads.
  std::filesystem::create_directories(o.out);
  const Sequence& example = *std::max_element(held_out.begin(), held_out.end(),
                                              [](const auto& a, const auto& b) { return a.size() < b.size(); });
  std::vector<Tensor> cross;
  Sequence predicted = decode(model, example, &cross);
  Tensor w = cross.back().mean(1).to(ag::kFloat64);  // [1, T, S]
  std::vector<std::vector<double>> grid;
  std::vector<std::string> rows{"<s>"}, cols;
  for (auto d : predicted) rows.push_back(std::string(1, static_cast<char>('0' + d)));
  for (auto d : example) cols.push_back(std::string(1, static_cast<char>('0' + d)));
  rows.resize(static_cast<std::size_t>(w.size(1)));
  for (std::int64_t i = 0; i < w.size(1); ++i) {
    std::vector<double> row;
    for (std::int64_t j = 0; j < w.size(2); ++j) row.push_back(w.at<double>({0, i, j}));
    grid.push_back(row);
  }
  std::string png = (std::filesystem::path(o.out) / "cross_attention.png").string();
  ag::plot::heatmap_png(
      png, grid, rows, cols,
      fmt::format("cross-attention, last layer (mean of heads): {} -> {}", to_string(example), to_string(predicted)));
  fmt::print("example: {} -> {} ({})\nwrote {}\n", to_string(example), to_string(predicted),
             predicted == answer(task, example) ? "right" : "wrong", png);
  fmt::print("held-out exact-sequence accuracy: {:.2f}% ({} of {})\n", 100 * accuracy, correct, held_out.size());
  return accuracy >= o.min_accuracy ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  po::options_description opts("seq2seq: an encoder-decoder Transformer learns to reverse or sort digit sequences");
  opts.add_options()("help,h", "show this help")("task", po::value(&o.task)->default_value(o.task), "reverse or sort")(
      "min-len", po::value(&o.min_len)->default_value(o.min_len), "shortest sequence")(
      "max-len", po::value(&o.max_len)->default_value(o.max_len), "longest sequence")(
      "steps", po::value(&o.steps)->default_value(o.steps), "training steps")(
      "batch", po::value(&o.batch)->default_value(o.batch), "sequences per step")(
      "held-out", po::value(&o.held_out)->default_value(o.held_out), "held-out sequences to evaluate")(
      "d-model", po::value(&o.d_model)->default_value(o.d_model), "model width")(
      "heads", po::value(&o.heads)->default_value(o.heads), "attention heads")(
      "layers", po::value(&o.layers)->default_value(o.layers), "encoder and decoder layers (each)")(
      "lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate")(
      "seed", po::value(&o.seed)->default_value(o.seed), "random seed")("out", po::value(&o.out)->default_value(o.out),
                                                                        "directory for the cross-attention picture")(
      "min-accuracy", po::value(&o.min_accuracy)->default_value(o.min_accuracy),
      "exit with status 1 when the held-out accuracy is below this fraction")(
      "kernels", ag::examples::kernels_value(), ag::examples::kKernelsHelp);
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
    return run(o);
  } catch (const po::error& e) {
    std::cerr << "seq2seq: " << e.what() << "\n\n" << opts << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "seq2seq: " << e.what() << "\n";
    return 1;
  }
}
