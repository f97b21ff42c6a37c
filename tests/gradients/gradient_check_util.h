// The gradient-check harness: an op's symbolic gradient (AddGradients)
// against central finite differences, in float64.
//
// For an op with inputs x_i, the harness builds L = sum_k sum(y_k * W_k)
// over the op's outputs y_k, with fixed random weights W_k (so every output
// element gets a different upstream gradient), computes dL/dx_i from the
// gradient graph, and compares each element with (L(x + h) - L(x - h)) / 2h.
#ifndef FLOWSTATE_TESTS_GRADIENTS_GRADIENT_CHECK_UTIL_H_
#define FLOWSTATE_TESTS_GRADIENTS_GRADIENT_CHECK_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/attr_value.h"
#include "graph/tensor.h"

namespace flowstate::test {

struct GradCheck {
  std::string op;
  std::vector<Tensor> inputs;       // float64 inputs are checked; others are constants
  AttrMap attrs;
  std::vector<int> outputs = {0};   // the outputs that feed the loss
  std::vector<bool> check;          // per input; default: every float64 input
  double step = 1e-6;
  double tolerance = 1e-6;          // on |analytic - numeric| / max(1, |numeric|)
};

// Runs the check; reports each mismatching element (with its input and
// index) as a gtest failure.
::testing::AssertionResult CheckGradient(const GradCheck& c);

// float64 tensors with uniform values in [lo, hi).
Tensor RandomF64(const TensorShape& shape, uint64_t seed, double lo = -1, double hi = 1);

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_GRADIENTS_GRADIENT_CHECK_UTIL_H_
