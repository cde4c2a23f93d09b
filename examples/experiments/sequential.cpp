// Sequential against parallel: what a recurrent network pays for reading one step after another,
// and what attention pays for reading everything at once. Three measurements, all at one width
// D = 64 (a GRU with hidden size D; causal self-attention with 4 heads of D / 4 and its output
// projection, as in a Transformer block without the rest):
//
//   1. Time per training step (forward, backward, an AdamW update) for sequences of T tokens,
//      batch 8, on this CPU at the process's thread count, and then at 1, 2 and as many threads
//      as the process may run on (ag::set_num_threads). The GRU makes T dependent steps, each a
//      small product; attention makes a few large products and T^2 scores, which is what more
//      threads can share.
//   2. Path length: the number of ops on the longest path of the autograd graph from the last
//      output back to the input, read from the graph itself. For the GRU it grows with T (the
//      first token reaches the last output through every step); for attention it does not.
//   3. Gradient reach: at initialisation, the norm of the gradient of one random projection of
//      the last output with respect to each input position, relative to the gradient at the
//      last position, by distance from it: for the tanh RNN, the GRU, the LSTM and attention
//      (docs/recurrent.md explains why the recurrent ones fade).
//
// --check asserts 2 and 3 (they do not depend on the machine); the times are reported only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include <sched.h>

#include "../common/plot.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

constexpr std::int64_t kWidth = 64, kHeads = 4, kBatch = 8;

// One model of the comparison: its module and how it maps x [B, T, D] to outputs [B, T, D].
struct Model {
  std::string name;
  std::shared_ptr<ag::nn::Module> module;
  std::function<Tensor(const Tensor&)> forward;
};

std::vector<Model> models(ag::Generator& gen, bool recurrent_kinds) {
  std::vector<Model> out;
  if (recurrent_kinds) {
    auto rnn = std::make_shared<ag::nn::RNN>(kWidth, kWidth, true, gen);
    out.push_back({"tanh RNN", rnn, [rnn](const Tensor& x) { return rnn->forward(x).states; }});
  }
  auto gru = std::make_shared<ag::nn::GRU>(kWidth, kWidth, true, gen);
  out.push_back({"GRU", gru, [gru](const Tensor& x) { return gru->forward(x).states; }});
  if (recurrent_kinds) {
    auto lstm = std::make_shared<ag::nn::LSTM>(kWidth, kWidth, true, gen);
    out.push_back({"LSTM", lstm, [lstm](const Tensor& x) { return lstm->forward(x).states; }});
  }
  auto attention =
      std::make_shared<ag::nn::MultiHeadAttention>(kWidth, kHeads, ag::nn::MultiHeadAttentionOptions{}, gen);
  out.push_back({"self-attention", attention,
                 [attention](const Tensor& x) { return attention->forward(x, x, {.causal = true}); }});
  return out;
}

