// second_order: what second derivatives are good for, with ag::grad(..., {.create_graph = true})
// and the tools built on it in autograd/functional.h (hvp, hessian, jacobian). In float64:
//
//   (a) softmax's Jacobian and cross-entropy's Hessian, by autograd and by their closed forms;
//   (b) a logistic regression solved by Newton's method, each step H d = -g solved by conjugate
//       gradient from Hessian-vector products alone, against plain gradient descent;
//   (c) the sharpness (largest Hessian eigenvalue) of an attention loss at initialisation, with
//       and without the 1/sqrt(d_k) scale, by power iteration on Hessian-vector products.
//
// It exits with status 1 if any of its checks fails, so it doubles as a test.
#include <attograd/attograd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <functional>
#include <iostream>
#include <vector>

#include "common/cli.h"
#include "common/preflight.h"

namespace po = boost::program_options;
using ag::Tensor;

namespace {

int g_failures = 0;

void heading(const std::string& title) { fmt::print("\n=== {} ===\n", title); }

void check(const std::string& what, bool ok) {
  if (!ok) ++g_failures;
  fmt::print("  check: {} {}\n", what, ok ? "ok" : "FAILED");
}

// <a, b> over every element, and |a|.
double dot(const Tensor& a, const Tensor& b) { return (a * b).sum().item(); }
double norm(const Tensor& a) { return std::sqrt(dot(a, a)); }

double max_abs_difference(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

void show(const std::string& name, const Tensor& t, int precision = 4) {
  fmt::print("{}:\n{}\n", name, ag::to_string(t, {.precision = precision}));
}

// --- (a) closed forms ---------------------------------------------------------------------

// p = softmax(x) over n classes: dp_i/dx_j = p_i ([i = j] - p_j), i.e. J = diag(p) - p p^T.
void softmax_jacobian() {
  heading("(a) softmax's Jacobian: ag::jacobian against diag(p) - p p^T");
  Tensor x = ag::tensor({0.5, -1.2, 2.0, 0.1, -0.3}, {5}, ag::kFloat64);
  Tensor autograd_j = ag::jacobian([](const Tensor& t) { return ag::softmax(t, 0); }, x);

  std::vector<double> p = ag::softmax(x, 0).to_vector<double>();
  std::vector<double> closed;
  for (std::size_t i = 0; i < p.size(); ++i)
    for (std::size_t j = 0; j < p.size(); ++j) closed.push_back((i == j ? p[i] : 0.0) - p[i] * p[j]);
  Tensor closed_j = ag::tensor(closed, {5, 5}, ag::kFloat64);

  show("x", x);
  show("p = softmax(x)", ag::softmax(x, 0));
  show("ag::jacobian(softmax, x)  [5, 5]", autograd_j, 6);
  show("diag(p) - p p^T", closed_j, 6);
  double diff = max_abs_difference(autograd_j, closed_j);
  fmt::print("max |difference| = {:.1e}\n", diff);
  check("softmax Jacobian within 1e-12 of the closed form", diff < 1e-12);
}

// loss = (1/N) sum_r -log softmax(z_r)[t_r]. Its gradient in row r is (p_r - onehot(t_r)) / N;
// differentiating again, the one-hot is a constant, so the Hessian is softmax's Jacobian over N:
//   d^2 loss / dz_ri dz_sj = [r = s] (p_ri [i = j] - p_ri p_rj) / N
// Rows do not interact (zero between rows), and the targets do not appear at all.
void cross_entropy_hessian() {
  heading("(a) cross-entropy's Hessian in the logits: ag::hessian against (diag(p_r) - p_r p_r^T) / N");
  const std::int64_t rows = 2, classes = 4;
  Tensor logits = ag::tensor({1.0, -0.5, 0.3, 2.0,  //
                              -1.0, 0.7, 0.0, 0.4},
                             {rows, classes}, ag::kFloat64);
  Tensor targets = ag::from_vector<std::int64_t>({3, 1}, {rows});
  Tensor autograd_h = ag::hessian([&](const Tensor& z) { return ag::cross_entropy(z, targets); }, logits);

  std::vector<double> p = ag::softmax(logits, 1).to_vector<double>();
  std::vector<double> closed;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < classes; ++i)
      for (std::int64_t s = 0; s < rows; ++s)
        for (std::int64_t j = 0; j < classes; ++j) {
          double pi = p[static_cast<std::size_t>(r * classes + i)], pj = p[static_cast<std::size_t>(r * classes + j)];
          closed.push_back(r != s ? 0.0 : ((i == j ? pi : 0.0) - pi * pj) / static_cast<double>(rows));
        }
  Tensor closed_h = ag::tensor(closed, {rows, classes, rows, classes}, ag::kFloat64);

  show("logits [2, 4]", logits);
  fmt::print("targets: [3, 1]\n");
  // [2, 4, 2, 4] printed as the 8 x 8 matrix it is: row (r, i), column (s, j).
  show("ag::hessian(cross_entropy, logits), as [8, 8]", autograd_h.reshape({8, 8}), 6);
  show("closed form, as [8, 8]", closed_h.reshape({8, 8}), 6);
  double diff = max_abs_difference(autograd_h, closed_h);
  fmt::print("max |difference| = {:.1e}\n", diff);
  check("cross-entropy Hessian within 1e-12 of the closed form", diff < 1e-12);
}

// --- Hessian-vector products put to work --------------------------------------------------

using Hv = std::function<Tensor(const Tensor&)>;

// The largest eigenvalue of a symmetric H, seen only through v -> H v. Power iteration
// (v <- H v / |H v|) finds the eigenvalue of largest magnitude; if that one is negative, the
// same iteration on H - lambda I, whose spectrum is shifted to be >= 0, finds the top one.
double top_eigenvalue(const Hv& hv, const Tensor& start, int iterations = 300) {
  auto power = [&](double shift) {
    Tensor v = start / norm(start);
    double lambda = 0.0;
    for (int i = 0; i < iterations; ++i) {
      Tensor w = hv(v) - v * shift;
      double next = dot(v, w);  // the Rayleigh quotient v^T (H - shift) v, |v| = 1
      v = w / norm(w);
      if (std::abs(next - lambda) <= 1e-10 * std::abs(next)) return next + shift;
      lambda = next;
    }
    return lambda + shift;
  };
  double dominant = power(0.0);
  return dominant >= 0 ? dominant : power(dominant);
}

// Conjugate gradient for H d = b, H symmetric positive definite, touching H only through H p.
// In exact arithmetic it ends after at most n steps for n unknowns; rounding can add a step or two.
Tensor conjugate_gradient(const Hv& hv, const Tensor& b, int* iterations) {
  Tensor d = ag::zeros_like(b);
  Tensor r = b.clone();  // the residual b - H d
  Tensor p = r.clone();  // the search direction
  double rr = dot(r, r);
  const double tolerance = 1e-10 * std::sqrt(rr);  // relative: enough for Newton's fast convergence
  int i = 0;
  for (; i < 10 * b.numel() && std::sqrt(rr) > tolerance; ++i) {
    Tensor hp = hv(p);
    double alpha = rr / dot(p, hp);
    d = d + p * alpha;
    r = r - hp * alpha;
    double rr_next = dot(r, r);
    p = r + p * (rr_next / rr);
    rr = rr_next;
  }
  *iterations = i;
  return d;
}

// --- (b) Newton against gradient descent ---------------------------------------------------

// Logistic regression with a small ridge term:
//   loss(w) = mean_i [ log(1 + e^{z_i}) - y_i z_i ] + (lambda / 2) |w|^2,   z = X w
//   gradient  X^T (sigmoid(z) - y) / N + lambda w
//   Hessian   X^T diag(sigmoid'(z)) X / N + lambda I,   sigmoid' = s (1 - s) <= 1/4
// The ridge term keeps the optimum finite and the Hessian positive definite.
struct LogisticProblem {
  Tensor x;  // [N, 6]: 5 features and a column of ones (the bias)
  Tensor y;  // [N, 1]: labels 0 or 1
  double ridge = 1e-3;

