// AddGradients' own behaviour: fan-out sums, pruning, StopGradient, integer
// paths, sparse Gather gradients, missing gradients and overrides.
#include "graph/gradients.h"

#include <gtest/gtest.h>

#include "devices/device_pool.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

std::vector<Tensor> RunGraph(const Scope& root, const std::vector<std::string>& fetches,
                        std::vector<std::pair<std::string, Tensor>> feeds = {}) {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  SessionOptions so;
  so.devices = pool;
  so.inter_op_threads = 1;
  auto s = Session::Create(root.graph_def(), so).value();
  std::vector<Tensor> out;
  Status st = s->Run(feeds, fetches, {}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) out.assign(fetches.size(), Tensor::Scalar(0.0));
  return out;
}

TEST(AddGradients, SumsFanOut) {
  // L = x*x + 3x  =>  dL/dx = 2x + 3
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({}));
  Output l = ops::Add(root.WithOpName("l"), ops::Mul(root, x, x),
                      ops::Mul(root, ops::Const(root, 3.0), x));
  std::vector<Gradient> g;
  ASSERT_TRUE(AddGradients(root, l, {x}, &g).ok());
  ASSERT_EQ(g.size(), 1u);
  ASSERT_FALSE(g[0].is_none());
  auto out = RunGraph(root, {g[0].dense.name()}, {{"x", Tensor::Scalar(2.0)}});
  EXPECT_DOUBLE_EQ(out[0].scalar<double>(), 7.0);
}

TEST(AddGradients, UnrelatedVariablesGetNone) {
  Scope root;
  Output a = ops::Placeholder(root.WithOpName("a"), DataType::kFloat32, PartialShape({}));
  Output b = ops::Placeholder(root.WithOpName("b"), DataType::kFloat32, PartialShape({}));
  Output l = ops::Square(root.WithOpName("l"), a);
  ops::Square(root.WithOpName("other"), b);
  std::vector<Gradient> g;
  ASSERT_TRUE(AddGradients(root, l, {a, b}, &g).ok());
  EXPECT_FALSE(g[0].is_none());
  EXPECT_TRUE(g[1].is_none());
}

TEST(AddGradients, StopsAtStopGradientAndIntegerPaths) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({2}));
  Output stopped = ops::StopGradient(root, ops::Square(root, x));
  Output via_int = ops::Cast(root, ops::Cast(root, x, DataType::kInt32), DataType::kFloat32);
  Output l = ops::Sum(root.WithOpName("l"), ops::Add(root, stopped, via_int), std::vector<int32_t>{});
  std::vector<Gradient> g;
  ASSERT_TRUE(AddGradients(root, l, {x}, &g).ok());
  EXPECT_TRUE(g[0].is_none());
}

TEST(AddGradients, GatherGradientStaysSparse) {
  Scope root;
  Output table = ops::Placeholder(root.WithOpName("table"), DataType::kFloat32, PartialShape({1000, 8}));
  Output ids = ops::Const(root, Tensor::FromVector<int32_t>({3, 7, 3}));
  Output l = ops::Sum(root.WithOpName("l"), ops::Gather(root, table, ids), std::vector<int32_t>{});
  std::vector<Gradient> g;
  ASSERT_TRUE(AddGradients(root, l, {table}, &g).ok());
  ASSERT_TRUE(g[0].is_sparse);
  Tensor t(DataType::kFloat32, TensorShape({1000, 8}));
  auto out = RunGraph(root, {g[0].indices.name(), g[0].values.name(), g[0].dense_shape.name()},
                 {{"table", t}});
  EXPECT_EQ(out[0].num_elements(), 3);             // only the rows used
  EXPECT_EQ(out[1].shape(), TensorShape({3, 8}));
  EXPECT_EQ(out[2].ElementAsDouble(0), 1000);
}

