// The chapter's bottleneck with the model it was first told about: a recurrent encoder whose
// last state is all the decoder learns of the source (Sutskever et al. 2014; Cho et al. 2014),
// against the same encoder with additive attention over all its states (Bahdanau et al. 2015),
// and against the Transformer's cross-attention.
//
// Task: reverse a sequence of 4 to 16 digits (examples/common/digit_tasks.h), teacher forcing.
// The three models have about the same number of parameters (their hidden sizes are chosen so),
// see the same batches for the same steps, and are measured on the same held-out sequences:
//
//   GRU encoder-decoder   the encoder GRU reads the source; its last state h_S starts the
//                         decoder GRU, which never sees the source again
//   GRU + attention       the same, and at each output step the decoder's previous state s
//                         scores every encoder state h_j:  e_j = v^T tanh(W s + U h_j),
//                         a = softmax(e) over the real source positions, c = sum_j a_j h_j;
//                         c joins the step's input and its output layer
//   Transformer           the experiment bottleneck's encoder-decoder: two blocks each side,
//                         cross-attention in every decoder block
//
// It draws the GRU + attention model's weights a for one held-out sequence of 16 digits: output
// digit i copies source position S - 1 - i, so its weights should lie on the anti-diagonal, or
// one state to the right of it: a GRU that reads left to right still holds digit j in its state
// after j + 1, and nothing tells the model which of the two to read.
#include <algorithm>
#include <filesystem>
#include <map>

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
constexpr std::int64_t kEmbed = 32;

// The lengths of the padded sources [B, S] as int64 [B].
Tensor source_lengths(const Tensor& src) {
  const std::vector<std::int64_t> ids = src.to_vector<std::int64_t>();
  const std::int64_t b = src.size(0), s = src.size(1);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(b), 0);
  for (std::int64_t i = 0; i < b * s; ++i) lengths[static_cast<std::size_t>(i / s)] += ids[static_cast<std::size_t>(i)] != digits::kPad;
  return ag::from_vector(lengths, {b});
}

// A GRU encoder-decoder; with `attend`, Bahdanau's additive attention over the encoder states.
class RecurrentSeq2Seq : public ag::nn::Module {
 public:
  RecurrentSeq2Seq(std::int64_t hidden, bool attend, ag::Generator& gen) : attend(attend) {
    src_emb = register_module("src_emb", std::make_shared<ag::nn::Embedding>(digits::kVocab, kEmbed, gen));
    tgt_emb = register_module("tgt_emb", std::make_shared<ag::nn::Embedding>(digits::kVocab, kEmbed, gen));
    encoder = register_module("encoder", std::make_shared<ag::nn::GRU>(kEmbed, hidden, true, gen));
    if (!attend) {
      decoder = register_module("decoder", std::make_shared<ag::nn::GRU>(kEmbed, hidden, true, gen));
      out = register_module("out", std::make_shared<ag::nn::Linear>(hidden, digits::kVocab, true, gen));
      return;
    }
    step = register_module("step", std::make_shared<ag::nn::GRUCell>(kEmbed + hidden, hidden, true, gen));
    w = register_module("w", std::make_shared<ag::nn::Linear>(hidden, hidden, false, gen));
    u = register_module("u", std::make_shared<ag::nn::Linear>(hidden, hidden, true, gen));
    v = register_module("v", std::make_shared<ag::nn::Linear>(hidden, 1, false, gen));
    out = register_module("out", std::make_shared<ag::nn::Linear>(2 * hidden, digits::kVocab, true, gen));
  }

  // Logits [B, T, kVocab]; with attention, `weights` (when given) receives a [B, T, S] per batch.
  Tensor forward(const digits::Batch& b, Tensor* weights = nullptr) const {
    ag::nn::RecurrentOutput enc = encoder->forward(src_emb->forward(b.src), {}, source_lengths(b.src));
    Tensor y = tgt_emb->forward(b.tgt_in);  // [B, T, E]
    if (!attend) return out->forward(decoder->forward(y, enc.last).states);

    const std::int64_t batch = y.size(0), steps = y.size(1), src_len = b.src.size(1);
    Tensor keys = u->forward(enc.states);                       // U h_j, [B, S, H], once per sequence
    Tensor hidden_mask = ag::logical_not(b.src_mask.reshape({batch, src_len}));  // true at padding
    Tensor s = enc.last;
    std::vector<Tensor> logits, alphas;
    for (std::int64_t t = 0; t < steps; ++t) {
      Tensor e = v->forward((w->forward(s).unsqueeze(1) + keys).tanh()).reshape({batch, src_len});
      Tensor a = e.masked_fill(hidden_mask, -INFINITY).softmax(-1);  // [B, S]
      Tensor c = a.unsqueeze(1).matmul(enc.states).reshape({batch, -1});  // [B, H]
      Tensor y_t = y.slice(1, t, t + 1).reshape({batch, kEmbed});
      s = step->forward(ag::cat({y_t, c}, 1), s);
      logits.push_back(out->forward(ag::cat({s, c}, 1)).unsqueeze(1));
      alphas.push_back(a.unsqueeze(1));
    }
    if (weights) *weights = ag::cat(alphas, 1);
    return ag::cat(logits, 1);
  }

