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
//
// Every option is checked before the model is built (status 2 when refused); SIGINT and
// SIGTERM stop it at the next op (status 130).
#include <attograd/attograd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include "common/cli.h"
#include "common/digit_tasks.h"
#include "common/kernels_option.h"
#include "common/memory_budget.h"
#include "common/plot.h"
#include "common/precision_option.h"
#include "common/preflight.h"
#include "common/program.h"
#include "common/ranks.h"
#include "common/stop.h"

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
  std::int64_t grad_accum = 1;
  std::string precision = "auto";  // --precision fp32|bf16|auto (common/precision_option.h)
};

// Everything checked before the model is built: a run that starts can finish.
void check(const Options& o, const ag::nn::TransformerConfig& config) {
  using ag::examples::refuse;
  if (o.task != "reverse" && o.task != "sort") refuse("--task must be reverse or sort, got '{}'", o.task);
  if (o.min_len < 1 || o.max_len < o.min_len)
    refuse("need 1 <= --min-len <= --max-len, got --min-len {} and --max-len {}", o.min_len, o.max_len);
  // The picture has a cell per pair of source and output digits, at least a pixel each, in at most
  // 16384 pixels a side (examples/common/image.cpp).
  if (o.max_len > 4096) refuse("--max-len must be at most 4096 (the cross-attention picture), got {}", o.max_len);
  if (o.steps < 0) refuse("--steps must be at least 0 (0: evaluate the untrained model), got {}", o.steps);
  for (auto [name, value] :
       {std::pair{"--batch", o.batch}, {"--held-out", o.held_out}, {"--d-model", o.d_model}, {"--heads", o.heads}})
    if (value < 1) refuse("{} must be positive, got {}", name, value);
  // Without a layer the decoder has no cross-attention: it cannot see the source at all.
  if (o.layers < 1)
    refuse(
        "--layers must be at least 1, got {}: the decoder sees the source only through the cross-attention of "
        "its layers",
        o.layers);
  if (o.d_model % o.heads != 0)
    refuse("--d-model {} must be a multiple of --heads {}: each head takes an equal share of the width", o.d_model,
           o.heads);
  if (!(std::isfinite(o.lr) && o.lr > 0)) refuse("--lr must be a positive finite number, got {}", o.lr);
  ag::examples::check_grad_accum(o.grad_accum);
  // A step's micro-batches are drawn before the first runs (each weighs its share of the step's
  // targets): their token tensors, four of int64, are held at once.
  ag::examples::check_fits_in_memory(
      fmt::format("--grad-accum {} micro-batches of --batch {} sequences", o.grad_accum, o.batch),
      ag::examples::Size(o.grad_accum) * o.batch * (o.max_len + 2) * 32);
  if (!(o.min_accuracy >= 0 && o.min_accuracy <= 1))
    refuse("--min-accuracy must be a fraction from 0 to 1, got {}", o.min_accuracy);
  ag::examples::check_fits_in_memory(
      fmt::format("the model (--layers {} --d-model {} --heads {}) at --batch {} and --max-len {}", o.layers, o.d_model,
                  o.heads, o.batch, o.max_len),
      ag::examples::transformer_training_memory(config, o.batch, o.max_len));
  if (ag::dist::is_main_process()) ag::examples::check_output_dir("--out", o.out, {"cross_attention.png"});
}

