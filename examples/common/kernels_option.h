// The programs' `--kernels fast|reference|naive` option: which implementation the ops run for
// the whole run (ops/kernels.h). `fast` is the default; `reference` trains on the readable
// kernels of ops/reference/, and `naive` on the plain loops of kernels/naive/ (one thread, fp32
// or f64), both slower, with the same numbers to rounding.
#pragma once

#include <attograd/attograd.h>

#include <boost/program_options.hpp>
#include <string>

namespace ag::examples {

inline const char* kKernelsHelp =
    "fast (fused, SIMD, threaded), reference (the readable kernels of ops/reference/) or naive (the plain loops of "
    "kernels/naive/, one thread, fp32 or f64)";

// The option's value: sets the kernels when the command line is notified; an unknown name is a
// usage error like any other bad option value.
inline boost::program_options::typed_value<std::string>* kernels_value() {
  namespace po = boost::program_options;
  return po::value<std::string>()->default_value("fast")->notifier([](const std::string& name) {
    try {
      set_kernels(parse_kernels(name));
    } catch (const std::invalid_argument&) {
      throw po::error("--kernels must be fast, reference or naive, got '" + name + "'");
    }
  });
}

}  // namespace ag::examples
