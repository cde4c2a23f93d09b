// A program's main around its body: start-up under mpirun, exceptions to exit statuses (program.h).
#include "program.h"

#include <attograd/attograd.h>

#include <cstdio>
#include <iostream>
#include <optional>

#include "preflight.h"
#include "ranks.h"
#include "stop.h"

namespace ag::examples {

int run_program(const std::string& name, int argc, char** argv, const std::function<int(Program&)>& body) {
  // Under mpirun, one of several processes (docs/distributed.md); otherwise nothing happens here.
  std::optional<dist::Environment> mpi;
  try {
    mpi.emplace(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 2;
  }
  Program program{argc, argv, name};
  // Under mpirun an error names its rank; and since the other ranks may be waiting for this one,
  // it stops them all (ranks.h).
  auto fail = [&](const std::string& what, int code) {
    std::cerr << program.name << ": " << rank_prefix() << what << "\n";
    return finish_rank(code);
  };
  int code = 0;
  try {
    check_environment();
    code = body(program);
  } catch (const AgreedExit& e) {
    return e.code;
  } catch (const dist::Mismatch& e) {  // thrown on every rank at once: rank 0 says why
    if (dist::is_main_process()) std::cerr << program.name << ": " << e.what() << "\n";
    return 2;
  } catch (const Refused& e) {  // before any work: nothing was written
    return fail(e.what(), 2);
  } catch (const Interrupted&) {  // a stop the body did not answer by saving something
    if (dist::is_main_process())
      std::cerr << "\n"
                << program.name << ": interrupted by " << StopOnSignal::signal_name() << "; nothing was saved\n";
    return 130;
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
  // Output that could not be written (a full disk, a closed pipe) is a failure, not a success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return fail("cannot write to standard output", 1);
  return finish_rank(code);  // a bad option on one rank must not leave the others waiting
}

void check_environment() {
  try {
    get_num_threads();  // reads AG_NUM_THREADS as the pool starts
  } catch (const std::invalid_argument& e) {
    refuse("{}", e.what());
  }
}

}  // namespace ag::examples