  Tensor loss(const Tensor& w) const {
    Tensor z = x.matmul(w);
    return ((z.exp() + 1.0).log() - y * z).mean() + (w * w).sum() * (ridge / 2);
  }
  Tensor gradient(const Tensor& w) const {
    Tensor leaf = w.detach().requires_grad_();
    return ag::grad({loss(leaf)}, {leaf})[0];
  }
};

LogisticProblem make_logistic_problem(std::uint64_t seed) {
  const std::int64_t n = 200;
  ag::Generator gen(seed);
  // Features on different scales (3 down to 0.3): an elongated loss surface, as real data has.
  Tensor scales = ag::tensor({3.0, 1.0, 1.0, 0.5, 0.3}, {5}, ag::kFloat64);
  Tensor features = ag::randn({n, 5}, gen, ag::kFloat64) * scales;
  Tensor x = ag::cat({features, ag::ones({n, 1}, ag::kFloat64)}, 1);
  Tensor w_true = ag::tensor({0.5, -1.0, 2.0, 1.5, -2.0, 0.3}, {6, 1}, ag::kFloat64);
  // Labels drawn from the model itself, so the classes overlap and the fit is not perfect.
  std::vector<double> p = x.matmul(w_true).sigmoid().to_vector<double>(), labels;
  for (double pi : p) labels.push_back(gen.uniform() < pi ? 1.0 : 0.0);
  return {x, ag::tensor(labels, {n, 1}, ag::kFloat64)};
}

void newton_against_gradient_descent(std::uint64_t seed) {
  heading("(b) logistic regression: Newton with conjugate gradient on ag::hvp, against gradient descent");
  LogisticProblem problem = make_logistic_problem(seed);
  auto f = [&](const Tensor& w) { return problem.loss(w); };
  fmt::print("data: {} points, 5 features + bias, seed {}; loss = mean log-loss + {:g}/2 |w|^2\n", problem.x.size(0),
             seed, problem.ridge);

  // Newton's step d solves H d = -g. H (6 x 6 here, n x n in general) is never formed: conjugate
  // gradient only asks for H p, which ag::hvp computes with two backward passes.
  fmt::print("\nNewton's method from w = 0 (pure steps, no line search):\n");
  fmt::print("{:>6} {:>22} {:>12} {:>10}\n", "step", "loss", "|gradient|", "CG steps");
  Tensor w = ag::zeros({6, 1}, ag::kFloat64);
  std::vector<double> newton_losses{problem.loss(w).item()};
  fmt::print("{:>6} {:>22.16f} {:>12.3e} {:>10}\n", 0, newton_losses[0], norm(problem.gradient(w)), "");
  for (int step = 1; step <= 20; ++step) {
    Tensor g = problem.gradient(w);
    if (norm(g) < 1e-13) break;
    int cg_steps = 0;
    Tensor d = conjugate_gradient([&](const Tensor& p) { return ag::hvp(f, w, p); }, -g, &cg_steps);
    w = w + d;
    newton_losses.push_back(problem.loss(w).item());
    fmt::print("{:>6} {:>22.16f} {:>12.3e} {:>10}\n", step, newton_losses.back(), norm(problem.gradient(w)), cg_steps);
  }
  const double optimum = newton_losses.back();
  const double target = optimum + 1e-8;
  int newton_steps = 0;
  while (newton_losses[static_cast<std::size_t>(newton_steps)] > target) ++newton_steps;
  fmt::print("w* = {}\n", ag::to_string(w.reshape({6}), {.precision = 4}));

  // Gradient descent with the step 1/L, L the largest curvature anywhere. Since
  // sigmoid' <= 1/4 with equality at z = 0, H(w) <= H(0) for every w, so L = lambda_max(H(0)):
  // the sharpness at the start bounds the step size that is safe everywhere.
  Tensor start = ag::ones({6, 1}, ag::kFloat64);
  Tensor w0 = ag::zeros({6, 1}, ag::kFloat64);
  double l = top_eigenvalue([&](const Tensor& v) { return ag::hvp(f, w0, v); }, start);
  // How elongated the bowl is at the optimum: lambda_min = L' - lambda_max(L' I - H(w*)).
  auto hv_star = [&](const Tensor& v) { return ag::hvp(f, w, v); };
  double l_star = top_eigenvalue(hv_star, start);
  double mu = l_star - top_eigenvalue([&](const Tensor& v) { return v * l_star - hv_star(v); }, start);
  fmt::print("\nlargest Hessian eigenvalue at w = 0: L = {:.4f}, so gradient descent takes steps of 1/L = {:.4f}\n", l,
             1 / l);
  fmt::print("at w*: largest eigenvalue {:.4f}, smallest {:.5f}, condition number {:.0f}\n", l_star, mu, l_star / mu);

  const int max_steps = 5000;
  Tensor v = ag::zeros({6, 1}, ag::kFloat64);
  int gd_steps = 0;
  double gd_loss = problem.loss(v).item();
  for (; gd_steps < max_steps && gd_loss > target; ++gd_steps) {
    v = v - problem.gradient(v) * (1 / l);
    gd_loss = problem.loss(v).item();
  }
  fmt::print("\ntarget loss: the optimum Newton found + 1e-8 = {:.12f}\n", target);
  fmt::print("  Newton's method:  {} (each with its conjugate-gradient Hessian-vector products)\n",
             ag::examples::plural(newton_steps, "step"));
  fmt::print("  gradient descent: {}{} (loss {:.12f})\n", ag::examples::plural(gd_steps, "step"),
             gd_loss > target ? fmt::format(", stopped at the limit of {} without reaching it", max_steps) : "",
             gd_loss);
  fmt::print(
      "  Gradient descent shrinks the error by about 1 - mu/L per step; Newton rescales every direction\n"
      "  by its own curvature, and near the optimum doubles the correct digits at each step.\n");
  check("Newton's method needs fewer steps than gradient descent", newton_steps < gd_steps);
}

// --- (c) sharpness of attention with and without 1/sqrt(d_k) --------------------------------

// One attention layer at initialisation, in the setting of the chapter's argument: queries,
// keys and values with independent unit-variance entries, so that q . k has variance d_k.
//   out  = softmax(scale q k^T) v              q, k, v: [batch, 1 head, tokens, d_k]
//   loss = (1/2) mean over positions of |out - target|^2
// The sharpness is the largest eigenvalue of the Hessian of the loss with respect to the queries
// and keys (x = q and k stacked, v held fixed), where the scale acts.
struct AttentionAtInit {
  Tensor qk;  // [2, batch, 1, tokens, d_k]: q then k
  Tensor v, target;