// Two lookups of one table, one with int32 ids and one with int64: the
// gradient stays sparse (the indices concatenated as int64) and equals the
// dense one, a duplicate row counted twice.
TEST(AddGradients, LookupsWithInt32AndInt64IdsConcatenate) {
  Scope root;
  Output table = ops::Placeholder(root.WithOpName("table"), DataType::kFloat32, PartialShape({10, 2}));
  Output a = ops::Gather(root, table, ops::Const(root, Tensor::FromVector<int32_t>({1, 4})));
  Output b = ops::Gather(root, table, ops::Const(root, Tensor::FromVector<int64_t>({4, 9})));
  Output l = ops::Add(root.WithOpName("l"), ops::Sum(root, a, std::vector<int32_t>{}),
                      ops::Sum(root, b, std::vector<int32_t>{}));
  std::vector<Gradient> g;
  ASSERT_TRUE(AddGradients(root, l, {table}, &g).ok());
  ASSERT_TRUE(g[0].is_sparse);
  Tensor t(DataType::kFloat32, TensorShape({10, 2}));
  auto out = RunGraph(root, {g[0].indices.name(), g[0].values.name()}, {{"table", t}});
  ASSERT_EQ(out[0].dtype(), DataType::kInt64);
  std::vector<double> rows(10, 0.0);
  for (int64_t i = 0; i < out[0].num_elements(); ++i) {
    rows[size_t(out[0].ElementAsDouble(i))] += out[1].ElementAsDouble(2 * i);
  }
  EXPECT_EQ(rows, (std::vector<double>{0, 1, 0, 0, 2, 0, 0, 0, 0, 1}));
}

TEST(AddGradients, MissingGradientNamesTheOp) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({4}));
  Output y = ops::Generic(root.WithOpName("mystery"), "Floor", {x})[0];  // non-differentiable
  Output l = ops::Sum(root.WithOpName("l"), ops::Mul(root, y, x), std::vector<int32_t>{});
  std::vector<Gradient> g;
  ASSERT_TRUE(AddGradients(root, l, {x}, &g).ok());  // Floor is declared non-differentiable

  // An op without any gradient on the path is an error naming the node.
  Scope r2;
  Output a = ops::Placeholder(r2.WithOpName("a"), DataType::kFloat32, PartialShape({2, 2}));
  Output conv = ops::Generic(r2.WithOpName("bad"), "Conv2DBackpropInput",
                             {ops::Const(r2, std::vector<int32_t>{1, 2, 2, 1}),
                              ops::Reshape(r2, a, std::vector<int32_t>{1, 1, 1, 4}),
                              ops::Reshape(r2, a, std::vector<int32_t>{1, 2, 2, 1})},
                             {{"strides", AttrValue(std::vector<int64_t>{1, 1, 1, 1})},
                              {"padding", AttrValue("SAME")}})[0];
  Output l2 = ops::Sum(r2.WithOpName("l2"), conv, std::vector<int32_t>{});
  Status s = AddGradients(r2, l2, {a}, &g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnimplemented);
  EXPECT_EQ(s.node(), "bad");
  EXPECT_NE(s.message().find("Conv2DBackpropInput"), std::string::npos) << s.ToString();
}

TEST(AddGradients, OverridesReplaceAnOpsGradient) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({}));
  Output l = ops::Square(root.WithOpName("l"), x);
  GradientOptions o;
  o.overrides["Square"] = [](GradContext* c, std::vector<Gradient>* in) {
    (*in)[0] = Gradient::Dense(ops::Mul(c->scope(), c->grad(0), ops::Const(c->scope(), 10.0)));
    return Status();
  };
  std::vector<Gradient> g;
  ASSERT_TRUE(AddGradients(root, l, {x}, &g, o).ok());
  auto out = RunGraph(root, {g[0].dense.name()}, {{"x", Tensor::Scalar(3.0)}});
  EXPECT_DOUBLE_EQ(out[0].scalar<double>(), 10.0);
}

TEST(AddGradients, RejectsIntegerLoss) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kInt32, PartialShape({}));
  std::vector<Gradient> g;
  Status s = AddGradients(root, x, {x}, &g);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flowstate
