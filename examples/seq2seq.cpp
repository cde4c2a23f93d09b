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
#include <filesystem>
#include <iostream>
#include <set>

#include "common/plot.h"
#include "common/progress.h"

namespace po = boost::program_options;
using ag::Tensor;

namespace {

constexpr std::int64_t kBos = 10, kEos = 11, kPad = 12, kVocab = 13;

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

using Sequence = std::vector<std::int64_t>;

// One in ten sequences is reserved for evaluation, by a hash that does not depend on the run.
bool is_held_out(const Sequence& s) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (auto d : s) h = (h ^ static_cast<std::uint64_t>(d + 1)) * 1099511628211ULL;
  return h % 10 == 0;
}

Sequence random_sequence(const Options& o, ag::Generator& gen) {
  auto len =
      o.min_len + static_cast<std::int64_t>(gen.next_u64() % static_cast<std::uint64_t>(o.max_len - o.min_len + 1));
  Sequence s(static_cast<std::size_t>(len));
  for (auto& d : s) d = static_cast<std::int64_t>(gen.next_u64() % 10);
  return s;
}

Sequence answer(const Options& o, Sequence s) {
  if (o.task == "sort")
    std::sort(s.begin(), s.end());
  else
    std::reverse(s.begin(), s.end());
  return s;
}

struct Batch {
  Tensor src, src_mask, tgt_in, tgt_out;
};

// Pads every sequence to the longest; the source mask marks real tokens, and padded target
// positions are ignored by the loss (ignore_index = kPad).
Batch make_batch(const Options& o, const std::vector<Sequence>& sources) {
  auto b = static_cast<std::int64_t>(sources.size());
  std::int64_t s_len = 0;
  for (const auto& s : sources) s_len = std::max<std::int64_t>(s_len, static_cast<std::int64_t>(s.size()));
  std::int64_t t_len = s_len + 1;
  std::vector<std::int64_t> src(static_cast<std::size_t>(b * s_len), kPad),
      tin(static_cast<std::size_t>(b * t_len), kPad), tout(static_cast<std::size_t>(b * t_len), kPad), lengths;
  for (std::int64_t i = 0; i < b; ++i) {
    const Sequence& s = sources[static_cast<std::size_t>(i)];
    Sequence a = answer(o, s);
    lengths.push_back(static_cast<std::int64_t>(s.size()));
    for (std::size_t j = 0; j < s.size(); ++j) src[static_cast<std::size_t>(i * s_len) + j] = s[j];
    tin[static_cast<std::size_t>(i * t_len)] = kBos;
    for (std::size_t j = 0; j < a.size(); ++j) {
      tin[static_cast<std::size_t>(i * t_len) + j + 1] = a[j];
      tout[static_cast<std::size_t>(i * t_len) + j] = a[j];
    }
    tout[static_cast<std::size_t>(i * t_len) + a.size()] = kEos;
  }
  return {ag::from_vector(src, {b, s_len}), ag::key_padding_mask(lengths, s_len), ag::from_vector(tin, {b, t_len}),
          ag::from_vector(tout, {b, t_len})};
}

// Greedy decoding of one source sequence; `cross` receives the last step's cross-attention.
Sequence decode(ag::nn::Transformer& model, const Sequence& source, std::vector<Tensor>* cross = nullptr) {
  ag::NoGradGuard no_grad;
  auto n = static_cast<std::int64_t>(source.size());
  Tensor src = ag::from_vector(source, {1, n});
  Tensor memory = model.encode(src);
  Sequence out{kBos};
  for (std::int64_t step = 0; step <= n; ++step) {
    Tensor logits = model.decode(ag::from_vector(out, {1, static_cast<std::int64_t>(out.size())}), memory, {}, cross);
    Tensor last = logits.slice(1, logits.size(1) - 1, logits.size(1)).reshape({kVocab});
    std::int64_t next = ag::argmax(last.unsqueeze(0), 1).item<std::int64_t>();
    if (next == kEos) break;
    out.push_back(next);
  }
  return Sequence(out.begin() + 1, out.end());
}

std::string digits(const Sequence& s) {
  std::string out;
  for (auto d : s) out += d < 10 ? static_cast<char>('0' + d) : '?';
  return out;
}

int run(const Options& o) {
  if (o.task != "reverse" && o.task != "sort") throw std::invalid_argument("--task must be reverse or sort");
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
  ag::optim::AdamW opt(ag::optim::decay_groups(model, 0.01), {.lr = o.lr, .beta2 = 0.98});
  ag::optim::WarmupCosine schedule{.warmup = 100, .total = o.steps, .max_lr = o.lr, .min_lr = o.lr / 20};
  fmt::print(
      "task: {} digit sequences of length {} to {}; model: {} + {} layers, d_model {}, {} heads, {} parameters\n",
      o.task, o.min_len, o.max_len, o.layers, o.layers, o.d_model, o.heads, model.parameter_count());

  ag::examples::ProgressBar bar(o.steps);
  std::int64_t tokens = 0;  // source and target tokens seen
  for (std::int64_t step = 0; step < o.steps; ++step) {
    std::vector<Sequence> sources;
    while (static_cast<std::int64_t>(sources.size()) < o.batch) {
      Sequence s = random_sequence(o, data);
      if (!is_held_out(s)) sources.push_back(s);
    }
    Batch b = make_batch(o, sources);
    opt.set_lr(schedule.lr_at(step));
    Tensor logits = model.forward(b.src, b.tgt_in, b.src_mask);
    Tensor loss = ag::cross_entropy(logits, b.tgt_out, kPad);
    opt.zero_grad();
    loss.backward();
    ag::optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    tokens += b.src.numel() + b.tgt_in.numel();
    bar.update(step + 1, tokens, fmt::format("loss {:.4f}", loss.item()));
  }
  bar.finish();

  model.eval();
  std::vector<Sequence> held_out;
  std::set<Sequence> seen;
  // Short lengths have few held-out sequences: stop drawing after enough attempts.
  for (std::int64_t attempt = 0; static_cast<std::int64_t>(held_out.size()) < o.held_out && attempt < 1000000;
       ++attempt) {
    Sequence s = random_sequence(o, eval_gen);
    if (is_held_out(s) && seen.insert(s).second) held_out.push_back(s);
  }
  if (held_out.empty())
    throw std::invalid_argument(
        fmt::format("no sequence of length {} to {} is held out; use longer sequences", o.min_len, o.max_len));
  std::int64_t correct = 0;
  for (const Sequence& s : held_out) correct += decode(model, s) == answer(o, s);
  double accuracy = static_cast<double>(correct) / static_cast<double>(held_out.size());

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
      fmt::format("cross-attention, last layer (mean of heads): {} -> {}", digits(example), digits(predicted)));
  fmt::print("example: {} -> {} ({})\nwrote {}\n", digits(example), digits(predicted),
             predicted == answer(o, example) ? "right" : "wrong", png);
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
      "exit with status 1 when the held-out accuracy is below this fraction");
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
