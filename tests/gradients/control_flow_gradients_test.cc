// Gradients through conditionals against finite differences: Switch and
// Merge alone (the harness), and whole Cond graphs, each branch taken (while
// loops: while_gradients_test.cc).
#include <gtest/gtest.h>

#include <cmath>

#include "devices/device_pool.h"
#include "graph/control_flow_builders.h"
#include "graph/gradients.h"
#include "graph/op_builders.h"
#include "scheduler/session.h"
#include "tests/gradients/gradient_check_util.h"
#include "tests/util/session_util.h"

namespace flowstate::test {
namespace {

TEST(GradientCheck, SwitchToTheTakenOutput) {
  for (bool pred : {true, false}) {
    GradCheck c;
    c.op = "Switch";
    c.inputs = {RandomF64(TensorShape({2, 3}), 1), Tensor::Scalar(pred)};
    c.outputs = {pred ? 1 : 0};  // the other output is dead
    EXPECT_TRUE(CheckGradient(c)) << pred;
  }
}

TEST(GradientCheck, MergeOfOneInput) {
  GradCheck c;
  c.op = "Merge";
  c.inputs = {RandomF64(TensorShape({3}), 2)};
  EXPECT_TRUE(CheckGradient(c));
}

TEST(GradientCheck, IdentityNPassesEachGradientOn) {
  GradCheck c;
  c.op = "IdentityN";
  c.inputs = {RandomF64(TensorShape({2}), 3), RandomF64(TensorShape({2, 2}), 4)};
  c.outputs = {0, 1};
  EXPECT_TRUE(CheckGradient(c));
}

// loss = sum(Cond(p, x*y + sin(x), x - y*y)) + sum(x) * 0.5: x reaches the
// loss through both branches and around the conditional.
struct CondGraph {
  Scope root;
  std::vector<Gradient> grads;
  CondGraph() {
    Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({3}));
    Output y = ops::Placeholder(root.WithOpName("y"), DataType::kFloat64, PartialShape({3}));
    Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
    auto c = ops::Cond(
        root.WithOpName("c"), p,
        [&](const Scope& s) -> StatusOr<std::vector<Output>> {
          return std::vector<Output>{ops::Add(s, ops::Mul(s, x, y), ops::Sin(s, x))};
        },
        [&](const Scope& s) -> StatusOr<std::vector<Output>> {
          return std::vector<Output>{ops::Sub(s, x, ops::Mul(s, y, y))};
        });
    c.status().CheckOk();
    Output loss = ops::Add(root.WithOpName("loss"), ops::Sum(root, (*c)[0], std::vector<int32_t>{}),
                           ops::Mul(root, ops::Sum(root, x, std::vector<int32_t>{}),
                                    ops::Const(root, 0.5)));
    AddGradients(root, loss, {x, y}, &grads).CheckOk();
  }
};

double RunLoss(Session* s, const Tensor& x, const Tensor& y, bool p) {
  std::vector<Tensor> out;
  s->Run({{"x", x}, {"y", y}, {"p", Tensor::Scalar(p)}}, {"loss"}, {}, &out).CheckOk();
  return out[0].scalar<double>();
}

TEST(ControlFlowGradients, CondMatchesFiniteDifferencesOnEachBranch) {
  CondGraph g;
  ASSERT_FALSE(g.grads[0].is_none());
  ASSERT_FALSE(g.grads[1].is_none());
  auto s = NewSession(g.root.graph_def(), 2);
  const Tensor x = RandomF64(TensorShape({3}), 11), y = RandomF64(TensorShape({3}), 12);
  for (bool p : {true, false}) {
    std::vector<Tensor> out;
    ASSERT_TRUE(s->Run({{"x", x}, {"y", y}, {"p", Tensor::Scalar(p)}},
                       {g.grads[0].dense.name(), g.grads[1].dense.name()}, {}, &out)
                    .ok());
    for (int which = 0; which < 2; ++which) {
      for (int k = 0; k < 3; ++k) {
        const double h = 1e-6;
        Tensor plus = (which == 0 ? x : y).DeepCopy();
        Tensor minus = plus.DeepCopy();
        plus.data<double>()[k] += h;
        minus.data<double>()[k] -= h;
        const double numeric =
            which == 0 ? (RunLoss(s.get(), plus, y, p) - RunLoss(s.get(), minus, y, p)) / (2 * h)
                       : (RunLoss(s.get(), x, plus, p) - RunLoss(s.get(), x, minus, p)) / (2 * h);
        EXPECT_NEAR(out[which].data<double>()[k], numeric, 1e-6)
            << (which ? "dy" : "dx") << "[" << k << "] with p=" << p;
      }
    }
    // Spot-check against the closed form too: dL/dy is x (then) or -2y (else).
    EXPECT_NEAR(out[1].data<double>()[0], p ? x.data<double>()[0] : -2 * y.data<double>()[0], 1e-12);
  }
}

}  // namespace
}  // namespace flowstate::test
