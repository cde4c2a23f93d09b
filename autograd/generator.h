// Random numbers that are the same on every machine for the same seed.
//
// std::mt19937_64's output sequence is fixed by the C++ standard, but the std::*_distribution
// classes are not (libstdc++ and libc++ give different normals), so the conversions to
// uniform and normal values are written here.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "tensor.h"

namespace ag {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) { manual_seed(seed); }

  void manual_seed(std::uint64_t seed);
  std::uint64_t next_u64() { return engine_(); }
  // Uniform in [0, 1), from the top 53 bits: every double in the grid is equally likely.
  double uniform();
  // The same for float32, from the top 24 bits (rounding a double could give exactly 1.0f).
  float uniform_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }
  // Standard normal by the Box-Muller transform; the second value of each pair is kept.
  double normal();
  // Uniform on the integers low, low + 1, ..., high - 1 (needs low < high). Rejection keeps
  // every value exactly equally likely, where next_u64() % n would favour the small ones.
  std::int64_t integer(std::int64_t low, std::int64_t high);

  // The complete state as text (the engine's standard text form plus the spare normal), and
  // back: a run resumed from a checkpoint draws exactly the numbers it would have drawn.
  std::string state() const;
  void set_state(const std::string& state);

 private:
  std::mt19937_64 engine_;
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

// The generator used when none is passed.
Generator& default_generator();
void manual_seed(std::uint64_t seed);

// Uniform in [0, 1) and standard normal, float32 or float64.
Tensor rand(const Shape& shape, Generator& generator, DType dtype = kFloat32);
Tensor randn(const Shape& shape, Generator& generator, DType dtype = kFloat32);
Tensor rand(const Shape& shape, DType dtype = kFloat32);
Tensor randn(const Shape& shape, DType dtype = kFloat32);
// Integers uniform in [low, high), as int64 by default (or float32 / float64 holding whole
// numbers), like torch::randint: token ids, targets, random indices.
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& generator, DType dtype = kInt64);
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype = kInt64);
// The same with low = 0.
Tensor randint(std::int64_t high, const Shape& shape, Generator& generator, DType dtype = kInt64);
Tensor randint(std::int64_t high, const Shape& shape, DType dtype = kInt64);

}  // namespace ag
