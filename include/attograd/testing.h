// GoogleTest glue: gradcheck as an assertion whose failure message is gradcheck's report.
//
//   EXPECT_TRUE(ag::testing::gradcheck(f, {x, w}));
//   EXPECT_TRUE(ag::testing::gradcheck_in_place([&] { return layer.forward(x); }, tensors));
//   EXPECT_TRUE(ag::testing::gradgradcheck(f, {x, w}));      // the second derivative
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

// The same for tensors f reaches by itself, such as a module's parameters (see
// ag::gradcheck_in_place).
inline ::testing::AssertionResult gradcheck_in_place(const std::function<Tensor()>& f,
                                                     const std::vector<Tensor>& tensors,
                                                     const GradcheckOptions& options = {}) {
  GradcheckResult r = ag::gradcheck_in_place(f, tensors, options);
  if (r) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n" << r.report;
}

// The second derivative (see ag::gradgradcheck).
inline ::testing::AssertionResult gradgradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs,
                                                const GradcheckOptions& options = {}) {
  GradcheckResult r = ag::gradgradcheck(f, inputs, options);
  if (r) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n" << r.report;
}

inline ::testing::AssertionResult gradgradcheck_in_place(const std::function<Tensor()>& f,
                                                         const std::vector<Tensor>& tensors,
                                                         const GradcheckOptions& options = {}) {
  GradcheckResult r = ag::gradgradcheck_in_place(f, tensors, options);
  if (r) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n" << r.report;
}

}  // namespace ag::testing