int run(const Options& o) {
  Task task{.kind = o.task, .min_len = o.min_len, .max_len = o.max_len};
  ag::nn::TransformerConfig config{.src_vocab = kVocab,
                                   .tgt_vocab = kVocab,
                                   .d_model = o.d_model,
                                   .n_heads = o.heads,
                                   .d_ff = 2 * o.d_model,
                                   .n_encoder_layers = o.layers,
                                   .n_decoder_layers = o.layers,
                                   .max_len = o.max_len + 2};
  // Under mpirun a refusal on any rank stops every rank; the first that refused says why.
  ag::examples::checks_on_every_rank("seq2seq", [&] { check(o, config); });
  const bool main_rank = ag::dist::is_main_process();
  if (ag::dist::world_size() > 1) {
    ag::dist::check_same(
        "the run's configuration",
        fmt::format("task {} {} {}\nsteps {} batch {} lr {} seed {}\nmodel {} {} {}\nthreads {}\n", o.task, o.min_len,
                    o.max_len, o.steps, o.batch, o.lr, o.seed, o.d_model, o.heads, o.layers, ag::get_num_threads()));
  }
  ag::Generator init(o.seed), data(o.seed + 1), eval_gen(o.seed + 2);
  // Drawn before training (from a generator of its own, so the same set): an empty one is
  // known now, not after the training it would make useless.
  std::vector<Sequence> held_out = held_out_set(task, o.held_out, eval_gen);
  ag::examples::checks_on_every_rank("seq2seq", [&] {
    if (held_out.empty())
      ag::examples::refuse("no sequence of length {} to {} is held out; use longer sequences", o.min_len, o.max_len);
  });
  ag::nn::Transformer model(config, init);
  ag::dist::broadcast(model.parameters());
  if (main_rank) {
    fmt::print("task: {} digit sequences of length {} to {}; model: {} + {}, d_model {}, {}, {} parameters\n", o.task,
               o.min_len, o.max_len, o.layers, ag::examples::plural(o.layers, "layer"), o.d_model,
               ag::examples::plural(o.heads, "head"), model.parameter_count());
    if (ag::dist::world_size() > 1)
      fmt::print("data-parallel: {} processes, {} sequences each per step\n", ag::dist::world_size(), o.batch);
    else if (o.grad_accum > 1)
      fmt::print("gradient accumulation: {} micro-batches of {} sequences per step\n", o.grad_accum, o.batch);
  }
  if (o.steps == 0 && main_rank) fmt::print("--steps 0: the untrained model, as a baseline\n");
  double last_loss =
      train(model, task, {.steps = o.steps, .batch = o.batch, .lr = o.lr, .grad_accum = o.grad_accum}, data);
  ag::dist::check_in_sync("the weights after training", model.parameters());
  if (!main_rank) return 0;  // the evaluation and the picture are rank 0's
  // Every digit of the last loss and a fingerprint of the weights: two runs that should be
  // equal (one process accumulating, several under mpirun) can be compared exactly.
  if (o.steps > 0)
    fmt::print("last step's loss: {}; weights: fingerprint {:016x}\n", last_loss,
               ag::dist::fingerprint(model.parameters()));

  double accuracy = exact_accuracy(model, task, held_out);
  auto correct = static_cast<std::int64_t>(std::lround(accuracy * static_cast<double>(held_out.size())));

  // The cross-attention map of one held-out example: last decoder layer, averaged over heads.
  std::filesystem::create_directories(o.out);  // the first write
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
  ag::plot::heatmap_png(png, {.values = grid,
                              .row_labels = rows,
                              .col_labels = cols,
                              .title = fmt::format("cross-attention, last layer (mean of heads): {} -> {}",
                                                   to_string(example), to_string(predicted)),
                              .row_title = "query: decoder input",
                              .col_title = "key: source digit",
                              .value_title = "attention weight"});
  fmt::print("example: {} -> {} ({})\nwrote {}\n", to_string(example), to_string(predicted),
             predicted == answer(task, example) ? "right" : "wrong", png);
  fmt::print("held-out exact-sequence accuracy: {:.2f}% ({} of {})\n", 100 * accuracy, correct, held_out.size());
  return accuracy >= o.min_accuracy ? 0 : 1;
}

// The command line, then the run; main below turns what either throws into an exit status
// (examples/common/program.h).
int parse_and_run(ag::examples::Program& program) {
  const bool distributed = ag::dist::world_size() > 1;
  Options o;
  po::options_description opts("seq2seq: an encoder-decoder Transformer learns to reverse or sort digit sequences");
  opts.add_options()("help,h", "show this help")("task", ag::examples::with_default(&o.task), "reverse or sort")(
      "min-len", ag::examples::with_default(&o.min_len), "shortest sequence")(
      "max-len", ag::examples::with_default(&o.max_len), "longest sequence")(
      "steps", ag::examples::with_default(&o.steps), "training steps")("batch", ag::examples::with_default(&o.batch),
                                                                       "sequences per step")(
      "held-out", ag::examples::with_default(&o.held_out), "held-out sequences to evaluate")(
      "d-model", ag::examples::with_default(&o.d_model), "model width")(
      "heads", ag::examples::with_default(&o.heads), "attention heads")("layers", ag::examples::with_default(&o.layers),
                                                                        "encoder and decoder layers (each)")(
      "lr", ag::examples::with_default(&o.lr), "peak learning rate")(
      "seed", ag::examples::seed_value(&o.seed), "random seed")("out", ag::examples::with_default(&o.out),
                                                                "directory for the cross-attention picture")(
      "min-accuracy", ag::examples::with_default(&o.min_accuracy),
      "exit with status 1 when the held-out accuracy is below this fraction")(
      "grad-accum", ag::examples::with_default(&o.grad_accum),
      "micro-batches of --batch sequences per step, their gradients summed in order (under mpirun, each process is "
      "one: docs/distributed.md)")("kernels", ag::examples::kernels_value(), ag::examples::kKernelsHelp)(
      "precision", ag::examples::precision_value(&o.precision), ag::examples::kPrecisionHelp);
  try {
    po::variables_map vm;
    ag::examples::store_command_line(program.argc, program.argv, opts, vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "seq2seq: " << e.what() << "\n\n" << opts << "\n";
    return 2;
  }
  ag::examples::PrecisionChoice chosen = ag::examples::apply_precision(o.precision, false);
  if (ag::dist::is_main_process()) fmt::print("precision: {}\n", chosen.why);
  // A signal stops the run at the next op (nothing is saved: the run is short and has no
  // checkpoint); a second one at once. Under mpirun, at the end of a step, all ranks together.
  ag::examples::StopOnSignal stop;
  std::optional<ag::examples::StopBetweenOps> stop_points;
  if (!distributed) stop_points.emplace();
  return run(o);
}

}  // namespace

int main(int argc, char** argv) { return ag::examples::run_program("seq2seq", argc, argv, parse_and_run); }
