// gpt_train_step: the time of one GPT training step (zero_grad + forward + backward + AdamW)
// on random token ids, for the reference configurations of docs/performance.md.
//
//   gpt_train_step --config small --threads 2 [--steps 30] [--warmup 5] [--precision fp32|bf16|auto]
//   mpirun -np 2 gpt_train_step --config small --threads 1     (data-parallel: docs/distributed.md)
//   gpt_train_step --config small --order create-graph|gradient|hvp|hvp-forward   (docs/higher_order.md)
//
// --order says what a step differentiates: `first` (the default) is the training step above;
// `create-graph` the same with backward(create_graph = true), the step of a gradient penalty
// before its penalty; `gradient` forward and ag::grad alone, with no update; `hvp` forward, a
// gradient with create_graph and the gradient of <gradient, v> for a fixed random v, with no
// update: a Hessian-vector product, to compare with `gradient`; `hvp-forward` the same product by
// forward over reverse (docs/forward_mode.md): the parameters carry v as their tangent through
// the forward pass and the backward pass, and H v is the gradient's tangent, with no graph of
// the backward pass and no second backward pass. The JSON line's
// peak_tensor_mb_median is the most tensor memory live during a step (memory_stats), a
// step's own cost beyond the model's.
//
// --profile adds where the step's time went (runtime/profile.h): the mean per step, in ms, of
// the time inside matrix products (OpenBLAS and oneDNN) and of each other family of work
// (elementwise, normalisation, softmax and attention outside their products, bf16 rounding,
// reductions and copies, the optimizer, the engine's bookkeeping, the allocator, the pool's
// hand-over), and what no probe covers (the model's own code between ops: "outside").
//
// Under mpirun the configuration's batch is the global one, split evenly over the processes,
// so a step does the same work however many there are; the JSON line (rank 0's) adds the
// gradient bytes each process sent, the time spent reducing, the part of it backward did not
// hide, and the overlap.
//
// page_faults_per_step_median counts the minor page faults of a measured step (getrusage): the
// fresh pages it touched, which a step that reuses its buffers does not.
//
// Prints a line per measured step, then a final JSON line:
//   {"config": "small", "threads": 2, "ms_step_median": ..., "tokens_per_s": ...,
//    "peak_rss_mb": ..., "matmul_gflop_per_step": ..., ...}
#include <attograd/attograd.h>
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>

#include "../examples/common/kernels_option.h"
#include "../examples/common/precision_option.h"

namespace po = boost::program_options;

