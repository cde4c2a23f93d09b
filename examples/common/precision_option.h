// The programs' `--precision fp32|bf16|auto` option: whether the run's matrix products take bf16
// inputs under autocast (ops/autocast.h). `auto`, the default, takes bf16 where oneDNN is built in
// and the CPU has a bf16 unit (AMX or AVX512-BF16) and the kernels are not the naive ones, else
// fp32; `bf16` where it cannot run is an error before any work starts. Checkpoints stay float32 either way.
//
// The library says whether bf16 products run here (ag::bf16_support()) and turns autocast on
// (ag::set_autocast_enabled); the option's names, the choice they make and the words that explain
// it are the programs', so they live here. Header-only: bench/gpt_train_step takes the option too.
#pragma once

#include <attograd/attograd.h>
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <string>
#include <string_view>

#include "preflight.h"

namespace ag::examples {

inline const char* kPrecisionHelp =
    "fp32, bf16 (matrix products with bf16 inputs and fp32 sums, on AMX or AVX512-BF16 via oneDNN) or auto "
    "(bf16 where the CPU has a bf16 unit, else fp32)";

// A whole run's choice, as the option names it.
enum class Precision { Fp32, Bf16, Auto };

// "fp32", "bf16" or "auto"; anything else is refused (Refused, from preflight.h), naming the option.
inline Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "bf16") return Precision::Bf16;
  if (name == "auto") return Precision::Auto;
  refuse("--precision must be fp32, bf16 or auto, got '{}'", name);
}

struct PrecisionChoice {
  bool bf16 = false;
  std::string why;  // one line for the log: "matmul: bf16 on AMX via oneDNN ..." or "fp32 OpenBLAS: ..."
};

// What `precision` means on this machine. Auto takes bf16 only where bf16_support() says it runs
// natively; Bf16 where it cannot is refused with the reason: before any work, exit status 2, like
// any option that cannot be honoured.
inline PrecisionChoice choose_precision(Precision precision) {
  const Bf16Support& s = bf16_support();
  std::string fp32 = fmt::format("fp32 OpenBLAS ({})", blas_kernels());
  bool naive = kernels() == Kernels::Naive;  // the plain loops take no bf16 products
  switch (precision) {
    case Precision::Fp32: return {false, fp32 + ": asked for with --precision fp32"};
    case Precision::Bf16:
      if (naive)
        refuse("--precision bf16: the naive kernels compute in fp32 and f64 only (use fp32, or --kernels fast)");
      if (!s.available) refuse("--precision bf16: {} (use fp32 or auto)", s.reason);
      return {true, "matmul: " + s.reason + ": asked for with --precision bf16"};
    case Precision::Auto: break;
  }
  if (naive) return {false, "fp32 plain loops (auto: the naive kernels take no bf16 products)"};
  if (s.available) return {true, "matmul: " + s.reason + " (auto: the CPU has a bf16 unit)"};
  return {false, fp32 + " (auto: " + s.reason + ")"};
}

// The option's value, checked when the command line is notified: a name that is none of the
// three is a usage error like any other bad option value.
inline boost::program_options::typed_value<std::string>* precision_value(std::string* name) {
  namespace po = boost::program_options;
  return po::value<std::string>(name)->default_value("auto")->notifier([](const std::string& value) {
    try {
      parse_precision(value);
    } catch (const Refused& e) {
      throw po::error(e.what());
    }
  });
}

// Chooses the precision `name` asks for and turns autocast on for this (the main) thread when the
// choice is bf16; prints the path taken and why, unless `print` is false (the caller prints it
// with the rest of its settings). A program chooses once and carries the choice.
inline PrecisionChoice apply_precision(const std::string& name, bool print = true) {
  PrecisionChoice choice = choose_precision(parse_precision(name));
  set_autocast_enabled(choice.bf16);
  if (print) fmt::print("precision: {}\n", choice.why);
  return choice;
}

}  // namespace ag::examples
