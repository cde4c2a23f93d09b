#include "blas_setup.h"

#include <cblas.h>

#include <cctype>
#include <cstdlib>
#include <mutex>

// OpenBLAS built for every x86-64 CPU at once (DYNAMIC_ARCH, as Debian builds it) chooses its
// kernels in gotoblas_dynamic_init, which runs when it loads and does nothing while a choice
// stands; gotoblas_dynamic_quit drops the choice. Both are exported but not declared in cblas.h,
// and weak here, so that a BLAS without them links and is left as it is.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace ag {
namespace {

// The kernel set OpenBLAS should have chosen for this CPU, or nullptr when its generic one is
// all the CPU can run. OpenBLAS checks again that the operating system saves the wide
// registers, and steps down if it does not.
const char* kernels_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

void choose_kernels() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;                           // the user's choice
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;  // one kernel set only
  std::string chosen = blas_kernels();
  for (char& c : chosen) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (chosen != "prescott") return;  // OpenBLAS knew this CPU
  const char* better = kernels_for_this_cpu();
  if (better == nullptr) return;  // the fallback is right: the CPU has nothing wider
  // OpenBLAS reads its choice from the environment; it is set only while it reads it.
  ::setenv("OPENBLAS_CORETYPE", better, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  ::unsetenv("OPENBLAS_CORETYPE");
}

// When the library loads: no product can have started, and no other thread of ours runs.
[[maybe_unused]] const bool set_up_at_load = (setup_blas(), true);

}  // namespace

void setup_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    choose_kernels();
    openblas_set_num_threads(1);  // products are split across the library's pool instead
  });
}

std::string blas_kernels() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

}  // namespace ag
