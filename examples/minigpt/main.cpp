// minigpt: train a character-level GPT on real text, sample from it, and measure it.
//
//   minigpt train  [--corpus FILE ...] [--steps N] [--out DIR] ...
//   minigpt sample --checkpoint FILE [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]
//   minigpt eval   --checkpoint FILE (--text TEXT | --file FILE) [--dtype f32|f64]
//   minigpt explore --checkpoint FILE --prompt TEXT [--out DIR]
//   minigpt trace   --checkpoint FILE --text TEXT [--layer L] [--head H] [--lang en|zh]
//                   (one head step by step: X, W_Q, W_K, W_V, Q, K, V, S, S/sqrt(d_k), masked S, P, O)
//   minigpt bisect  A B   (two traces of train --trace: the first op whose values differ)
//
// train, sample and eval take --kernels fast|reference|naive (ops/kernels.h) and --precision fp32|bf16|auto
// (examples/common/precision_option.h: bf16 matrix products where the CPU has a bf16 unit).
//
// `minigpt SUBCOMMAND --help` lists every option. Exit status (examples/common/program.h): 0 done,
// 2 refused before any work (a bad option, input or output place: examples/common/preflight.h),
// 1 failed during the run, 130 stopped by SIGINT or SIGTERM (train saves its checkpoint first).
#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include "../common/cli.h"
#include "../common/kernels_option.h"
#include "../common/memory_budget.h"
#include "../common/precision_option.h"
#include "../common/preflight.h"
#include "../common/program.h"
#include "minigpt.h"

namespace po = boost::program_options;
using ag::examples::plural;
using ag::examples::refuse;
using ag::examples::with_default;

