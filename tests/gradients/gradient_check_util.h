// The gradient-check harness: an op's symbolic gradient (AddGradients)
// against central finite differences, in float64.
//
// For an op with inputs x_i, the harness builds L = sum_k sum(y_k * W_k)
// over the op's outputs y_k, with fixed random weights W_k (so every output
// element gets a different upstream gradient), computes dL/dx_i from the
// gradient graph, and compares each element with (L(x + h) - L(x - h)) / 2h.
//
// Each check runs twice by default: once with the checked inputs fed
// through placeholders of their full static shape (so gradient functions
// may settle shapes while building) and once through placeholders whose
// dimensions are all unknown (-1), which sends every gradient function
// down its run-time-shape path (Shape, BroadcastGradientArgs, ...).
//
// OpUnderTest is the graph behind a check (forward op, loss, gradients) for
// any floating dtype; the PyTorch differential test (tests/torch/) dumps
// its outputs and gradients in float32.
//
// Every op passed to CheckGradient is recorded; CheckedOps() lists them,
// which the gradients_coverage ctest compares with the gradient registry.
// Not thread-safe: call from one thread.
#ifndef FLOWSTATE_TESTS_GRADIENTS_GRADIENT_CHECK_UTIL_H_
#define FLOWSTATE_TESTS_GRADIENTS_GRADIENT_CHECK_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/attr_value.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {
class Session;
}

namespace flowstate::test {

enum class FeedShapes { kBoth, kStatic, kUnknownDims };

struct GradCheck {
  std::string op;
  std::vector<Tensor> inputs;       // floating inputs are checked; others are constants
  AttrMap attrs;
  std::vector<int> outputs = {0};   // the outputs that feed the loss
  std::vector<bool> check;          // per input; default: every floating input not in `variables`
  // Inputs fed as Variables holding the given value (for Ref inputs such as
  // BatchNorm's moving statistics); assigned whenever a session is opened.
  std::vector<int> variables;
  // Reopen the session for every evaluation, so that a seeded stateful op
  // (Dropout) draws the same numbers in each.
  bool stateful = false;
  FeedShapes shapes = FeedShapes::kBoth;
  double step = 1e-6;
  double tolerance = 1e-6;          // on |analytic - numeric| / max(1, |numeric|)
};

// The op of a GradCheck in a graph with its loss and gradients.
class OpUnderTest {
 public:
  // Builds the graph and runs the forward op once (for the output shapes).
  static StatusOr<std::unique_ptr<OpUnderTest>> Build(const GradCheck& c, bool unknown_dims);
  ~OpUnderTest();

  // Indices (into GradCheck::inputs) of the differentiated inputs.
  const std::vector<int>& checked() const { return checked_; }
  // Values of GradCheck::outputs, and the weights W_k of the loss.
  const std::vector<Tensor>& outputs() const { return outputs_; }
  const std::vector<Tensor>& weights() const { return weights_; }
  // dL/dx for each checked input (dense, the input's shape); an
  // uninitialized Tensor where AddGradients found none.
  StatusOr<std::vector<Tensor>> Gradients();
  // L at the given values of the checked inputs.
  StatusOr<double> Loss(const std::vector<Tensor>& values);

 private:
  OpUnderTest() = default;
  Status Reopen();

  GradCheck c_;
  GraphDef graph_;
  bool init_ = false;
  std::vector<int> checked_;
  std::vector<std::string> feeds_, grad_names_;
  std::vector<Tensor> outputs_, weights_;
  std::unique_ptr<Session> session_;
};

// Runs the check; reports each mismatching element (with its input and
// index) as a gtest failure.
::testing::AssertionResult CheckGradient(const GradCheck& c);

// The ops CheckGradient has been called with in this process.
const std::set<std::string>& CheckedOps();

// The intra-op thread count of the device pool the checks run on (default
// 1). REQUIRES: called before the first check.
void SetIntraOpThreads(int n);

// float64 tensors with uniform values in [lo, hi).
Tensor RandomF64(const TensorShape& shape, uint64_t seed, double lo = -1, double hi = 1);

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_GRADIENTS_GRADIENT_CHECK_UTIL_H_
