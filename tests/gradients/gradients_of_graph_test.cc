// GradientsOfGraph (graph/gradients.h): the gradient nodes a client appends
// to its own graph (POST /v1/gradients) compute what AddGradients' do, are
// named under a prefix of their own, and every refusal names the field or
// node and adds nothing. Over REST and gRPC: python/tests/test_gradients.py.
#include <gtest/gtest.h>

#include "graph/control_flow_builders.h"
#include "graph/gradients.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "tests/util/session_util.h"

namespace flowstate {
namespace {

// loss = sum((x * w - y)^2) over float64 placeholders x, y and a Const w.
GraphDef LeastSquares() {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({3}));
  Output y = ops::Placeholder(root.WithOpName("y"), DataType::kFloat64, PartialShape({3}));
  Output w = ops::Identity(root.WithOpName("w"), ops::Const(root.WithOpName("w0"), 2.0));
  Output err = ops::Sub(root.WithOpName("err"), ops::Mul(root, x, w), y);
  ops::Sum(root.WithOpName("loss"), ops::Mul(root, err, err), std::vector<int32_t>{0});
  return root.graph_def();
}

std::vector<Tensor> RunWithFeeds(const GraphDef& g, const std::vector<std::string>& fetches) {
  std::unique_ptr<Session> s = test::NewSession(g, 1);
  std::vector<Tensor> out;
  Status st = s->Run({{"x", Tensor::FromVector<double>({1, 2, 3})},
                      {"y", Tensor::FromVector<double>({1, 1, 1})}},
                     fetches, {}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) out.assign(fetches.size(), Tensor::FromVector<double>({0, 0, 0}));
  return out;
}

TEST(GradientsOfGraph, AppendedNodesComputeTheGradient) {
  const GraphDef forward = LeastSquares();
  StatusOr<GraphGradients> g = GradientsOfGraph(forward, "loss", {"w", "x:0"});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->prefix, "gradients");
  ASSERT_EQ(g->grads.size(), 2u);
  for (const NodeDef& n : g->added.nodes) EXPECT_EQ(n.name.rfind("gradients/", 0), 0u) << n.name;
  GraphDef all = forward;
  for (const NodeDef& n : g->added.nodes) all.nodes.push_back(n);
  std::vector<Tensor> out = RunWithFeeds(all, {g->grads[0].dense.name(), g->grads[1].dense.name()});
  // d/dw = sum(2 * (x w - y) x) = 2 * (1*1 + 3*2 + 5*3) = 44; d/dx = 2 (x w - y) w.
  EXPECT_DOUBLE_EQ(out[0].flat<double>()[0], 44.0);
  EXPECT_EQ(out[1].flat<double>()[2], 20.0);
}

TEST(GradientsOfGraph, ASecondCallGetsAPrefixOfItsOwn) {
  GraphDef forward = LeastSquares();
  StatusOr<GraphGradients> first = GradientsOfGraph(forward, "loss", {"w"});
  ASSERT_TRUE(first.ok());
  for (const NodeDef& n : first->added.nodes) forward.nodes.push_back(n);
  StatusOr<GraphGradients> second = GradientsOfGraph(forward, "loss", {"x"});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->prefix, "gradients_1");
  for (const NodeDef& n : second->added.nodes) EXPECT_EQ(n.name.rfind("gradients_1/", 0), 0u) << n.name;
}

TEST(GradientsOfGraph, RefusalsNameTheFieldOrNode) {
  const GraphDef forward = LeastSquares();
  StatusOr<GraphGradients> g = GradientsOfGraph(forward, "nope", {"w"});
  EXPECT_EQ(g.status().code(), Code::kNotFound);
  EXPECT_EQ(g.status().message(), "y: the graph has no node 'nope'");
  g = GradientsOfGraph(forward, "loss", {"w", "ghost:1"});
  EXPECT_EQ(g.status().code(), Code::kNotFound);
  EXPECT_EQ(g.status().node(), "ghost");
  EXPECT_NE(g.status().message().find("xs[1]"), std::string::npos) << g.status().ToString();
  g = GradientsOfGraph(forward, "loss", {"w:3"});
  EXPECT_EQ(g.status().code(), Code::kInvalidArgument) << g.status().ToString();
  g = GradientsOfGraph(forward, "loss", {});
  EXPECT_EQ(g.status().code(), Code::kInvalidArgument);
  g = GradientsOfGraph(forward, "^loss", {"w"});
  EXPECT_EQ(g.status().code(), Code::kInvalidArgument);
  g = GradientsOfGraph(forward, "loss", {"w"}, "bad name!");
  EXPECT_EQ(g.status().code(), Code::kInvalidArgument);
  GraphDef broken = forward;
  broken.nodes[0].op = "NoSuchOp";
  g = GradientsOfGraph(broken, "loss", {"w"});
  EXPECT_EQ(g.status().node(), broken.nodes[0].name) << g.status().ToString();
}

TEST(GradientsOfGraph, ThroughALoopIsUnimplementedNamingIt) {
  Scope root;
  Output v = ops::Placeholder(root.WithOpName("v"), DataType::kFloat64, PartialShape({}));
  StatusOr<std::vector<Output>> r = ops::WhileLoop(
      root.WithOpName("pow"),
      [&](const Scope& s, const std::vector<Output>& vars) -> StatusOr<Output> {
        return ops::Less(s, vars[0], ops::Const(s, 3));
      },
      [&](const Scope& s, const std::vector<Output>& vars) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Add(s, vars[0], ops::Const(s, 1)), ops::Mul(s, vars[1], v)};
      },
      {ops::Const(root, 0), ops::Const(root, 1.0)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  StatusOr<GraphGradients> g = GradientsOfGraph(root.graph_def(), (*r)[1].name(), {"v"});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented) << g.status().ToString();
  EXPECT_NE(g.status().message().find("loop"), std::string::npos) << g.status().ToString();
}

}  // namespace
}  // namespace flowstate
