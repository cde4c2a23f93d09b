// first_gradients: build a small expression, run backward, and check every gradient against
// a finite-difference estimate computed right here.
//
//   h    = tanh(x W1 + b1)          x: [2, 3]  W1: [3, 4]  b1: [4]
//   y    = h W2                     W2: [4, 1]
//   loss = mean((y - target)^2)     target: [2, 1]
//
// Run with --help for the options.
#include <attograd/attograd.h>
#include <fmt/core.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>

#include "common/cli.h"
#include "common/preflight.h"

namespace po = boost::program_options;

namespace {

ag::Tensor loss_of(const ag::Tensor& x, const ag::Tensor& w1, const ag::Tensor& b1, const ag::Tensor& w2,
                   const ag::Tensor& target) {
  ag::Tensor h = (x.matmul(w1) + b1).tanh();
  ag::Tensor y = h.matmul(w2);
  return (y - target).pow(2.0).mean();
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seed = 0;
  double eps = 1e-6;
  po::options_description options(
      "first_gradients: values and gradients of a tiny network, checked by finite differences");
  options.add_options()("help,h", "show this help")("seed", ag::examples::seed_value(&seed),
                                                    "seed of the random inputs and weights")(
      "eps", ag::examples::with_default(&eps), "finite-difference step");
  po::variables_map vm;
  try {
    ag::examples::store_command_line(argc, argv, options, vm);
    po::notify(vm);
    // 0 would divide 0 by 0, and NaN differences would compare as no difference at all.
    if (!(std::isfinite(eps) && eps > 0))
      throw po::error(fmt::format("--eps must be a positive finite number, got {}", eps));
  } catch (const po::error& e) {
    std::cerr << "first_gradients: " << e.what() << "\n" << options << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << options << "\n";
    return 0;
  }

  // float64 throughout, so the finite differences are accurate to ~1e-9.
  ag::Generator gen(seed);
  ag::Tensor x = ag::randn({2, 3}, gen, ag::kFloat64);
  ag::Tensor target = ag::randn({2, 1}, gen, ag::kFloat64);
  ag::Tensor w1 = ag::randn({3, 4}, gen, ag::kFloat64).requires_grad_();
  ag::Tensor b1 = ag::randn({4}, gen, ag::kFloat64).requires_grad_();
  ag::Tensor w2 = ag::randn({4, 1}, gen, ag::kFloat64).requires_grad_();

  ag::Tensor loss = loss_of(x, w1, b1, w2, target);
  fmt::print("loss = mean((tanh(x W1 + b1) W2 - target)^2) = {:.6f}\n\n", loss.item());
  loss.backward();

  // Finite differences: nudge one weight by +-eps and see how the loss moves.
  ag::NoGradGuard no_grad;
  double worst = 0.0;
  for (auto [name, w] : {std::pair{"W1", w1}, std::pair{"b1", b1}, std::pair{"W2", w2}}) {
    fmt::print("{} = {}\n", name, w);
    fmt::print("{:>10} {:>14} {:>14} {:>10}\n", "element", "backward", "finite diff", "abs diff");
    double* v = w.mutable_data_ptr<double>();
    const double* g = w.grad().data_ptr<double>();
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      double saved = v[i];
      v[i] = saved + eps;
      double plus = loss_of(x, w1, b1, w2, target).item();
      v[i] = saved - eps;
      double minus = loss_of(x, w1, b1, w2, target).item();
      v[i] = saved;
      double numeric = (plus - minus) / (2 * eps);
      double difference = std::abs(numeric - g[i]);
      // std::max(worst, NaN) would keep worst and pass; a NaN difference counts as infinite.
      worst = std::isnan(difference) ? INFINITY : std::max(worst, difference);
      fmt::print("{:>10} {:>14.8f} {:>14.8f} {:>10.1e}\n", fmt::format("{}[{}]", name, i), g[i], numeric,
                 difference);
    }
    fmt::print("\n");
  }
  fmt::print("largest difference between backward and finite differences: {:.1e}\n", worst);
  return worst < 1e-6 ? 0 : 1;
}
