// BLAS, set up once for this library: one thread (the pool of runtime/parallel.h splits large
// products instead), and kernels that fit the CPU.
//
// OpenBLAS chooses its kernels when it loads, from a table of the CPUs it knows. A CPU newer
// than the OpenBLAS release is not in it: Debian 12's OpenBLAS 0.3.21 does not know Intel's
// 4th and 5th generation Xeons (Sapphire Rapids, Emerald Rapids), and runs its generic
// "Prescott" kernels there, SSE3 only, about 4.5 times slower at matrix products than the AVX-512
// kernels the CPU can run. When that fallback happened on a CPU with AVX-512 (or AVX2 and FMA),
// setup_blas asks OpenBLAS to choose again, among the kernels written for those instruction
// sets. OPENBLAS_CORETYPE, when the user sets it, is the user's choice and is left alone.
#pragma once

#include <string>

namespace ag {

// Idempotent and thread-safe; runs when the library loads, and kernels/cpu/blas.h calls it again
// before its products in case they come first.
void setup_blas();

// The kernels BLAS runs, as OpenBLAS names them: "SkylakeX", "Haswell", "Zen", ... ("Prescott"
// is its generic fallback).
std::string blas_kernels();

}  // namespace ag
