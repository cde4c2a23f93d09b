// Precompiled once for every GoogleTest program (tests/meson.build): what tests/test_util.h
// includes, which is most of each test's compile time.
#include <attograd/attograd.h>
#include <attograd/testing.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>