namespace {

struct Config {
  ag::nn::GPTConfig model;
  std::int64_t batch;
};

Config config_named(const std::string& name) {
  if (name == "tiny") return {{.vocab_size = 65, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 64}, 16};
  if (name == "small") return {{.vocab_size = 65, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128}, 16};
  if (name == "medium") return {{.vocab_size = 65, .block_size = 128, .n_layer = 6, .n_head = 6, .n_embd = 192}, 32};
  throw std::invalid_argument("--config must be tiny, small or medium, got " + name);
}

// Multiply-adds of every matmul in one step, times 2 for FLOP: forward, and backward's two
// products per forward product (dX and dW).
double matmul_gflop(const Config& c) {
  double B = static_cast<double>(c.batch), T = static_cast<double>(c.model.block_size),
         C = static_cast<double>(c.model.n_embd), V = static_cast<double>(c.model.vocab_size),
         L = static_cast<double>(c.model.n_layer);
  double per_layer = B * T * C * (3 * C)           // q, k, v projections
                     + B * T * T * C * 2           // scores and weights x values, all heads together
                     + B * T * C * C               // output projection
                     + B * T * C * (4 * C) * 2;    // the MLP's two matmuls
  double forward = L * per_layer + B * T * C * V;  // plus the tied head
  return 2.0 * 3.0 * forward / 1e9;
}

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

// Minor page faults of the process so far: a fresh page touched for the first time.
std::int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name = "small";
  int threads = 2, steps = 30, warmup = 5;
  std::int64_t bucket_kb = 256;
  bool no_overlap = false, profiled = false;
  ag::dist::Environment mpi(argc, argv);
  const int ranks = ag::dist::world_size();
  std::string reference_ops, order = "first", precision = "auto";
  po::options_description opts("gpt_train_step: time GPT training steps (zero_grad + forward + backward + AdamW)");
  opts.add_options()("help,h", "show this help")("config", po::value(&name)->default_value(name),
                                                 "tiny, small or medium")(
      "threads", po::value(&threads)->default_value(threads), "OpenBLAS threads")(
      "steps", po::value(&steps)->default_value(steps), "measured steps")(
      "warmup", po::value(&warmup)->default_value(warmup), "unmeasured steps first")(
      "kernels", ag::examples::kernels_value(), ag::examples::kKernelsHelp)(
      "precision", ag::examples::precision_value(&precision), ag::examples::kPrecisionHelp)(
      "bucket-kb", po::value(&bucket_kb)->default_value(bucket_kb), "under mpirun: gradient KiB per bucket")(
      "no-overlap", po::bool_switch(&no_overlap), "under mpirun: reduce the gradients after backward, not during it")(
      "profile", po::bool_switch(&profiled), "also report the step's time by family of work (products, ...)")(
      "order", po::value(&order)->default_value(order),
      "first (a training step), create-graph (the same with backward(create_graph)), gradient (forward + "
      "ag::grad, no update), hvp (forward + a Hessian-vector product, no update) or hvp-forward (the same "
      "product by forward over reverse)")(
      "reference-ops", po::value(&reference_ops),
      "comma-separated ops to run on their reference kernels while the rest stay fast (linear, linear_gelu, gelu, "
      "layer_norm, rms_norm, embedding, cross_entropy, scaled_dot_product_attention, adam_update, clip_grad_norm): "
      "what "
      "each fast kernel buys");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
    std::vector<std::string> listed;
    for (std::size_t start = 0; start < reference_ops.size();) {
      std::size_t comma = std::min(reference_ops.find(',', start), reference_ops.size());
      listed.push_back(reference_ops.substr(start, comma - start));
      start = comma + 1;
    }
    ag::set_reference_ops(listed);
    if (order != "first" && order != "create-graph" && order != "gradient" && order != "hvp" && order != "hvp-forward")
      throw std::invalid_argument("--order must be first, create-graph, gradient, hvp or hvp-forward, got " + order);
    if (steps < 1 || warmup < 0 || threads < 1)
      throw std::invalid_argument(fmt::format(
          "--steps must be at least 1, --warmup at least 0 and --threads at least 1, got {}, {} and {}", steps, warmup,
          threads));
    if (order != "first" && ranks > 1) throw std::invalid_argument("--order " + order + " runs in one process only");
    Config c = config_named(name);
    const std::int64_t global_batch = c.batch;
    if (c.batch % ranks != 0)
      throw std::invalid_argument(fmt::format("the batch of {} does not split over {} processes", c.batch, ranks));
    c.batch /= ranks;
    ag::set_num_threads(threads);
    // The path taken, on stderr: stdout is the JSON line alone.
    ag::examples::PrecisionChoice chosen = ag::examples::apply_precision(precision, false);
    if (ag::dist::is_main_process()) std::cerr << "precision: " << chosen.why << "\n";
    ag::Generator gen(0);
    ag::nn::GPT model(c.model, gen);
    ag::dist::broadcast(model.parameters());
    if (ranks > 1) gen.manual_seed(1 + static_cast<std::uint64_t>(ag::dist::rank()));  // each rank its own batches
    ag::optim::AdamW opt(ag::optim::decay_groups(model, 0.1), {.lr = 1e-3});
    std::optional<ag::dist::DataParallel> dp;
    if (ranks > 1)
      dp.emplace(model.parameters(),
                 ag::dist::DataParallelOptions{.bucket_bytes = bucket_kb << 10, .overlap = !no_overlap});
    std::vector<double> sent_mb, reduce_ms, exposed_ms, overlap;
    auto random_ids = [&] {
      ag::Tensor t = ag::empty({c.batch, c.model.block_size}, ag::kInt64);
      for (auto& v : std::span(t.mutable_data_ptr<std::int64_t>(), static_cast<std::size_t>(t.numel())))
        v = static_cast<std::int64_t>(gen.next_u64() % static_cast<std::uint64_t>(c.model.vocab_size));
      return t;
    };
    std::vector<ag::Tensor> params = model.parameters(), direction;  // v, for --order hvp
    if (order == "hvp" || order == "hvp-forward")
      for (const ag::Tensor& p : params) direction.push_back(ag::randn(p.shape(), gen, p.dtype()));
    std::vector<double> ms, peak_mb;
    ag::profile::Totals profile_sum;  // over the measured steps
    std::vector<std::int64_t> live_bytes;
    std::vector<double> faults;  // minor page faults per measured step
    for (int s = 0; s < warmup + steps; ++s) {
      ag::Tensor x = random_ids(), y = random_ids();
      if (!dp) opt.zero_grad();  // before the baseline: a gradient with a graph (create-graph) goes here
      ag::reset_peak_bytes();
      std::int64_t before = ag::memory_stats().live_bytes;
      if (profiled) ag::profile::start();
      std::int64_t faults_before = minor_faults();
      auto start = std::chrono::steady_clock::now();
      if (order == "hvp-forward") {
        ag::fwad::DualLevel level;
        for (std::size_t i = 0; i < params.size(); ++i) ag::fwad::set_tangent(params[i], direction[i]);
        std::vector<ag::Tensor> g = ag::grad({model.loss(x, y)}, params);
        for (const ag::Tensor& gi : g) ag::fwad::tangent(gi);  // H v, one tensor per parameter
      } else if (order == "gradient" || order == "hvp") {
        ag::Tensor loss = model.loss(x, y);
        std::vector<ag::Tensor> g = ag::grad({loss}, params, {}, {.create_graph = order == "hvp"});
        if (order == "hvp") ag::grad(g, params, direction);
      } else if (dp) {
        dp->begin_micro_batch();
        ag::Tensor loss = model.loss(x, y);
        loss.backward(dp->loss_weight(loss));
        dp->end_micro_batch();
      } else {
        ag::Tensor loss = model.loss(x, y);
        loss.backward({}, std::nullopt, /*create_graph=*/order == "create-graph");
      }
      if (order == "first" || order == "create-graph") opt.step();
      double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      ag::profile::Totals step_profile = profiled ? ag::profile::stop() : ag::profile::Totals{};
      if (s >= warmup) {
        for (int f = 0; f < ag::profile::kFamilies; ++f) profile_sum.seconds[f] += step_profile.seconds[f];
        profile_sum.wall += step_profile.wall;
        ms.push_back(elapsed);
        peak_mb.push_back(static_cast<double>(ag::memory_stats().peak_bytes - before) / 1e6);
        faults.push_back(static_cast<double>(minor_faults() - faults_before));
        live_bytes.push_back(ag::memory_stats().live_bytes);
        if (dp) {
          const ag::dist::CommunicationStats& st = dp->last_step();
          sent_mb.push_back(static_cast<double>(st.bytes_sent) / 1e6);
          reduce_ms.push_back(st.reduce_seconds * 1e3);
          exposed_ms.push_back(st.exposed_seconds * 1e3);
          overlap.push_back(st.overlap());
        }
      }
    }
    // A gradient holding a graph (create-graph) refers back to its parameter: dropping it frees both.
    opt.zero_grad();
    auto median_of = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double median = sorted[sorted.size() / 2];
    double tokens = static_cast<double>(global_batch * c.model.block_size);
    // The reduction alone: the gradient's size summed across ranks with every rank ready (after
    // a collective that lines them up), so that no wait for a slower rank is in it.
    std::vector<double> alone_ms;
    if (dp) {
      std::int64_t n = 0;
      for (const ag::Tensor& p : model.parameters()) n += p.numel();
      std::vector<float> buffer(static_cast<std::size_t>(n), 1.0f);
      for (int i = 0; i < 11; ++i) {
        ag::dist::any(false);
        auto start = std::chrono::steady_clock::now();
        ag::dist::sum_in_rank_order(buffer.data(), n, ag::kFloat32);
        if (i > 0)
          alone_ms.push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
    }
    // The exposed time of the rank that waited longest (the others wait for it): the step's cost.
    double exposed_worst = 0;
    for (double e : ag::dist::all_gather(median_of(exposed_ms))) exposed_worst = std::max(exposed_worst, e);
    std::string communication;
    if (dp)
      communication = fmt::format(
          ", \"processes\": {}, \"buckets\": {}, \"sent_mb_per_step\": {:.3f}, \"reduce_ms_median\": {:.3f}, "
          "\"exposed_ms_median_worst_rank\": {:.3f}, \"overlap_median\": {:.3f}, \"overlap\": {}, "
          "\"reduce_alone_ms_median\": {:.3f}",
          ranks, dp->last_step().buckets, median_of(sent_mb), median_of(reduce_ms), exposed_worst, median_of(overlap),
          no_overlap ? "false" : "true", median_of(alone_ms));
    std::string profile_json;
    if (profiled) {
      double covered = 0.0;
      profile_json = fmt::format(", \"profile_ms\": {{\"step\": {:.3f}", profile_sum.wall * 1e3 / steps);
      for (int f = 0; f < ag::profile::kFamilies; ++f) {
        covered += profile_sum.seconds[f];
        profile_json += fmt::format(", \"{}\": {:.3f}", ag::profile::name(static_cast<ag::profile::Family>(f)),
                                    profile_sum.seconds[f] * 1e3 / steps);
      }
      profile_json += fmt::format(", \"outside\": {:.3f}}}", (profile_sum.wall - covered) * 1e3 / steps);
    }
    if (!ag::dist::is_main_process()) return 0;
    bool flat = std::adjacent_find(live_bytes.begin(), live_bytes.end(), std::not_equal_to<>()) == live_bytes.end();
    fmt::print(
        "{{\"config\": \"{}\", \"order\": \"{}\", \"kernels\": \"{}\", \"precision\": \"{}\", \"reference_ops\": "
        "\"{}\", \"blas\": \"{}\", "
        "\"threads\": {}, \"steps\": {}, \"peak_tensor_mb_median\": {:.2f}, "
        "\"ms_step_median\": {:.3f}, \"ms_step_min\": {:.3f}, "
        "\"tokens_per_s\": {:.0f}, \"peak_rss_mb\": {:.1f}, \"matmul_gflop_per_step\": {:.3f}, "
        "\"live_mb_after_step\": {:.2f}, \"memory_flat\": {}, \"page_faults_per_step_median\": {:.0f}{}{}}}\n",
        name, order, ag::kernels_name(ag::kernels()), chosen.bf16 ? "bf16" : "fp32", reference_ops, ag::blas_kernels(),
        threads, steps, median_of(peak_mb), median, sorted.front(), tokens / (median / 1000), peak_rss_mb(),
        matmul_gflop(c), static_cast<double>(live_bytes.back()) / 1e6, flat ? "true" : "false", median_of(faults),
        communication,
        profile_json);
  } catch (const ag::examples::Refused& e) {  // --precision bf16 where it cannot run: before any work
    std::cerr << "gpt_train_step: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gpt_train_step: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
