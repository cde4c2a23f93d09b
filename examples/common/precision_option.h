// The programs' `--precision fp32|bf16|auto` option: whether the run's matrix products take bf16
// inputs under autocast (ops/autocast.h). `auto`, the default, takes bf16 where oneDNN is built in
// and the CPU has a bf16 unit (AMX or AVX512-BF16), else fp32; `bf16` where it cannot run is an
// error before any work starts. Checkpoints stay float32 either way.
#pragma once

#include <attograd/attograd.h>
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <string>

#include "preflight.h"

namespace ag::examples {

inline const char* kPrecisionHelp =
    "fp32, bf16 (matrix products with bf16 inputs and fp32 sums, on AMX or AVX512-BF16 via oneDNN) or auto "
    "(bf16 where the CPU has a bf16 unit, else fp32)";

// The option's value, checked when the command line is notified.
inline boost::program_options::typed_value<std::string>* precision_value(std::string* name) {
  namespace po = boost::program_options;
  return po::value<std::string>(name)->default_value("auto")->notifier([](const std::string& value) {
    try {
      parse_precision(value);
    } catch (const std::invalid_argument&) {
      throw po::error("--precision must be fp32, bf16 or auto, got '" + value + "'");
    }
  });
}

// Turns autocast on for this (the main) thread when `name` chooses bf16 here, and prints the
// path taken and why. --precision bf16 on a machine without a bf16 unit is refused (Refused, from
// preflight.h), with the reason.
inline PrecisionChoice apply_precision(const std::string& name, bool print = true) {
  PrecisionChoice choice;
  try {
    choice = choose_precision(parse_precision(name));
  } catch (const std::exception& e) {
    refuse("{}", e.what());  // before any work: exit status 2, like any option that cannot be honoured
  }
  set_autocast_enabled(choice.bf16);
  if (print) fmt::print("precision: {}\n", choice.why);
  return choice;
}

}  // namespace ag::examples
