// GoogleTest glue: gradcheck as an assertion whose failure message is gradcheck's report.
//
//   EXPECT_TRUE(ag::testing::gradcheck(f, {x, w}));
//
// Include it only in test programs (it needs <gtest/gtest.h>).
#pragma once

#include <gtest/gtest.h>

#include "autograd/gradcheck.h"

namespace ag::testing {

inline ::testing::AssertionResult gradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                                            const GradcheckOptions& options = {}) {
  GradcheckResult r = ag::gradcheck(f, inputs, options);
  if (r) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n" << r.report;
}

}  // namespace ag::testing