  bool attend;
  std::shared_ptr<ag::nn::Embedding> src_emb, tgt_emb;
  std::shared_ptr<ag::nn::GRU> encoder, decoder;
  std::shared_ptr<ag::nn::GRUCell> step;
  std::shared_ptr<ag::nn::Linear> w, u, v, out;
};

// The hidden size at which a RecurrentSeq2Seq has the parameter count nearest `budget`.
std::int64_t hidden_for(std::int64_t budget, bool attend) {
  std::int64_t best = 1, best_gap = budget;
  for (std::int64_t h = 8; h <= 512; ++h) {
    ag::Generator gen(0);
    std::int64_t gap = std::abs(RecurrentSeq2Seq(h, attend, gen).parameter_count() - budget);
    if (gap < best_gap) best = h, best_gap = gap;
    if (gap > best_gap) break;  // the count only grows with h
  }
  return best;
}

}  // namespace

int rnn_bottleneck(const Options& o) {
  const digits::Task& task = reversal::kTask;
  const ag::nn::TransformerConfig config = reversal::transformer();
  const std::int64_t batch = 4 * o.batch;
  ag::Generator probe(o.seed);
  const std::int64_t budget = ag::nn::Transformer(config, probe).parameter_count();
  const std::int64_t plain_hidden = hidden_for(budget, false), attend_hidden = hidden_for(budget, true);
  fmt::print(
      "Reversing {}-{} digits with three encoder-decoders of about {} parameters each, {} of {} sequences:\n"
      "  GRU encoder-decoder  hidden {}: the decoder starts from the encoder's last state and never sees the "
      "source again\n"
      "  GRU + attention      hidden {}: the same, and each output step attends over every encoder state "
      "(additive)\n"
      "  Transformer          d_model {}: cross-attention in each of {} decoder blocks\n\n",
      kShortest, kLongest, budget, ag::examples::plural(o.steps, "step"), batch, plain_hidden, attend_hidden, config.d_model,
      config.n_decoder_layers);

  const std::vector<std::vector<digits::Sequence>> held_out = reversal::held_out_by_length(o.seed);
  struct Run {
    std::string label;
    std::int64_t params = 0;
    std::vector<digits::Accuracy> by_length;
  };
  std::vector<Run> runs;
  auto measure = [&](Run run, ag::nn::Module& model, const digits::Forward& forward) {
    ag::Generator data(o.seed + 1);
    run.params = model.parameter_count();
    digits::train(model, task, {.steps = o.steps, .batch = batch, .lr = 3e-3}, data, run.label, forward);
    for (const auto& sequences : held_out) run.by_length.push_back(digits::teacher_forced_accuracy(task, sequences, forward));
    runs.push_back(run);
  };
  ag::Generator init_plain(o.seed), init_attend(o.seed), init_transformer(o.seed);
  RecurrentSeq2Seq plain(plain_hidden, false, init_plain), attend(attend_hidden, true, init_attend);
  ag::nn::Transformer transformer(config, init_transformer);
  measure({"GRU encoder-decoder", 0, {}}, plain, [&](const digits::Batch& b) { return plain.forward(b); });
  measure({"GRU + attention", 0, {}}, attend, [&](const digits::Batch& b) { return attend.forward(b); });
  measure({"Transformer", 0, {}}, transformer,
          [&](const digits::Batch& b) { return transformer.forward(b.src, b.tgt_in, b.src_mask); });

  auto pct = [](double v) { return fmt::format("{:.1f} %", 100 * v); };
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < held_out.size(); ++i) {
    std::vector<std::string> row{fmt::format("{}", kShortest + static_cast<std::int64_t>(i))};
    for (const Run& run : runs) row.push_back(pct(run.by_length[i].per_digit) + " / " + pct(run.by_length[i].whole));
    rows.push_back(row);
  }
  fmt::print("Held-out accuracy by length, digits / whole sequences ({} sequences per length):\n",
             held_out.back().size());
  std::vector<std::string> header{"length"};
  for (const Run& run : runs) header.push_back(fmt::format("{} ({} params)", run.label, run.params));
  print_table(header, rows);

  std::filesystem::create_directories(o.out);
  std::vector<ag::plot::Series> series;
  const std::vector<std::string> short_names{"GRU", "GRU + attention", "Transformer"};
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const Run& run = runs[r];
    ag::plot::Series s{short_names[r] + ": digits", {}, {}};
    for (std::size_t i = 0; i < run.by_length.size(); ++i) {
      s.x.push_back(static_cast<double>(kShortest) + static_cast<double>(i));
      s.y.push_back(100 * run.by_length[i].per_digit);
    }
    // A curve drawn over an earlier one that it matches everywhere says so, or the earlier
    // one would seem to be missing.
    for (const ag::plot::Series& earlier : series) {
      bool same = true;
      for (std::size_t i = 0; i < s.y.size(); ++i) same = same && std::abs(s.y[i] - earlier.y[i]) < 0.5;
      if (same) s.name += " (on " + earlier.name.substr(0, earlier.name.find(':')) + "'s line)";
    }
    series.push_back(s);
  }
  ag::plot::Series whole{short_names[0] + ": whole sequences", series[0].x, {}};
  for (const digits::Accuracy& a : runs[0].by_length) whole.y.push_back(100 * a.whole);
  series.push_back(whole);
  std::string png = (std::filesystem::path(o.out) / "rnn_bottleneck.png").string();
  ag::plot::line_plot_png(png, series, "reversal: a GRU's last state only, against two kinds of attention",
                          "source length (digits)", "held-out accuracy (%)");
  fmt::print("\nwrote {}\n", png);

  // The attention weights for the first held-out sequence of the longest length.
  const digits::Sequence& example = held_out.back().front();
  Tensor weights;
  {
    ag::NoGradGuard no_grad;
    attend.forward(digits::make_batch(task, {example}), &weights);
  }
  const std::int64_t steps = weights.size(1), src_len = weights.size(2);
  ag::plot::Heatmap map{.title = "GRU + attention: which source digit each output step reads",
                        .row_title = "output step (the digit it writes)",
                        .col_title = "source digit",
                        .value_title = "attention weight"};
  const digits::Sequence answer = digits::answer(task, example);
  // Where each digit's largest weight falls, counted from the source digit it copies: 0 on it,
  // +1 on the state after it (which, in a GRU reading left to right, has read it too).
  std::map<std::int64_t, std::int64_t> offsets;
  for (std::int64_t i = 0; i < steps; ++i) {
    std::vector<double> row;
    for (std::int64_t j = 0; j < src_len; ++j) row.push_back(static_cast<double>(weights.at<float>({0, i, j})));
    auto largest = std::max_element(row.begin(), row.end()) - row.begin();
    if (i < src_len) ++offsets[largest - (src_len - 1 - i)];
    map.values.push_back(row);
    map.row_labels.push_back(i < src_len ? std::to_string(answer[static_cast<std::size_t>(i)]) : "</s>");
  }
  for (std::int64_t d : example) map.col_labels.push_back(std::to_string(d));
  std::string heat = (std::filesystem::path(o.out) / "rnn_bottleneck_attention.png").string();
  ag::plot::heatmap_png(heat, map);
  auto [offset, count] = *std::max_element(offsets.begin(), offsets.end(),
                                            [](const auto& a, const auto& b) { return a.second < b.second; });
  fmt::print("wrote {}\nFor {} of its {} digits the largest weight is {} (the encoder state {}).\n\n", heat, count,
             src_len,
             offset == 0 ? "on the source digit being copied"
                         : fmt::format("{} position{} {} the source digit being copied", std::abs(offset),
                                       std::abs(offset) == 1 ? "" : "s", offset > 0 ? "after" : "before"),
             offset == 0 ? "that read it last" : fmt::format("at j {} {} for source digit j", offset > 0 ? "+" : "-", std::abs(offset)));

  if (o.check) {
    const Run &plain_run = runs[0], &attend_run = runs[1], &transformer_run = runs[2];
    auto spread = std::minmax({plain_run.params, attend_run.params, transformer_run.params});
    expect(static_cast<double>(spread.second - spread.first) < 0.05 * static_cast<double>(budget),
           "the three models' parameter counts are within 5 % of each other");
    expect(attend_run.by_length.back().per_digit > plain_run.by_length.back().per_digit + 0.2,
           fmt::format("at length {}, attention over the GRU's states gets 20 points more digits right than its last "
                       "state alone",
                       kLongest));
    expect(transformer_run.by_length.back().per_digit > plain_run.by_length.back().per_digit + 0.2,
           fmt::format("at length {}, the Transformer gets 20 points more digits right than the GRU's last state",
                       kLongest));
    expect(plain_run.by_length.front().per_digit > plain_run.by_length.back().per_digit + 0.1,
           fmt::format("the GRU encoder-decoder loses accuracy as the source grows from {} to {} digits", kShortest,
                       kLongest));
    expect((offset == 0 || offset == 1) && count * 4 >= src_len * 3,
           "for at least 3 digits in 4, the GRU + attention model's largest weight is on the encoder state that read "
           "the digit it copies, or the next one (the reversal's anti-diagonal)");
  }
  return exit_code();
}

}  // namespace experiments
