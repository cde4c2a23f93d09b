// What a program's main does around its work, the same in every program that trains (minigpt,
// seq2seq):
//
//   int main(int argc, char** argv) { return ag::examples::run_program("seq2seq", argc, argv, parse_and_run); }
//
//   - under mpirun the process first joins the others (ag::dist::Environment, docs/distributed.md);
//     one that cannot start says why, status 2;
//   - what the body throws becomes an exit status and a line on stderr that starts with the
//     program's name and, under mpirun, the rank:
//       Refused (examples/common/preflight.h: before any work, nothing was written)   2
//       ag::dist::Mismatch (thrown on every rank at once: rank 0 says why)           2
//       AgreedExit (examples/common/ranks.h: another rank refused and said why)      its code, quietly
//       Interrupted (a stop request the body did not answer itself)                  130
//       any other std::exception (a failure during the run)                          1
//   - output that could not be written (a full disk, a closed pipe) is a failure, status 1;
//   - under mpirun a status other than 0 and 130 ends every rank at once (finish_rank), since the
//     others may be waiting for this one.
#pragma once

#include <functional>
#include <string>

namespace ag::examples {

// What the body is given: the command line with MPI's own arguments taken out, and the name its
// error messages start with. A program of subcommands makes the name precise ("minigpt train")
// once it knows which one runs.
struct Program {
  int argc;
  char** argv;
  std::string name;
};

// Runs `body` as the program `name`'s main, as above, and returns the process's exit status.
// Before the body, the environment is checked (check_environment).
int run_program(const std::string& name, int argc, char** argv, const std::function<int(Program&)>& body);

// The environment settings the library reads (AG_NUM_THREADS), checked like an option: a bad
// one throws Refused (status 2) before any work, rather than a failure once the run has begun
// writing its output. Starts the thread pool, which the run would start anyway.
void check_environment();

}  // namespace ag::examples
