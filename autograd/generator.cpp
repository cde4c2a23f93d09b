#include "generator.h"

#include <bit>
#include <cmath>
#include <numbers>
#include <sstream>
#include <type_traits>

#include "dispatch.h"

namespace ag {

void Generator::manual_seed(std::uint64_t seed) {
  engine_.seed(seed);
  has_spare_normal_ = false;
}

double Generator::uniform() {
  // 53 random bits scaled by 2^-53: exactly representable, in [0, 1).
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

double Generator::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  // Box-Muller: for U1, U2 uniform on (0, 1], R = sqrt(-2 ln U1) and angle 2 pi U2 give two
  // independent standard normals R cos, R sin. 1 - uniform() keeps U1 away from 0.
  double u1 = 1.0 - uniform();
  double u2 = uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * std::numbers::pi * u2;
  spare_normal_ = r * std::sin(theta);
  has_spare_normal_ = true;
  return r * std::cos(theta);
}

std::int64_t Generator::integer(std::int64_t low, std::int64_t high) {
  if (low >= high) throw_invalid("randint", "needs low < high, got low={} high={}", low, high);
  // n = high - low in unsigned arithmetic (it may exceed int64's range). Draws below
  // 2^64 mod n are thrown away: the rest fall into whole blocks of n values each.
  std::uint64_t n = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  std::uint64_t reject_below = (0 - n) % n;  // (2^64 - n) mod n = 2^64 mod n
  std::uint64_t r = next_u64();
  while (r < reject_below) r = next_u64();
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + r % n);
}

std::string Generator::state() const {
  std::ostringstream out;
  // The spare normal goes as its 64 bits: exact, where decimal text might round.
  out << engine_ << ' ' << has_spare_normal_ << ' ' << std::bit_cast<std::uint64_t>(spare_normal_);
  return out.str();
}

void Generator::set_state(const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 engine;
  bool has_spare = false;
  std::uint64_t spare_bits = 0;
  in >> engine >> has_spare >> spare_bits;
  if (in.fail()) throw_invalid("Generator", "cannot restore the generator from the given state text");
  if (in >> std::ws; !in.eof())
    throw_invalid("Generator", "cannot restore the generator: the state text goes on after its last number");
  // A Mersenne Twister whose words are all zero reads as a state but draws nothing but zeros;
  // four zero draws in a row from a real state have a chance of 2^-256.
  std::mt19937_64 probe = engine;
  if (probe() == 0 && probe() == 0 && probe() == 0 && probe() == 0)
    throw_invalid("Generator", "cannot restore the generator: the state text is all zeros, which draws only zeros");
  engine_ = engine;
  has_spare_normal_ = has_spare;
  spare_normal_ = std::bit_cast<double>(spare_bits);
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
// draw(T{}) returns the next value as a T.
template <class Draw>
Tensor fill_random(const char* op, const Shape& shape, DType dtype, Draw draw) {
  if (!is_floating(dtype)) throw_invalid(op, "draws float32 or float64 values, asked for {}", dtype_name(dtype));
  Tensor t = detail::empty_for(op, shape, dtype);
  dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.mutable_data_ptr<T>();
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = draw(T{});
  });
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, Generator& generator, DType dtype) {
  return fill_random("rand", shape, dtype, [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), float>)
      return generator.uniform_float();
    else
      return generator.uniform();
  });
}

Tensor randn(const Shape& shape, Generator& generator, DType dtype) {
  return fill_random("randn", shape, dtype, [&](auto tag) { return static_cast<decltype(tag)>(generator.normal()); });
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& generator, DType dtype) {
  if (low >= high)
    throw_invalid("randint", "needs low < high, got low={} high={} for shape {}", low, high, shape_str(shape));
  if (dtype == kBool) throw_invalid("randint", "draws int64, float32 or float64 values, asked for bool");
  Tensor t = detail::empty_for("randint", shape, dtype);
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.mutable_data_ptr<T>();
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(generator.integer(low, high));
  });
  return t;
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype) {
  return randint(low, high, shape, default_generator(), dtype);
}
Tensor randint(std::int64_t high, const Shape& shape, Generator& generator, DType dtype) {
  return randint(0, high, shape, generator, dtype);
}
Tensor randint(std::int64_t high, const Shape& shape, DType dtype) {
  return randint(0, high, shape, default_generator(), dtype);
}

Tensor rand(const Shape& shape, DType dtype) { return rand(shape, default_generator(), dtype); }
Tensor randn(const Shape& shape, DType dtype) { return randn(shape, default_generator(), dtype); }

}  // namespace ag