namespace {

// Parses argv[2:] against `options`; returns false (after printing help or an error) when the
// program should stop.
bool parse(int argc, char** argv, const po::options_description& options, po::variables_map& vm, int& exit_code) {
  try {
    ag::examples::store_command_line(argc - 1, argv + 1, options, vm);
    if (vm.count("help")) {
      std::cout << options << "\n";
      exit_code = 0;
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "minigpt " << argv[1] << ": " << e.what() << "\n\n" << options << "\n";  // as refusals begin
    exit_code = 2;
    return false;
  }
  return true;
}

int train_command(int argc, char** argv) {
  minigpt::TrainOptions o;
  minigpt::TrainWords words;
  po::options_description opts = minigpt::train_options(o, words);
  po::variables_map vm;
  int code = 0;
  if (!parse(argc, argv, opts, vm, code)) return code;
  minigpt::apply_train_words(o, words);
  // Before anything else is said: a model option that contradicts the run being resumed.
  if (o.resume && !o.overwrite)
    minigpt::take_resumed_run(o, [&](const std::string& name) { return vm.count(name) && !vm[name].defaulted(); });
  if (vm["warmup"].defaulted()) o.warmup = std::min(o.warmup, std::max<std::int64_t>(o.steps, 0));
  return minigpt::train(o);
}

int sample_command(int argc, char** argv) {
  std::string checkpoint, prompt = "\n";
  std::int64_t tokens = 500;
  double temperature = 0.8;
  std::int64_t top_k = 20;
  std::uint64_t seed = 0;
  std::string precision;
  po::options_description opts("minigpt sample: generate text from a trained checkpoint");
  opts.add_options()("help,h", "show this help")(
      "checkpoint", po::value(&checkpoint)->required(),
      "the model file minigpt train wrote (minigpt.safetensors, not the training state beside it)")(
      "prompt", with_default(&prompt), "text to continue")("tokens", with_default(&tokens), "characters to generate")(
      "temperature", with_default(&temperature),
      "0 = always the most likely character, inf = uniformly among the top k")(
      "top-k", with_default(&top_k), "sample among the k most likely characters (0 = all)")(
      "seed", ag::examples::seed_value(&seed), "sampling seed")("kernels", ag::examples::kernels_value(),
                                                                ag::examples::kKernelsHelp)(
      "precision", ag::examples::precision_value(&precision), ag::examples::kPrecisionHelp);
  po::variables_map vm;
  int code = 0;
  if (!parse(argc, argv, opts, vm, code)) return code;
  // stdout is the sample alone: the path taken goes to stderr.
  std::cerr << "precision: " << ag::examples::apply_precision(precision, false).why << "\n";
  minigpt::check_sampling_options("--tokens", tokens, temperature, top_k);
  ag::examples::check_input_file("--checkpoint", checkpoint);
  minigpt::Loaded m = minigpt::load(checkpoint);
  std::vector<std::int64_t> ids = minigpt::encode_prompt(m.tokenizer, "--prompt", prompt);
  ag::Generator gen(seed);
  ids = ag::nn::generate(*m.model, ids, {.max_new_tokens = tokens, .temperature = temperature, .top_k = top_k}, gen);
  fmt::print("{}\n", m.tokenizer.decode(ids));
  return 0;
}

int eval_command(int argc, char** argv) {
  std::string checkpoint, text, file, dtype = "f32", precision;
  po::options_description opts(
      "minigpt eval: mean next-token cross-entropy over a text's consecutive windows of block_size characters");
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint)->required(), "the model file")(
      "text", po::value(&text), "the text itself")("file", po::value(&file), "or a UTF-8 file holding it")(
      "dtype", with_default(&dtype), "f32, or f64 to compute in double precision")(
      "kernels", ag::examples::kernels_value(), ag::examples::kKernelsHelp)(
      "precision", ag::examples::precision_value(&precision),
      "for --dtype f32: fp32, bf16 or auto, as for train (f64 never autocasts)");
  po::variables_map vm;
  int code = 0;
  if (!parse(argc, argv, opts, vm, code)) return code;
  if (dtype == "f64" && precision == "bf16") refuse("--precision bf16 needs --dtype f32: float64 never autocasts");
  if (vm.count("text") == vm.count("file")) refuse("give exactly one of --text and --file");
  if (dtype != "f32" && dtype != "f64") refuse("--dtype must be f32 or f64, got '{}'", dtype);
  if (dtype == "f64") precision = "fp32";
  ag::examples::PrecisionChoice choice = ag::examples::apply_precision(precision, false);
  if (dtype == "f64") choice.why = fmt::format("f64 OpenBLAS ({}): --dtype f64 never autocasts", ag::blas_kernels());
  ag::examples::check_input_file("--checkpoint", checkpoint);
  if (vm.count("file")) {
    // The text, and its ids (8 bytes a character) and code points (4) on the way to them.
    ag::examples::check_fits_in_memory(fmt::format("--file {}", file),
                                       ag::examples::Size(ag::examples::check_input_file("--file", file)) * 14);
    text = ag::io::read_file(file);
  }
  minigpt::Loaded m = minigpt::load(checkpoint, dtype == "f64" ? ag::kFloat64 : ag::kFloat32);
  const char* source = vm.count("file") ? "--file" : "--text";
  std::vector<std::int64_t> ids = minigpt::encode_prompt(m.tokenizer, source, text);
  std::int64_t t = m.model->config.block_size, n = static_cast<std::int64_t>(ids.size());
  if (n < t + 1)
    refuse("{}: the text has {}; it needs at least block_size + 1 = {}", source, plural(n, "character"), t + 1);
  // Windows t[i : i+T] -> t[i+1 : i+T+1] for i = 0, T, 2T, ... while i + T + 1 <= n. Every window
  // has T targets, so the mean over windows is the mean over all of them.
  ag::NoGradGuard no_grad;
  m.model->eval();
  double total = 0;
  std::int64_t windows = 0;
  for (std::int64_t i = 0; i + t + 1 <= n; i += t, ++windows) {
    std::vector<std::int64_t> x(ids.begin() + i, ids.begin() + i + t), y(ids.begin() + i + 1, ids.begin() + i + t + 1);
    total += m.model->loss(ag::from_vector(x, {1, t}), ag::from_vector(y, {1, t})).item();
  }
  fmt::print("windows: {} of {} ({}, {} kernels)\nprecision: {}\n", windows, plural(t, "character"), dtype,
             ag::kernels_name(ag::kernels()), choice.why);
  // As many digits as the dtype holds: float64's let the two kernel routes be compared to 1e-12.
  double loss = total / static_cast<double>(windows);
  fmt::print("loss: {:.{}g}\n", loss, dtype == "f64" ? 16 : 10);
  // A loss that is not finite is no measurement: finite weights can still overflow (a run
  // trained with a huge --lr), and a script reading the status must not take it for one.
  if (!std::isfinite(loss))
    throw std::runtime_error(
        fmt::format("the loss is {}: the model's outputs on this text are not finite (its "
                    "weights are, but may be too large: was it trained with a huge --lr?)",
                    loss));
  fmt::print("perplexity: {:.{}g}  (e^loss: as unsure as a uniform choice among that many characters)\n",
             std::exp(loss), dtype == "f64" ? 16 : 10);
  return 0;
}

