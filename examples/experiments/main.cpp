// experiments: each claim of the attention chapter put to a measured test.
//
//   experiments baselines   why attention at all: bigram and window MLP against the Mini-GPT
//   experiments scaling     why divide the scores by sqrt(d_k)
//   experiments causal      training without the causal mask
//   experiments mask-fill   masking with 0 instead of -inf
//   experiments positions   permutation equivariance, and positions on a reversal task
//   experiments shapes      where Q, K and V come from: self- vs cross-attention
//   experiments self-test   the study notes' self-test questions, answered by running code
//   experiments heads       multi-head against single-head attention at the same width
//   experiments importance  attention weights against gradient and leave-one-out importance
//   experiments bottleneck  a decoder that sees one fixed vector against cross-attention, by length
//   experiments rnn-bottleneck  a GRU encoder-decoder's last state against additive attention and a Transformer
//   experiments bidirectional  an encoder without the causal mask against causal models
//   experiments precision   what bf16 costs each step of attention, and a Mini-GPT trained with it
//   experiments sharpness   the largest Hessian eigenvalue while a Mini-GPT trains, against 2/lr
//   experiments sequential  a GRU against self-attention: time per step by T and threads, path length, gradient reach
//   experiments coreference  which noun "it" names: accuracy, each head's attention, and each head zeroed
//   experiments long-range  bigram, window MLP and GPT by how far back the answer lies
//
// docs/experiments.md has the measured tables and what each does and does not show.
#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>
#include <map>
#include <set>

