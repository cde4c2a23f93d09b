// libFuzzer target: a command line as `minigpt train` reads one, up to the point where a run
// would open its first file. The bytes are split into words at each NUL byte; the words are
// stored against train's options in the programs' style (ag::examples::store_command_line:
// whole option names, a bare word refused), notified (--kernels, --seed), read into settings
// (--norm, --mlp, --precision) and checked (minigpt::check_train_options). Every refusal must
// be a boost::program_options::error or an ag::examples::Refused, and must say something; --help
// must print. Anything else (another exception, a crash, a leak, a hang) is a finding.
#include <boost/program_options.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "../../examples/common/cli.h"
#include "../../examples/common/preflight.h"
#include "../../examples/minigpt/minigpt.h"

namespace po = boost::program_options;

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "options_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // argv[0] is the subcommand's name, as main hands it on; a word ends at each NUL byte.
  std::vector<std::string> words{"train"};
  std::string word;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      words.push_back(word);
      word.clear();
    } else {
      word += static_cast<char>(data[i]);
    }
  }
  if (!word.empty()) words.push_back(word);
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());

  // What a previous input's --kernels or --precision set is put back first.
  ag::set_kernels(ag::Kernels::Fast);
  ag::set_autocast_enabled(false);
  minigpt::TrainOptions o;
  minigpt::TrainWords train_words;
  po::options_description options = minigpt::train_options(o, train_words);
  po::variables_map vm;
  try {
    ag::examples::store_command_line(static_cast<int>(argv.size()), argv.data(), options, vm);
    if (vm.count("help")) {
      std::ostringstream help;
      help << options;
      if (help.str().find("--steps") == std::string::npos) finding("--help does not list --steps");
      return 0;
    }
    po::notify(vm);
    minigpt::apply_train_words(o, train_words);
    if (vm["warmup"].defaulted()) o.warmup = std::min(o.warmup, std::max<std::int64_t>(o.steps, 0));
    minigpt::check_train_options(o);
  } catch (const po::error& e) {
    if (std::string(e.what()).empty()) finding("a command-line error with no message");
  } catch (const ag::examples::Refused& e) {
    if (std::string(e.what()).empty()) finding("a refusal with no message");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "options_fuzz: not a refusal: %s\n", e.what());
    std::abort();
  }
  return 0;
}