int explore_command(int argc, char** argv) {
  std::string checkpoint, prompt, out_dir = "minigpt-out";
  po::options_description opts(
      "minigpt explore: the attention of every layer and head for a prompt, as one self-contained HTML page");
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint)->required(), "the model file")(
      "prompt", po::value(&prompt)->required(), "the text whose attention to show (at most block_size characters)")(
      "out", with_default(&out_dir), "directory for attention.html");
  po::variables_map vm;
  int code = 0;
  if (!parse(argc, argv, opts, vm, code)) return code;
  ag::examples::check_input_file("--checkpoint", checkpoint);
  ag::examples::check_output_dir("--out", out_dir, {"attention.html"});
  minigpt::Loaded m = minigpt::load(checkpoint);
  std::vector<std::int64_t> ids = minigpt::encode_prompt(m.tokenizer, "--prompt", prompt);
  if (std::ssize(ids) > m.model->config.block_size)
    fmt::print("note: --prompt has {}, more than the model's context of {}; the page shows the first {}\n",
               plural(std::ssize(ids), "character"), m.model->config.block_size, m.model->config.block_size);
  // The page holds every weight as text (about 9 bytes each) after holding them as doubles.
  const ag::nn::GPTConfig& c = m.model->config;
  ag::examples::Size t = std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()), c.block_size);
  ag::examples::check_fits_in_memory(fmt::format("the page for a prompt of {}", plural(t.value(), "character")),
                                     ag::examples::Size(c.n_layer) * c.n_head * t * t * 21);
  minigpt::PromptAttention attention = minigpt::attention_for_prompt(*m.model, m.tokenizer, prompt);
  std::filesystem::create_directories(out_dir);
  const std::string out = (std::filesystem::path(out_dir) / "attention.html").string();
  ag::io::write_file_atomically(
      out, minigpt::attention_html(attention, std::filesystem::path(checkpoint).filename().string()));
  fmt::print("wrote {}: {} x {} over {}; open it in a browser\n", out, plural(std::ssize(attention.weights), "layer"),
             plural(attention.weights[0].size(1), "head"), plural(std::ssize(attention.tokens), "character"));
  return 0;
}

// One head, step by step in the chapter's order, for the trained model and a fresh one
// (examples/minigpt/trace.cpp). Exit status 1 when a trace's P differs from the weights the
// model's own attention op computes.
int trace_command(int argc, char** argv) {
  std::string checkpoint, text, lang = "en";
  std::int64_t layer = 0, head = 0, show = 6;
  std::uint64_t seed = 1;
  po::options_description opts(
      "minigpt trace: one attention head for a short text, step by step in the chapter's order (X, W_Q, W_K, "
      "W_V, Q, K, V, S, S/sqrt(d_k), the masked S, P, O), for the trained model and for a fresh one");
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint)->required(), "the model file")(
      "text", po::value(&text)->required(),
      "a short text, at most block_size characters, each in the model's vocabulary")(
      "layer", with_default(&layer), "the layer, from 0")("head", with_default(&head), "the head, from 0")(
      "show", with_default(&show),
      "how many feature columns (and rows of W) to print, 1 to 64; a matrix over the characters shows up to 16 or "
      "--show")("seed", with_default(&seed), "the fresh model's initialisation")(
      "lang", with_default(&lang), "en or zh: the language of the labels");
  po::variables_map vm;
  int code = 0;
  if (!parse(argc, argv, opts, vm, code)) return code;
  if (lang != "en" && lang != "zh") refuse("--lang must be en or zh, got '{}'", lang);
  if (show < 1 || show > 64) refuse("--show must be from 1 to 64 columns, got {}", show);
  ag::examples::check_input_file("--checkpoint", checkpoint);
  minigpt::Loaded m = minigpt::load(checkpoint, ag::kFloat64);
  const ag::nn::GPTConfig& c = m.model->config;
  std::vector<std::int64_t> ids = minigpt::encode_prompt(m.tokenizer, "--text", text);
  if (std::ssize(ids) > c.block_size)
    refuse("--text has {}; the model reads at most its context of {}", plural(std::ssize(ids), "character"),
           c.block_size);
  if (layer < 0 || layer >= c.n_layer)
    refuse("--layer {} is out of range: the model has {} (0 to {})", layer, plural(c.n_layer, "layer"), c.n_layer - 1);
  if (head < 0 || head >= c.n_head)
    refuse("--head {} is out of range: each layer has {} (0 to {})", head, plural(c.n_head, "head"), c.n_head - 1);
  std::vector<std::string> characters;
  for (std::int64_t id : ids) characters.push_back(m.tokenizer.decode({id}));
  const bool zh = lang == "zh";
  const std::int64_t dk = c.n_embd / c.n_head;
  if (zh)
    fmt::print("文本：{} 个字符；第 {} 层（共 {} 层）第 {} 个头（共 {} 个），D = {}，d_k = {}；float64 计算\n\n",
               ids.size(), layer, c.n_layer, head, c.n_head, c.n_embd, dk);
  else
    fmt::print("text: {}; layer {} of {}, head {} of {}, D = {}, d_k = {}; computed in float64\n\n",
               plural(std::ssize(ids), "character"), layer, c.n_layer, head, c.n_head, c.n_embd, dk);
  minigpt::HeadTrace trained = minigpt::trace_head(*m.model, ids, layer, head);
  minigpt::print_trace(
      trained, characters,
      zh ? fmt::format("训练后的头（{}）", checkpoint) : fmt::format("the trained head ({})", checkpoint), show, zh);
  ag::Generator generator(seed);
  ag::nn::GPT fresh(c, generator);
  fresh.to(ag::kFloat64);
  minigpt::HeadTrace untrained = minigpt::trace_head(fresh, ids, layer, head);
  minigpt::print_trace(untrained, characters,
                       zh ? fmt::format("同样形状、刚初始化的头（--seed {}）", seed)
                          : fmt::format("a fresh head of the same shape (--seed {})", seed),
                       show, zh);
  const double kAgree = 1e-12;
  if (trained.difference > kAgree || untrained.difference > kAgree) {
    fmt::print(stderr,
               "minigpt trace: the trace's P differs from the model's own weights by {:.1e} (more than {:.0e})\n",
               std::max(trained.difference, untrained.difference), kAgree);
    return 1;
  }
  return 0;
}