#include "../common/cli.h"
#include "../common/memory_budget.h"
#include "../common/preflight.h"
#include "../common/program.h"
#include "../common/stop.h"
#include "experiments.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  using namespace experiments;
  const std::map<std::string, std::pair<int (*)(const Options&), const char*>> commands{
      {"baselines", {baselines, "bigram and fixed-window MLP language models against the Mini-GPT; loss by position"}},
      {"scaling", {scaling, "why divide by sqrt(d_k): score spread, saturation, gradients; a wide head trained"}},
      {"causal", {causal, "a Mini-GPT trained with and without the causal mask"}},
      {"mask-fill", {mask_fill, "masking with 0 instead of -inf: the exact leak, and a model trained with it"}},
      {"positions", {positions, "permutation equivariance; reversal with none/sinusoidal/learned/rotary positions"}},
      {"shapes", {shapes, "the shapes of Q, K, V and the weights in self- and cross-attention"}},
      {"self-test", {self_test, "the notes' five self-test questions, answered by running code"}},
      {"importance", {importance, "attention weights against gradient and leave-one-out importance"}},
      {"heads", {heads, "1, 2, 4 and 8 heads at the same width: loss, how differently the heads attend"}},
      {"bottleneck", {bottleneck, "a decoder reading one fixed vector against cross-attention, by source length"}},
      {"bidirectional",
       {bidirectional, "a BERT-style encoder (no causal mask) against causal models on a window's middle character"}},
      {"precision",
       {precision, "bf16: a long sum, attention weights, layer norm, the loss; a Mini-GPT in fp32 vs bf16"}},
      {"sharpness",
       {sharpness, "the largest Hessian eigenvalue while a Mini-GPT trains, against 2/lr (and AdamW's 38/lr)"}},
      {"rnn-bottleneck",
       {rnn_bottleneck,
        "a GRU encoder-decoder's last state against additive attention and the Transformer, by length"}},
      {"sequential",
       {sequential,
        "a GRU against self-attention: time per step by length and thread count, path length, gradient reach"}},
      {"coreference",
       {coreference,
        "which noun \"it\" names (a Winograd-style grammar): accuracy against models without attention, "
        "each head's attention, heads zeroed"}},
      {"long-range", {long_range, "bigram, window MLP and GPT by how far back the answer is; a GPT given too little"}},
  };
  Options o;
  std::string command, lang = "en";
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help")(
      "steps", ag::examples::with_default(&o.steps),
      "training steps per model (unless given: baselines 2400, its models need them to separate; long-range 200; "
      "precision 2000; sharpness 1000)")(
      "batch", ag::examples::with_default(&o.batch),
      "sequences per step (language models, long-range; bottleneck 4 times as many)")(
      "seed", ag::examples::seed_value(&o.seed), "random seed")(
      "corpus", po::value(&o.corpus)->multitoken()->value_name("FILE..."),
      "text files (UTF-8, Chinese too) for the experiments on text, instead of the English fortunes")(
      "corpus-chars", ag::examples::with_default(&o.corpus_chars),
      "characters of the corpus to use (code points, from its start)")("out", ag::examples::with_default(&o.out),
                                                                       "directory for pictures")(
      "distances", po::value(&o.distances)->multitoken()->value_name("K..."),
      "long-range: how far back the answer lies, each from 1 to 63 (default 2 4 8 10 16 32 48)")(
      "every-position", po::bool_switch(&o.every_position),
      "long-range: train on the loss at every position, the unpredictable first k too")(
      "lr", ag::examples::with_default(&o.gd_lr), "sharpness: gradient descent's step size")(
      "adam-lr", ag::examples::with_default(&o.adam_lr), "sharpness: AdamW's step size")(
      "every", ag::examples::with_default(&o.sharpness_every), "sharpness: steps between two measurements")(
      "lengths", po::value(&o.lengths)->multitoken()->value_name("T..."),
      "sequential: the sequence lengths timed, each from 2 to 4096 (default 16 32 ... 4096, the powers of 2)")(
      "check", po::bool_switch(&o.check), "exit 1 unless each effect goes the way the experiment reports")(
      "lang", ag::examples::with_default(&lang),
      "en or zh: the language of the printed labels (zh for shapes, self-test, mask-fill, causal and scaling; the "
      "others print English)");
  po::options_description hidden;
  hidden.add_options()("command", po::value(&command));
  po::positional_options_description positional;
  positional.add("command", 1);
  // A command after a list option (--distances 2 4 long-range, --corpus a.txt baselines) is read as
  // one of its values: when argv[1] is no command but a later word is, where it goes.
  auto misplaced_command = [&]() -> std::string {
    if (argc < 2 || commands.count(argv[1])) return "";
    for (int i = 2; i < argc; ++i)
      if (commands.count(argv[i])) return fmt::format(" (the command goes first: experiments {} [options])", argv[i]);
    return "";
  };
  auto usage = [&](std::ostream& out) {
    out << "usage: experiments COMMAND [options]\n\ncommands:\n";
    std::size_t width = 0;
    for (const auto& entry : commands) width = std::max(width, entry.first.size());
    for (const auto& [name, entry] : commands)
      out << "  " << name << std::string(width + 2 - name.size(), ' ') << entry.second << "\n";
    out << "\n" << opts << "\n";
  };
  try {
    po::options_description all;
    all.add(opts).add(hidden);
    po::variables_map vm;
    ag::examples::store_command_line(argc, argv, all, vm, &positional);
    if (vm.count("help")) {
      usage(std::cout);
      return 0;
    }
    po::notify(vm);
    ag::examples::check_environment();
    auto it = commands.find(command);
    if (it == commands.end()) {
      std::cerr << "experiments: " << (command.empty() ? "no command given" : "unknown command '" + command + "'")
                << misplaced_command() << "\n\n";
      usage(std::cerr);
      return 2;
    }
    if (vm["steps"].defaulted()) {
      if (command == "baselines") o.steps = 2400;
      if (command == "precision") o.steps = 2000;  // the run the 0.02 bound is stated for
      if (command == "long-range") o.steps = 200;
      if (command == "sharpness") o.steps = 1000;
    }
    using ag::examples::refuse;
    if (lang != "en" && lang != "zh") refuse("--lang must be en or zh, got '{}'", lang);
    o.zh = lang == "zh";
    if (o.steps < 1 || o.batch < 1) refuse("--steps and --batch must be positive, got {} and {}", o.steps, o.batch);
    if ((vm.count("distances") || o.every_position) && command != "long-range")
      refuse("--distances and --every-position are for long-range, not {}", command);
    if ((!vm["lr"].defaulted() || !vm["adam-lr"].defaulted() || !vm["every"].defaulted()) && command != "sharpness")
      refuse("--lr, --adam-lr and --every are for sharpness, not {}", command);
    if (!(o.gd_lr > 0) || !(o.adam_lr > 0) || !std::isfinite(o.gd_lr) || !std::isfinite(o.adam_lr))
      refuse("--lr and --adam-lr must be positive, got {} and {}", o.gd_lr, o.adam_lr);
    if (o.sharpness_every < 1) refuse("--every must be positive, got {}", o.sharpness_every);
    if (vm.count("lengths") && command != "sequential") refuse("--lengths is for sequential, not {}", command);
    if (o.lengths.empty()) refuse("--lengths: give at least one length");
    for (std::int64_t t : o.lengths)
      if (t < 2 || t > 4096) refuse("--lengths: {} is not between 2 and 4096", t);
    std::sort(o.lengths.begin(), o.lengths.end());
    o.lengths.erase(std::unique(o.lengths.begin(), o.lengths.end()), o.lengths.end());
    if (o.distances.empty()) refuse("--distances: give at least one distance");
    for (std::int64_t k : o.distances)
      if (k < 1 || k > 63) refuse("--distances: {} is not between 1 and 63 (sequences are 64 tokens long)", k);
    std::sort(o.distances.begin(), o.distances.end());
    o.distances.erase(std::unique(o.distances.begin(), o.distances.end()), o.distances.end());
    if (o.corpus_chars < 1) refuse("--corpus-chars must be positive, got {}", o.corpus_chars);
    // The widest language model the experiments train (scaling's), at --batch.
    ag::examples::check_fits_in_memory(
        fmt::format("--batch {}", o.batch),
        ag::examples::gpt_training_memory(
            {.vocab_size = 128, .block_size = 32, .n_layer = 2, .n_head = 1, .n_embd = 256}, o.batch));
    ag::examples::check_output_dir("--out", o.out, {});
    // The experiments on text read it when they get to it; too short a text is refused now.
    static const std::set<std::string> on_text{"baselines",  "scaling",       "causal",    "mask-fill", "heads",
                                               "importance", "bidirectional", "precision", "sharpness"};
    if (!on_text.count(command) && (vm.count("corpus") || !vm["corpus-chars"].defaulted()))
      refuse("{} does not read text: --corpus and --corpus-chars are for {}", command, fmt::join(on_text, ", "));
    if (on_text.count(command)) load_text(o);
    // A signal stops the experiment at the next op (status 130); a second one at once.
    ag::examples::StopOnSignal stop;
    ag::examples::StopBetweenOps stop_points;
    int code = it->second.first(o);
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::cerr << "experiments: cannot write to standard output\n";
      return 1;
    }
    return code;
  } catch (const po::error& e) {
    std::cerr << "experiments: " << e.what() << misplaced_command() << "\n\n";
    usage(std::cerr);
    return 2;
  } catch (const ag::examples::Refused& e) {  // before any work
    std::cerr << "experiments: " << e.what() << "\n";
    return 2;
  } catch (const ag::examples::Interrupted&) {
    std::cerr << "\nexperiments: interrupted by " << ag::examples::StopOnSignal::signal_name() << "\n";
    return 130;
  } catch (const std::exception& e) {
    std::cerr << "experiments: " << e.what() << "\n";
    return 1;
  }
}
