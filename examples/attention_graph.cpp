// attention_graph: the autograd graph of one causal attention head, drawn with Graphviz.
//
//   x: [T, d_model] token vectors;  Wq, Wk: [d_model, d_k];  Wv: [d_model, d_v]
//   Q = x Wq,  K = x Wk,  V = x Wv
//   S = Q K^T / sqrt(d_k),  masked where key > query,  P = softmax(S),  out = P V
//   loss = mean(out^2)            (any scalar will do: it only starts the backward pass)
//
// Each op is called separately (not the fused attention op), so each one is a box in the
// picture. The backward pass runs with anomaly mode on, which also keeps the norm of the
// gradient reaching every op; the boxes show it. Writes attention_head.dot, and
// attention_head.svg when Graphviz's `dot` is on the PATH. Run with --help for the options.
#include <attograd/attograd.h>
#include <fmt/core.h>

#include <sys/wait.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "common/cli.h"
#include "common/preflight.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// The first executable `name` in a directory of $PATH, or an empty path.
fs::path find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) &&
        (fs::status(candidate, ec).permissions() & fs::perms::owner_exec) != fs::perms::none)
      return candidate;
  }
  return {};
}

// `s` as one word for /bin/sh: in single quotes, each ' written as '\''.
std::string shell_word(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t tokens = 5, d_model = 8, d_k = 4;
  std::string out_dir = "attention-graph-out";
  std::uint64_t seed = 0;
  po::options_description options("attention_graph: draw the autograd graph of one attention head");
  options.add_options()("help,h", "show this help")("tokens", ag::examples::with_default(&tokens), "sequence length T, 1 to 1024")(
      "d-model", ag::examples::with_default(&d_model), "width of the token vectors, 1 to 1024")(
      "d-k", ag::examples::with_default(&d_k), "width of the head (queries, keys and values), 1 to 1024")(
      "seed", ag::examples::seed_value(&seed), "seed of the random tokens and weights")(
      "out", ag::examples::with_default(&out_dir), "directory for attention_head.dot (and .svg)");
  po::variables_map vm;
  try {
    ag::examples::store_command_line(argc, argv, options, vm);
    po::notify(vm);
    // The graph is drawn to be read: a few tokens and narrow vectors. The bound also keeps a
    // mistyped size from asking for more memory than the machine has.
    constexpr std::int64_t kMax = 1024;
    for (auto [name, value] :
         {std::pair{"--tokens", tokens}, std::pair{"--d-model", d_model}, std::pair{"--d-k", d_k}})
      if (value < 1 || value > kMax)
        throw po::error(fmt::format("{} must be between 1 and {}, got {}", name, kMax, value));
  } catch (const po::error& e) {
    std::cerr << "attention_graph: " << e.what() << "\n" << options << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << options << "\n";
    return 0;
  }
  try {
    ag::examples::check_output_dir("--out", out_dir, {"attention_head.dot", "attention_head.svg"});
  } catch (const ag::examples::Refused& e) {
    std::cerr << "attention_graph: " << e.what() << "\n";
    return 2;
  }

  ag::Generator gen(seed);
  ag::Tensor x = ag::randn({tokens, d_model}, gen);
  ag::Tensor wq = ag::randn({d_model, d_k}, gen).requires_grad_();
  ag::Tensor wk = ag::randn({d_model, d_k}, gen).requires_grad_();
  ag::Tensor wv = ag::randn({d_model, d_k}, gen).requires_grad_();
  ag::Tensor future = ag::logical_not(ag::causal_mask(tokens, tokens));  // true where key > query

  ag::Tensor loss;
  {
    ag::DetectAnomalyGuard anomaly;
    ag::Tensor q = x.matmul(wq), k = x.matmul(wk), v = x.matmul(wv);
    ag::Tensor scores = q.matmul(k.transpose(0, 1)) * (1.0 / std::sqrt(static_cast<double>(d_k)));
    ag::Tensor p = ag::softmax(ag::masked_fill(scores, future, -INFINITY), -1);
    loss = p.matmul(v).pow(2.0).mean();
    loss.backward();
  }

  fs::path dot_file = fs::path(out_dir) / "attention_head.dot";
  try {
    fs::create_directories(out_dir);
    ag::io::write_file_atomically(dot_file.string(), ag::to_dot(loss, {{"Wq", wq}, {"Wk", wk}, {"Wv", wv}}));
  } catch (const std::exception& e) {  // checked above, so only a change since (a full disk, say)
    std::cerr << "attention_graph: could not write " << dot_file.string() << ": " << e.what() << "\n";
    return 1;
  }
  fmt::print("loss = {:.6f}\nwrote {}\n", loss.item(), dot_file.string());

  fs::path dot = find_on_path("dot");
  if (dot.empty()) {
    fmt::print(
        "Graphviz's dot is not installed (apt-get install graphviz); render the file with:\n"
        "  dot -Tsvg {} -o attention_head.svg\n",
        dot_file.string());
    return 0;
  }
  // dot writes the picture to its standard output, and this program writes the file: `dot -o`
  // would open attention_head.svg itself, following a symbolic link planted under that name.
  fs::path svg = fs::path(out_dir) / "attention_head.svg";
  std::string picture;
  std::FILE* from_dot = ::popen((shell_word(dot.string()) + " -Tsvg " + shell_word(dot_file.string())).c_str(), "r");
  if (from_dot == nullptr) {
    std::cerr << "attention_graph: cannot run " << dot.string() << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, from_dot)) > 0;) picture.append(buffer, n);
  int status = ::pclose(from_dot);
  if (status != 0) {
    std::cerr << "attention_graph: dot exited with status " << (WIFEXITED(status) ? WEXITSTATUS(status) : status)
              << "\n";
    return 1;
  }
  try {
    ag::io::write_file_atomically(svg.string(), picture);
  } catch (const std::exception& e) {
    std::cerr << "attention_graph: could not write " << svg.string() << ": " << e.what() << "\n";
    return 1;
  }
  fmt::print("wrote {}\n", svg.string());
  return 0;
}
