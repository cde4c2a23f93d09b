// Why attention at all, the chapter's own argument: a decoder that must read the whole source
// through one fixed vector against one that attends to every source position.
//
// Task: reverse a sequence of 4 to 16 digits (examples/common/digit_tasks.h). Two copies of the
// same encoder-decoder, with the same initial weights, trained the same steps on the same
// batches. They differ only in what the decoder's cross-attention reads:
//
//   cross-attention   memory = the encoder's states          [B, S, D]  one key per source digit
//   fixed vector      memory = their mean over the source     [B, 1, D]  one key for everything
//
// With a single key, cross-attention's softmax gives it weight 1 whatever the query: the
// decoder receives the same summary vector at every step, as the decoder of an RNN
// encoder-decoder receives the encoder's final state. The parameters are the same tensors, so
// the budget is equal by construction.
//
// Measured on held-out sequences of each length from 4 to 16, with the right answer so far as
// the decoder's input (teacher forcing): the share of output digits predicted right, and the
// share of sequences with every digit and the end marker right. The second is exactly the
// share greedy decoding gets right, since a greedy decoder that has made no mistake so far sees
// the same input as teacher forcing.
#include <filesystem>

#include "../common/digit_tasks.h"
#include "../common/plot.h"
#include "experiments.h"
#include "reversal.h"

namespace experiments {

using ag::Tensor;
namespace digits = ag::examples::digits;

namespace {

using reversal::kLongest;
using reversal::kShortest;

// The encoder's states averaged over the real (not padded) source positions:
//   memory [B, S, D], src_mask bool [B, 1, 1, S]  ->  [B, 1, D]
Tensor mean_over_source(const Tensor& memory, const Tensor& src_mask) {
  Tensor real = src_mask.reshape({memory.size(0), memory.size(1), 1}).to(memory.dtype());
  return (memory * real).sum(1, true) / real.sum(1, true);
}

// Logits [B, T, kVocab] for a batch, the decoder reading either every encoder state or their mean.
Tensor forward(ag::nn::Transformer& model, const digits::Batch& b, bool fixed_vector) {
  Tensor memory = model.encode(b.src, b.src_mask);
  if (!fixed_vector) return model.decode(b.tgt_in, memory, b.src_mask);
  return model.decode(b.tgt_in, mean_over_source(memory, b.src_mask));
}

// Teacher-forced accuracy on `sequences`, all of one length.
digits::Accuracy accuracy(ag::nn::Transformer& model, const digits::Task& task,
                          const std::vector<digits::Sequence>& sequences, bool fixed_vector) {
  model.eval();
  return digits::teacher_forced_accuracy(task, sequences,
                                         [&](const digits::Batch& b) { return forward(model, b, fixed_vector); });
}

}  // namespace

int bottleneck(const Options& o) {
  const digits::Task& task = reversal::kTask;
  const ag::nn::TransformerConfig config = reversal::transformer();
  const std::int64_t batch = 4 * o.batch;
  fmt::print(
      "Reversing {}-{} digits: the decoder reads every encoder state (cross-attention) or their mean (one fixed\n"
      "vector). Same model, same initial weights, {} of {} sequences each.\n\n",
      kShortest, kLongest, ag::examples::plural(o.steps, "step"), batch);

  struct Run {
    std::string label;
    bool fixed_vector;
    std::int64_t params = 0;
    std::vector<digits::Accuracy> by_length;
  };
  std::vector<Run> runs{{"cross-attention", false, 0, {}}, {"fixed vector", true, 0, {}}};
  const std::vector<std::vector<digits::Sequence>> held_out = reversal::held_out_by_length(o.seed);
  for (Run& run : runs) {
    ag::Generator init(o.seed), data(o.seed + 1);
    ag::nn::Transformer model(config, init);
    run.params = model.parameter_count();
    digits::train(model, task, {.steps = o.steps, .batch = batch, .lr = 2e-3}, data, run.label,
                  [&](const digits::Batch& b) { return forward(model, b, run.fixed_vector); });
    for (const auto& sequences : held_out) run.by_length.push_back(accuracy(model, task, sequences, run.fixed_vector));
  }

  auto pct = [](double v) { return fmt::format("{:.1f} %", 100 * v); };
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < held_out.size(); ++i) {
    const digits::Accuracy &a = runs[0].by_length[i], &f = runs[1].by_length[i];
    rows.push_back({fmt::format("{}", kShortest + static_cast<std::int64_t>(i)), pct(a.per_digit), pct(a.whole),
                    pct(f.per_digit), pct(f.whole)});
  }
  fmt::print("Held-out accuracy by length ({} sequences per length; parameters: {} and {}):\n", held_out.back().size(),
             runs[0].params, runs[1].params);
  print_table(
      {"length", "attention: digits", "attention: sequences", "fixed vector: digits", "fixed vector: sequences"}, rows);

  std::filesystem::create_directories(o.out);
  std::vector<ag::plot::Series> series;
  for (const Run& run : runs) {
    std::vector<double> len, digit, whole;
    for (std::size_t i = 0; i < run.by_length.size(); ++i) {
      len.push_back(static_cast<double>(kShortest) + static_cast<double>(i));
      digit.push_back(100 * run.by_length[i].per_digit);
      whole.push_back(100 * run.by_length[i].whole);
    }
    series.push_back({run.label + ", digits", len, digit});
    series.push_back({run.label + ", whole sequences", len, whole});
  }
  std::string png = (std::filesystem::path(o.out) / "bottleneck.png").string();
  ag::plot::line_plot_png(png, series, "reversal: every encoder state against one fixed vector",
                          "source length (digits)", "held-out accuracy (%)");
  fmt::print("\nwrote {}\n\n", png);

  if (o.check) {
    const digits::Accuracy &attention_long = runs[0].by_length.back(), &fixed_short = runs[1].by_length.front(),
                   &fixed_long = runs[1].by_length.back();
    expect(runs[0].params == runs[1].params, "both decoders have the same parameters");
    expect(
        attention_long.per_digit > fixed_long.per_digit + 0.2,
        fmt::format("at length {}, cross-attention gets 20 points more digits right than the fixed vector", kLongest));
    expect(
        fixed_short.per_digit > fixed_long.per_digit + 0.1,
        fmt::format("the fixed vector loses accuracy as the source grows from {} to {} digits", kShortest, kLongest));
  }
  return exit_code();
}

}  // namespace experiments
