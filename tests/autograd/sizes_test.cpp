// Every size the library computes is checked before it is used: element counts, byte counts,
// the allocator's rounding, reshape, broadcasting, concatenation and splitting. A size that
// cannot exist is a std::length_error or std::invalid_argument naming the op and the shape; it
// never wraps into a small allocation that a later write overruns.
#include <limits>

#include "../test_util.h"
#include "runtime/allocator.h"

namespace ag {
namespace {

using test::throws_with;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

TEST(Sizes, ElementCountBeyondInt64IsRefused) {
  // 2^62 * 4 overflows int64: the count itself cannot be formed.
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        zeros({1LL << 62, 4});
      },
      "zeros: shape [4611686018427387904, 4]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { empty({kInt64Max, 2}); }, "more elements than int64 can count"));
}

TEST(Sizes, ByteCountBeyondAnyAllocationIsRefused) {
  // (2^62 - 1) float32 elements are 2^64 - 4 bytes: this used to wrap in the allocator's
  // rounding to a 64-byte block, and the fill that followed overran the heap.
  EXPECT_TRUE(throws_with<std::length_error>([] { zeros({(1LL << 62) - 1}); },
                                             "zeros: shape [4611686018427387903] of float32 needs"));
  EXPECT_TRUE(throws_with<std::length_error>([] { empty({1LL << 61}, kFloat64); }, "more than any allocation"));
  EXPECT_TRUE(throws_with<std::length_error>([] { randn({1537228672809129301}); }, "randn: shape"));
  EXPECT_TRUE(throws_with<std::length_error>([] { full({1LL << 60}, 1.0, kInt64); }, "full: shape"));
}

TEST(Sizes, MoreThanTheMachineHoldsIsRefusedBeforeAllocating) {
  // 2^44 float32 elements are 64 TiB: possible to count, impossible to back with memory.
  EXPECT_TRUE(throws_with<std::length_error>([] { ones({1LL << 22, 1LL << 22}); }, "more than this machine's memory"));
  EXPECT_TRUE(throws_with<std::length_error>([] { arange(0.0, 0x1p46); }, "arange: shape [70368744177664]"));
}

TEST(Sizes, AllocatorRefusesSizesItsRoundingWouldWrap) {
  constexpr std::size_t kSizeMax = std::numeric_limits<std::size_t>::max();
  for (std::size_t n : {kSizeMax, kSizeMax - 1, kSizeMax - 63})
    EXPECT_TRUE(throws_with<std::length_error>([n] { allocate_block(n); }, "allocate_block"));
}

TEST(Sizes, ReshapeProductIsChecked) {
  Tensor x = zeros({0});
  // The -1 is inferred from the product of the other sizes, which overflows here: refused
  // without signed overflow (UBSan would report it).
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        x.reshape({1LL << 32, 1LL << 32, -1});
      },
      "reshape: shape [4294967296, 4294967296]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { zeros({6}).reshape({kInt64Max, 2}); }, "reshape"));
  // A 0 makes the count 0 whatever the other sizes are, as x has.
  EXPECT_EQ(x.reshape({1LL << 32, 1LL << 32, 0}).shape(), (Shape{1LL << 32, 1LL << 32, 0}));
}

TEST(Sizes, BroadcastAndMatmulOutputsAreChecked) {
  Tensor a = zeros({1LL << 40, 0}), b = zeros({0, 1LL << 40});
  // [2^40, 0] @ [0, 2^40] is a [2^40, 2^40] result: 2^80 elements.
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { matmul(a, b); }, "matmul: shape [1099511627776, 1099511627776]"));
  Tensor c = zeros({1LL << 40, 1, 0}), d = zeros({1, 1LL << 40, 0});
  EXPECT_EQ(add(c, d).shape(), (Shape{1LL << 40, 1LL << 40, 0}));  // 0 elements: a valid, empty result
  // The same on the naive backend's loops, and broadcast_to and sum_to to and from such a shape:
  // the 2^80 of the other sizes is never formed (UndefinedBehaviorSanitizer would say so).
  Shape huge{1LL << 40, 1LL << 40, 0};
  EXPECT_EQ(broadcast_to(c, huge).shape(), huge);
  EXPECT_EQ(sum_to(zeros(huge), {1, 1LL << 40, 0}).shape(), (Shape{1, 1LL << 40, 0}));
  {
    KernelGuard naive(Kernels::Naive);
    EXPECT_EQ(add(c, d).shape(), huge);
    EXPECT_EQ(broadcast_to(c, huge).shape(), huge);
    EXPECT_EQ(sum_to(zeros(huge), {1, 1LL << 40, 0}).shape(), (Shape{1, 1LL << 40, 0}));
  }
  Tensor e = zeros({1LL << 21, 1}), f = zeros({1, 1LL << 21});
  EXPECT_TRUE(throws_with<std::length_error>([&] { add(e, f); }, "add: shape [2097152, 2097152] of float32"));
}

TEST(Sizes, ConcatenationAndSplitSumsAreChecked) {
  Tensor big = zeros({1LL << 62, 0});
  EXPECT_TRUE(throws_with<std::length_error>([&] { cat({big, big, big, big}, 0); }, "cat: the sizes along dim 0"));
  Tensor x = zeros({5});
  EXPECT_TRUE(throws_with<std::length_error>([&] { split(x, {kInt64Max, 1}, 0); }, "split: sizes"));
  // A split size near int64's limit gives one piece; the loop must not overflow stepping past it.
  auto pieces = split(x, kInt64Max, 0);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].shape(), (Shape{5}));
}

}  // namespace
}  // namespace ag