// Two traces of `minigpt train --trace`, compared entry by entry: exit status 0 when they are
// identical, 1 at the first difference (named), 2 when a file is not a trace.
int bisect_command(int argc, char** argv) {
  std::vector<std::string> traces;
  po::options_description opts(
      "minigpt bisect A B: compare two traces written by minigpt train --trace and name the first op whose "
      "values differ (a trace written under mpirun is read with its FILE.rankR files)");
  opts.add_options()("help,h", "show this help");
  po::options_description hidden;
  hidden.add_options()("traces", po::value(&traces));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description positional;
  positional.add("traces", 2);
  po::variables_map vm;
  try {
    ag::examples::store_command_line(argc - 1, argv + 1, all, vm, &positional);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "minigpt bisect: " << e.what() << "\n\n" << opts << "\n";
    return 2;
  }
  if (traces.size() != 2) refuse("give two traces to compare, A and B; got {}", traces.size());
  std::vector<std::vector<std::string>> sides;
  for (const std::string& t : traces) {
    ag::examples::check_input_file("trace", t);
    std::vector<std::string> files{t};
    for (int rank = 1; std::filesystem::exists(minigpt::trace_file(t, rank)); ++rank)
      files.push_back(minigpt::trace_file(t, rank));
    sides.push_back(files);
  }
  ag::debug::TraceComparison c;
  try {
    c = ag::debug::compare_traces(sides[0], sides[1]);
  } catch (const std::invalid_argument& e) {
    refuse("{}", e.what());
  }
  for (std::size_t i = 0; i < 2; ++i)
    fmt::print(
        "{}: {}{}\n", i == 0 ? "A" : "B", traces[i],
        sides[i].size() > 1 ? fmt::format(" with {} of other ranks", plural(std::ssize(sides[i]) - 1, "file")) : "");
  fmt::print("{}\n", c.report);
  return c.identical ? 0 : 1;
}

// argv[1] names the subcommand, which gets the rest; main below turns what it throws into an exit
// status (examples/common/program.h).
int run_subcommand(ag::examples::Program& program) {
  std::string usage =
      "usage: minigpt {train|sample|eval|explore|trace|bisect} [options]   (minigpt SUBCOMMAND --help for the "
      "options)\n";
  const int argc = program.argc;
  char** argv = program.argv;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << usage;
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  program.name = "minigpt " + command;  // what its errors start with
  if (command == "train") return train_command(argc, argv);
  if (command == "sample") return sample_command(argc, argv);
  if (command == "eval") return eval_command(argc, argv);
  if (command == "explore") return explore_command(argc, argv);
  if (command == "bisect") return bisect_command(argc, argv);
  if (command == "trace") return trace_command(argc, argv);
  std::cerr << "minigpt: unknown subcommand '" << command << "'\n" << usage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) { return ag::examples::run_program("minigpt", argc, argv, run_subcommand); }