  AttentionAtInit(std::uint64_t seed, std::int64_t d_k) {
    const std::int64_t batch = 4, tokens = 8;
    ag::Generator gen(seed);
    qk = ag::randn({2, batch, 1, tokens, d_k}, gen, ag::kFloat64);
    v = ag::randn({batch, 1, tokens, d_k}, gen, ag::kFloat64);
    target = ag::randn({batch, 1, tokens, d_k}, gen, ag::kFloat64);
  }
  static Tensor queries(const Tensor& x) { return x.slice(0, 0, 1).squeeze(0); }
  static Tensor keys(const Tensor& x) { return x.slice(0, 1, 2).squeeze(0); }

  Tensor loss(const Tensor& x, double scale) const {
    Tensor out = ag::scaled_dot_product_attention(queries(x), keys(x), v, {}, false, false, scale).output;
    double positions = static_cast<double>(v.numel() / v.size(-1));
    return (out - target).pow(2.0).sum() / (2 * positions);
  }
};

struct Sharpness {
  double score_std;      // spread of scale * q . k
  double median_winner;  // median over queries of the largest attention weight
  double smallest_grad;  // smallest and largest |dloss/dq_i| over queries i
  double largest_grad;
  double top_eigenvalue;  // the sharpness
};

Sharpness measure_sharpness(const AttentionAtInit& a, double scale, std::uint64_t seed) {
  auto f = [&](const Tensor& x) { return a.loss(x, scale); };
  Sharpness m{};
  Tensor scores = AttentionAtInit::queries(a.qk).matmul(AttentionAtInit::keys(a.qk).transpose(-2, -1)) * scale;
  m.score_std = std::sqrt(scores.pow(2.0).mean().item());
  std::vector<double> winners = ag::softmax(scores, -1).amax(-1).reshape({-1}).to_vector<double>();
  std::nth_element(winners.begin(), winners.begin() + static_cast<std::ptrdiff_t>(winners.size() / 2), winners.end());
  m.median_winner = winners[winners.size() / 2];

  Tensor x = a.qk.detach().requires_grad_();
  Tensor g = ag::grad({f(x)}, {x})[0];
  Tensor g_q = AttentionAtInit::queries(g);
  std::vector<double> per_query = g_q.pow(2.0).sum(-1).sqrt().reshape({-1}).to_vector<double>();
  m.smallest_grad = *std::min_element(per_query.begin(), per_query.end());
  m.largest_grad = *std::max_element(per_query.begin(), per_query.end());

  ag::Generator gen(seed + 1);
  Tensor start = ag::randn(a.qk.shape(), gen, ag::kFloat64);
  m.top_eigenvalue = top_eigenvalue([&](const Tensor& u) { return ag::hvp(f, a.qk, u); }, start, 2000);
  return m;
}

// Why the unscaled loss is sharper. For fixed k the scores s_i = scale K q_i are linear in q_i,
// so the Hessian in q_i is
//   d^2 loss / dq_i^2 = scale^2 K^T (d^2 loss / ds_i^2) K:
// dropping the scale multiplies it by d_k (scale^2 = 1/d_k becomes 1). Saturation pulls the
// other way, since d^2 loss / ds_i^2 vanishes on a one-hot row, but not on every row: among a
// few keys, some query always has two scores close together, and that query sits on a ridge
// between two plateaus. The largest eigenvalue comes from such a query.
//
// What this says about the chapter's reason for the scale (docs/attention.md, "Why large scores
// hurt"): unscaled scores spread like sqrt(d_k) and push rows towards one-hot, and on those rows
// the gradient does vanish (the smallest |dloss/dq_i| below). It does not vanish everywhere: the
// largest per-query gradient is bigger without the scale, from the same near-tie rows that make
// the loss sharp. Gradient descent with one learning rate diverges along the top eigenvector
// once the step exceeds 2 / sharpness, so those few sharp rows force a small step on every
// weight while the saturated rows hardly move: the scale avoids both at once.
void attention_sharpness(std::uint64_t seed) {
  heading("(c) sharpness of attention at initialisation, with and without the 1/sqrt(d_k) scale");
  fmt::print("q, k, v, target ~ N(0, 1): 4 sequences of 8 tokens, 1 head\n");
  fmt::print("loss = 1/2 mean over positions of |softmax(scale q k^T) v - target|^2\n");
  fmt::print("sharpness = largest eigenvalue of d^2 loss / d(q, k)^2, by power iteration on ag::hvp\n\n");
  fmt::print("{:>4} {:>10} {:>10} {:>14} {:>24} {:>11} {:>12}\n", "d_k", "scale", "score std", "median winner",
             "|dloss/dq_i| min .. max", "sharpness", "2/sharpness");
  Sharpness with{}, without{};
  const std::int64_t checked_d_k = 64;
  for (std::int64_t d_k : {16, 32, 64}) {
    AttentionAtInit a(seed + static_cast<std::uint64_t>(d_k), d_k);
    const double root = std::sqrt(static_cast<double>(d_k));
    for (double scale : {1 / root, 1.0}) {
      Sharpness m = measure_sharpness(a, scale, seed);
      fmt::print("{:>4} {:>10} {:>10.2f} {:>14.4f} {:>24} {:>11.4f} {:>12.4f}\n", d_k,
                 scale == 1.0 ? std::string("1") : fmt::format("1/sqrt({})", d_k), m.score_std, m.median_winner,
                 fmt::format("{:.1e} .. {:.1e}", m.smallest_grad, m.largest_grad), m.top_eigenvalue,
                 2 / m.top_eigenvalue);
      if (d_k == checked_d_k) (scale == 1.0 ? without : with) = m;
    }
    if (d_k != checked_d_k) fmt::print("\n");
  }
  double ratio = without.top_eigenvalue / with.top_eigenvalue;
  fmt::print("\nat d_k = {}: without the scale the loss is {:.0f} times sharper (scale^2 alone would give {})\n",
             checked_d_k, ratio, checked_d_k);
  fmt::print(
      "  why 1/sqrt(d_k): unscaled scores spread like sqrt(d_k) and saturate softmax rows, so some queries get almost "
      "no gradient while near-ties make ridges about d_k times sharper, which caps the learning rate at 2/sharpness\n");
  check("without the scale, softmax rows start nearer one-hot (larger median winner weight)",
        without.median_winner > with.median_winner);
  check("without the scale, some query's gradient is at least 10 times smaller than any scaled one",
        without.smallest_grad * 10 < with.smallest_grad);
  check("without the scale, the loss is at least 10 times sharper", ratio > 10);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seed = 1;
  po::options_description opts("second_order: Jacobians, Hessians, Newton's method and sharpness, by double backward");
  opts.add_options()("help,h", "show this help")("seed", ag::examples::seed_value(&seed),
                                                 "seed of the synthetic data in (b) and the attention inputs in (c)");
  po::variables_map vm;
  try {
    ag::examples::store_command_line(argc, argv, opts, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "second_order: " << e.what() << "\n" << opts << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  softmax_jacobian();
  cross_entropy_hessian();
  newton_against_gradient_descent(seed);
  attention_sharpness(seed);
  fmt::print("\n{} failed\n", ag::examples::plural(g_failures, "check"));
  return g_failures == 0 ? 0 : 1;
}