// Milliseconds per training step on x [kBatch, T, D]: the median of `repeats` after one warm-up.
double step_ms(Model& model, std::int64_t t, ag::Generator& gen, int repeats) {
  ag::optim::AdamW opt(model.module->parameters(), {.lr = 1e-3});
  Tensor x = ag::randn({kBatch, t, kWidth}, gen);
  std::vector<double> ms;
  for (int i = 0; i <= repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor y = model.forward(x);
    (y * y).mean().backward();
    opt.step();
    std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    if (i > 0) ms.push_back(took.count());
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

// The CPUs this process may run on: what the pool starts with when AG_NUM_THREADS is not set.
int machine_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The number of ops on the longest path of the graph from `output` back to the leaf `input`.
// Depth first without recursion, so that a 1024-step GRU's graph does not need a deep stack.
std::int64_t path_length(const Tensor& output, const Tensor& input) {
  std::unordered_map<const ag::Node*, std::int64_t> longest;  // -1: the input is not behind it
  std::vector<std::pair<ag::Node*, std::size_t>> stack{{output.grad_fn().get(), 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    const std::vector<ag::Edge>& edges = node->next_edges();
    if (next < edges.size()) {
      const ag::Edge& e = edges[next++];
      if (e.node && !longest.count(e.node.get())) stack.emplace_back(e.node.get(), 0);
      continue;
    }
    std::int64_t best = -1;
    for (const ag::Edge& e : edges) {
      if (e.leaf && e.leaf == input.impl()) best = std::max<std::int64_t>(best, 1);
      if (e.node && longest.at(e.node.get()) >= 0) best = std::max(best, longest.at(e.node.get()) + 1);
    }
    longest[node] = best;
    stack.pop_back();
  }
  return longest.at(output.grad_fn().get());
}

// The path from the input x [1, T, D] to the output at the last position.
std::int64_t ops_from_first_input(Model& model, std::int64_t t, ag::Generator& gen) {
  Tensor x = ag::randn({1, t, kWidth}, gen).requires_grad_();
  Tensor last = model.forward(x).slice(1, t - 1, t);
  return path_length(last, x);
}

}  // namespace

int sequential(const Options& o) {
  const int threads = ag::get_num_threads();
  fmt::print(
      "A GRU and causal self-attention ({} heads), both of width {}, on sequences of T tokens, batch {}, {}.\n\n",
      kHeads, kWidth, kBatch, ag::examples::plural(threads, "thread"));

  // 1 and 2: time per step and path length, by T; the times at each thread count of the sweep,
  // the process's own among them.
  ag::Generator gen(o.seed);
  std::vector<Model> pair = models(gen, false);  // GRU, self-attention
  std::set<int> sweep{1, 2, machine_threads(), threads};
  std::map<int, std::vector<std::vector<double>>> ms_at;  // [threads][model][length]
  for (int n : sweep) {
    ag::set_num_threads(n);
    auto& ms = ms_at[n];
    ms.resize(pair.size());
    for (Model& m : pair)
      step_ms(m, o.lengths.front(), gen, 20);  // the thread pool and allocator warmed up, unmeasured
    for (std::int64_t t : o.lengths) {
      for (std::size_t m = 0; m < pair.size(); ++m)
        ms[m].push_back(step_ms(pair[m], t, gen, static_cast<int>(std::clamp<std::int64_t>(2048 / t, 5, 31))));
      fmt::print("T = {} measured on {}\n", t, ag::examples::plural(n, "thread"));
    }
  }
  ag::set_num_threads(threads);
  const std::vector<std::vector<double>>& ms = ms_at.at(threads);
  std::vector<std::vector<std::int64_t>> path(pair.size());
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < o.lengths.size(); ++i) {
    const std::int64_t t = o.lengths[i];
    std::vector<std::string> row{fmt::format("{}", t)};
    for (std::size_t m = 0; m < pair.size(); ++m) path[m].push_back(ops_from_first_input(pair[m], t, gen));
    for (std::size_t m = 0; m < pair.size(); ++m) row.push_back(fmt::format("{:.2f}", ms[m][i]));
    row.push_back(fmt::format("{:.2f}", ms[0][i] / ms[1][i]));
    for (std::size_t m = 0; m < pair.size(); ++m) row.push_back(fmt::format("{}", path[m].back()));
    rows.push_back(row);
  }
  fmt::print(
      "\nTime per training step (ms, median, {}) and ops on the longest path from the input to the last output:\n",
      ag::examples::plural(threads, "thread"));
  print_table({"T", "GRU ms", "attention ms", "GRU / attention", "GRU path", "attention path"}, rows);
  // The first length measured at which attention's step is the slower one.
  std::size_t first_slower = o.lengths.size();
  for (std::size_t i = 0; i < o.lengths.size() && first_slower == o.lengths.size(); ++i)
    if (ms[1][i] > ms[0][i]) first_slower = i;
  if (first_slower == o.lengths.size())
    fmt::print("\nAttention's step is the faster one at every T measured (up to {}): no crossover here.\n",
               o.lengths.back());
  else if (first_slower == 0)
    fmt::print("\nAttention's step is already the slower one at T = {}.\n", o.lengths.front());
  else
    fmt::print("\nAttention's step is faster at T = {} and slower at T = {}: they cross between the two here.\n",
               o.lengths[first_slower - 1], o.lengths[first_slower]);

  // The sweep: each model's time at each thread count, and how much faster its step is on the most
  // threads than on one.
  const int most = *sweep.rbegin();
  const std::vector<std::string> short_names{"GRU", "attention"};
  std::vector<std::string> sweep_header{"T"};
  for (int n : sweep)
    for (const std::string& name : short_names)
      sweep_header.push_back(fmt::format("{} ms, {}", name, ag::examples::plural(n, "thread")));
  if (most > 1)
    for (const std::string& name : short_names) sweep_header.push_back(fmt::format("{} speed-up 1 -> {}", name, most));
  std::vector<std::vector<std::string>> sweep_rows;
  for (std::size_t i = 0; i < o.lengths.size(); ++i) {
    std::vector<std::string> row{fmt::format("{}", o.lengths[i])};
    for (int n : sweep)
      for (std::size_t m = 0; m < pair.size(); ++m) row.push_back(fmt::format("{:.2f}", ms_at.at(n)[m][i]));
    if (most > 1)
      for (std::size_t m = 0; m < pair.size(); ++m)
        row.push_back(fmt::format("{:.2f}x", ms_at.at(1)[m][i] / ms_at.at(most)[m][i]));
    sweep_rows.push_back(row);
  }
  fmt::print("\nTime per training step (ms, median) by thread count{}:\n",
             most > 1 ? fmt::format(", and the speed-up from 1 thread to {}", most) : "");
  print_table(sweep_header, sweep_rows);

  std::filesystem::create_directories(o.out);
  std::vector<ag::plot::Series> timing;
  for (int n : sweep)
    for (std::size_t m = 0; m < pair.size(); ++m) {
      ag::plot::Series s{fmt::format("{}, {}", pair[m].name, ag::examples::plural(n, "thread")), {}, {}};
      for (std::size_t i = 0; i < o.lengths.size(); ++i) {
        s.x.push_back(std::log2(static_cast<double>(o.lengths[i])));
        s.y.push_back(std::log10(ms_at.at(n)[m][i]));
      }
      timing.push_back(s);
    }
  std::string png = (std::filesystem::path(o.out) / "sequential_time.png").string();
  ag::plot::line_plot_png(png, timing, fmt::format("time per training step, width {}, batch {}", kWidth, kBatch),
                          "log2 T (sequence length)", "log10 ms per step");
  fmt::print("wrote {}\n\n", png);

  // 3: gradient reach at initialisation, T = 64, float64.
  constexpr std::int64_t kT = 64, kReachBatch = 16;
  ag::Generator init(o.seed + 1);
  std::vector<Model> all = models(init, true);  // tanh RNN, GRU, LSTM, self-attention
  Tensor x = ag::randn({kReachBatch, kT, kWidth}, init, ag::kFloat64);
  Tensor r = ag::randn({kReachBatch, kWidth}, init, ag::kFloat64);
  const std::vector<std::int64_t> shown{0, 1, 2, 4, 8, 16, 32, 48, 63};
  std::vector<std::vector<double>> reach;  // [model][distance], relative to distance 0
  std::vector<ag::plot::Series> curves;
  for (Model& model : all) {
    model.module->to(ag::kFloat64);
    Tensor xs = x.detach().requires_grad_();
    Tensor last = model.forward(xs).slice(1, kT - 1, kT).reshape({kReachBatch, kWidth});
    (last * r).sum().backward();
    Tensor g = xs.grad();                          // [B, T, D]
    Tensor norms = (g * g).sum(2).sqrt().mean(0);  // [T]
    std::vector<double> n = norms.to_vector<double>(), by_distance;
    for (std::int64_t d = 0; d < kT; ++d) by_distance.push_back(n[static_cast<std::size_t>(kT - 1 - d)] / n.back());
    ag::plot::Series s{model.name, {}, {}};
    for (std::int64_t d = 0; d < kT; ++d) {
      s.x.push_back(static_cast<double>(d));
      s.y.push_back(std::log10(std::max(by_distance[static_cast<std::size_t>(d)], 1e-300)));
    }
    curves.push_back(s);
    reach.push_back(by_distance);
  }
  std::vector<std::vector<std::string>> reach_rows;
  for (std::int64_t d : shown) {
    std::vector<std::string> row{fmt::format("{}", d)};
    for (const auto& by_distance : reach)
      row.push_back(fmt::format("{:.2e}", by_distance[static_cast<std::size_t>(d)]));
    reach_rows.push_back(row);
  }
  fmt::print(
      "The gradient reaching each input from the last output, relative to the last input's, at initialisation\n"
      "(T = {}, float64, mean over {} sequences):\n",
      kT, kReachBatch);
  std::vector<std::string> header{"distance"};
  for (const Model& m : all) header.push_back(m.name);
  print_table(header, reach_rows);
  std::string reach_png = (std::filesystem::path(o.out) / "sequential_gradient_reach.png").string();
  ag::plot::line_plot_png(reach_png, curves, "the gradient reaching each input from the last output, at initialisation",
                          "distance from the last position (steps)", "log10 gradient norm, relative to distance 0");
  fmt::print("wrote {}\n\n", reach_png);

  if (o.check) {
    // The GRU's path grows by at least one op for every token (by each step's ops, in fact);
    // attention's is one length.
    std::int64_t per_token = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 1; i < o.lengths.size(); ++i)
      per_token = std::min(per_token, (path[0][i] - path[0][i - 1]) / (o.lengths[i] - o.lengths[i - 1]));
    expect(o.lengths.size() >= 2 && per_token >= 1 && path[0].front() >= o.lengths.front(),
           fmt::format("the GRU's path from the first input to the last output grows with every token ({} ops or "
                       "more per token between the lengths measured)",
                       o.lengths.size() >= 2 ? per_token : 0));
    expect(std::all_of(path[1].begin(), path[1].end(), [&](std::int64_t p) { return p == path[1].front(); }),
           fmt::format("attention's path is {} ops long whatever T is", path[1].front()));
    const auto &rnn = reach[0], &gru = reach[1], &attention = reach[3];
    expect(rnn[16] < 1e-3, "the tanh RNN's gradient 16 steps back is below a thousandth of the last input's");
    expect(gru[32] < 1e-2, "the GRU's gradient 32 steps back is below a hundredth of the last input's");
    auto [lo, hi] = std::minmax_element(attention.begin() + 1, attention.end());
    expect(*lo > 0.1 * *hi, "attention's gradient is as large 63 steps back as 1 step back, within a factor of 10");
  }
  return exit_code();
}

}  // namespace experiments
