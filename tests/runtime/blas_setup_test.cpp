// BLAS as runtime/blas_setup.h sets it up: one thread, and not OpenBLAS's generic fallback
// kernels on a CPU that can run better ones; a user's OPENBLAS_CORETYPE is kept.
#include "runtime/blas_setup.h"

#include <cblas.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>

#include "../test_util.h"

namespace ag {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Run by RespectsOpenblasCoretype in a child process: prints the kernels that process runs.
TEST(BlasSetup, DISABLED_PrintKernels) { std::printf("blas kernels: %s\n", blas_kernels().c_str()); }

TEST(BlasSetup, RunsOnOneThread) {
  setup_blas();
  EXPECT_EQ(openblas_get_num_threads(), 1);
}

TEST(BlasSetup, NotTheGenericKernelsOnACpuWithAvx2) {
  if (std::getenv("OPENBLAS_CORETYPE")) GTEST_SKIP() << "OPENBLAS_CORETYPE is set: the user chose";
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no AVX2";
  setup_blas();
  EXPECT_NE(lower(blas_kernels()), "prescott") << "OpenBLAS runs its SSE3 fallback on a CPU with AVX2";
}

TEST(BlasSetup, RespectsOpenblasCoretype) {
  std::array<char, 4096> self{};
  ssize_t length = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  ASSERT_GT(length, 0);
  std::string command = "OPENBLAS_CORETYPE=Prescott '" + std::string(self.data(), static_cast<std::size_t>(length)) +
                        "' --gtest_also_run_disabled_tests --gtest_filter=BlasSetup.DISABLED_PrintKernels 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  ASSERT_TRUE(pipe) << command;
  std::string out;
  std::array<char, 256> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe.get())) out += buffer.data();
  EXPECT_NE(out.find("blas kernels: Prescott"), std::string::npos) << out;
}

}  // namespace
}  // namespace ag
