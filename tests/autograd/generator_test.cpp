// Checks autograd/generator.cpp: the same seed gives the same numbers on every machine.
#include <cmath>
#include <limits>
#include <numbers>

#include "../test_util.h"

namespace ag {
namespace {

TEST(Generator, EngineIsTheStandardMt19937_64) {
  // The C++ standard fixes this value: the 10000th output of a default-seeded (5489)
  // mt19937_64 is 9981545732273789042 ([rand.predef]).
  Generator gen(5489);
  std::uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = gen.next_u64();
  EXPECT_EQ(v, 9981545732273789042ULL);
}

TEST(Generator, UniformAndNormalFollowTheirFormulas) {
  // uniform = top 53 bits * 2^-53; normal = Box-Muller on (1 - u1, u2). Recomputed here from
  // the standard engine itself.
  std::mt19937_64 reference(42);
  double u1 = static_cast<double>(reference() >> 11) * 0x1.0p-53;
  double u2 = static_cast<double>(reference() >> 11) * 0x1.0p-53;
  double r = std::sqrt(-2.0 * std::log(1.0 - u1));
  Generator gen(42);
  EXPECT_EQ(gen.normal(), r * std::cos(2 * std::numbers::pi * u2));
  EXPECT_EQ(gen.normal(), r * std::sin(2 * std::numbers::pi * u2));
  gen.manual_seed(42);
  EXPECT_EQ(gen.uniform(), u1);
}

TEST(Generator, SameSeedSameTensors) {
  Generator a(123), b(123), c(124);
  Tensor x = randn({100}, a), y = randn({100}, b), z = randn({100}, c);
  EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>());
  EXPECT_NE(x.to_vector<float>(), z.to_vector<float>());
  manual_seed(5);
  Tensor p = rand({10}, kFloat64);
  manual_seed(5);
  Tensor q = rand({10}, kFloat64);
  EXPECT_EQ(p.to_vector<double>(), q.to_vector<double>());
}

TEST(Generator, Statistics) {
  // Mean and variance of 200,000 draws, within 5 standard errors of the true values.
  Generator gen(7);
  const int n = 200000;
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor u = rand({n}, gen, dtype).to(kFloat64);
    Tensor g = randn({n}, gen, dtype).to(kFloat64);
    const double* pu = u.data_ptr<double>();
    const double* pg = g.data_ptr<double>();
    double su = 0, sg = 0, sg2 = 0, umin = 1, umax = 0;
    for (int i = 0; i < n; ++i) {
      su += pu[i];
      sg += pg[i];
      sg2 += pg[i] * pg[i];
      umin = std::min(umin, pu[i]);
      umax = std::max(umax, pu[i]);
    }
    EXPECT_NEAR(su / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
    EXPECT_GE(umin, 0.0);
    EXPECT_LT(umax, 1.0);
    EXPECT_NEAR(sg / n, 0.0, 5 * std::sqrt(1.0 / n));
    EXPECT_NEAR(sg2 / n, 1.0, 5 * std::sqrt(2.0 / n));
  }
}

TEST(Generator, StateRoundTrip) {
  Generator a(11);
  a.normal();  // leaves a spare normal behind, which the state must carry too
  Generator b(0);
  b.set_state(a.state());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.normal(), b.normal());
  EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([&] { b.set_state("garbage"); }, "Generator: cannot restore"));
  // Text after the state, and a state of all zeros (which would draw only zeros), are refused;
  // b keeps the state it had.
  std::uint64_t next = Generator(b).next_u64();
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([&] { b.set_state(a.state() + " 7"); },
                                                       "the state text goes on after its last number"));
  std::string zeros;
  for (int i = 0; i < 312; ++i) zeros += "0 ";
  zeros += "312 0 0";
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([&] { b.set_state(zeros); },
                                                       "the state text is all zeros, which draws only zeros"));
  EXPECT_EQ(b.next_u64(), next);
}

TEST(Generator, RejectsNonFloatDtypes) {
  Generator gen(1);
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([&] { randn({2}, gen, kInt64); },
                                                       "randn: draws float32 or float64 values, asked for int64"));
}

TEST(Generator, RandintDrawsEachIntegerOfTheRangeEquallyOften) {
  Generator gen(11);
  Tensor t = randint(-2, 4, {60, 100}, gen);
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.shape(), (Shape{60, 100}));
  std::vector<int> counts(6, 0);
  for (std::int64_t v : t.to_vector<std::int64_t>()) {
    ASSERT_GE(v, -2);
    ASSERT_LT(v, 4);
    ++counts[static_cast<std::size_t>(v + 2)];
  }
  // 6000 draws, p = 1/6: mean 1000, standard deviation sqrt(6000 * 1/6 * 5/6) = 28.9; 5 sigma.
  for (int c : counts) EXPECT_NEAR(c, 1000, 145);
}

TEST(Generator, RandintIsTheEngineOutputModuloTheRange) {
  // For n = 10 only draws below 2^64 mod 10 = 6 are rejected, which 64-bit outputs never are in
  // practice: each value is low + next_u64() % n.
  Generator a(3), b(3);
  Tensor t = randint(5, 15, {4}, a);
  for (std::int64_t v : t.to_vector<std::int64_t>()) EXPECT_EQ(v, 5 + static_cast<std::int64_t>(b.next_u64() % 10));
  // Same seed, same numbers; the one-bound form starts at 0.
  Generator c(3), d(3);
  EXPECT_EQ(randint(10, {7}, c).to_vector<std::int64_t>(), randint(0, 10, {7}, d).to_vector<std::int64_t>());
  // The whole int64 range has n = 2^64 - 1: no overflow, every value is an int64.
  Generator e(1);
  EXPECT_NO_THROW(e.integer(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
}

TEST(Generator, RandintInFloatDtypesHoldsWholeNumbers) {
  Generator gen(5);
  Tensor t = randint(0, 3, {50}, gen, kFloat32);
  EXPECT_EQ(t.dtype(), kFloat32);
  for (float v : t.to_vector<float>()) EXPECT_TRUE(v == 0.0f || v == 1.0f || v == 2.0f) << v;
}

TEST(Generator, RandintRejectsEmptyRangesAndBadShapes) {
  Generator gen(0);
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([&] { randint(3, 3, {2}, gen); },
                                                       "randint: needs low < high, got low=3 high=3 for shape [2]"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([&] { randint(0, {2}, gen); },
                                                       "randint: needs low < high, got low=0 high=0"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [&] {
        randint(0, 5, {-1, 2}, gen);
      },
      "randint: shape [-1, 2] has a negative size"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>([&] { randint(0, 2, {2}, gen, kBool); },
                                                       "randint: draws int64, float32 or float64 values"));
}

}  // namespace
}  // namespace ag
