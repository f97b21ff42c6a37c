#include "scheduler/session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "state/resource_mgr.h"
#include "state/variable.h"

namespace flowstate {
namespace {

DevicePool* Pool(int cpus = 2) {
  static DevicePool* pools[3] = {nullptr, nullptr, nullptr};
  if (pools[cpus] == nullptr) {
    DevicePoolOptions o;
    o.num_cpu_devices = cpus;
    o.intra_op_threads = 1;
    pools[cpus] = DevicePool::Create(o).value().release();
  }
  return pools[cpus];
}

std::unique_ptr<Session> NewSession(const Scope& root, int cpus = 2) {
  SessionOptions o;
  o.devices = Pool(cpus);
  o.inter_op_threads = 2;
  StatusOr<std::unique_ptr<Session>> s = Session::Create(root.graph_def(), o);
  s.status().CheckOk();
  return std::move(s).value();
}

float Scalar(const Tensor& t) { return t.scalar<float>(); }

TEST(Session, FetchConstantAndFeedPlaceholder) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({-1}));
  Output c = ops::Const(root.WithOpName("c"), 5.0f);
  ops::Identity(root.WithOpName("id"), x);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"c"}, {}, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Scalar(out[0]), 5.0f);
  Tensor v = Tensor::FromVector<float>({1, 2, 3});
  Status st = s->Run({{"x", v}}, {"id", "c"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(TensorsEqual(out[0], v));
  EXPECT_EQ(Scalar(out[1]), 5.0f);
}

TEST(Session, FeedErrorsNameTheNode) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({-1, 2}));
  ops::Identity(root.WithOpName("id"), x);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  Status wrong_type = s->Run({{"x", Tensor::FromVector<int32_t>({1, 2}, TensorShape({1, 2}))}},
                             {"id"}, {}, &out);
  EXPECT_EQ(wrong_type.code(), Code::kInvalidArgument);
  EXPECT_EQ(wrong_type.node(), "x");
  EXPECT_NE(wrong_type.message().find("int32"), std::string::npos);
  Status wrong_shape = s->Run({{"x", Tensor::FromVector<float>({1, 2, 3})}}, {"id"}, {}, &out);
  EXPECT_EQ(wrong_shape.code(), Code::kInvalidArgument);
  EXPECT_EQ(wrong_shape.node(), "x");
  EXPECT_NE(wrong_shape.message().find("[?, 2]"), std::string::npos) << wrong_shape.ToString();
  Status missing = s->Run({}, {"id"}, {}, &out);
  EXPECT_EQ(missing.code(), Code::kInvalidArgument);
  EXPECT_EQ(missing.node(), "x");
  Status unknown = s->Run({}, {"nope"}, {}, &out);
  EXPECT_EQ(unknown.code(), Code::kNotFound);
}

TEST(Session, CachesExecutablesPerSignature) {
  Scope root;
  ops::Const(root.WithOpName("a"), 1.0f);
  ops::Const(root.WithOpName("b"), 2.0f);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  RunStats st;
  ASSERT_TRUE(s->Run({}, {"a"}, {}, &out, &st).ok());
  EXPECT_FALSE(st.cache_hit);
  ASSERT_TRUE(s->Run({}, {"a"}, {}, &out, &st).ok());
  EXPECT_TRUE(st.cache_hit);
  ASSERT_TRUE(s->Run({}, {"b"}, {}, &out, &st).ok());
  EXPECT_FALSE(st.cache_hit);
  EXPECT_EQ(s->num_cached_executables(), 2);
}

TEST(Session, ExtendAddsNodesAndKeepsTheCache) {
  Scope root;
  ops::Const(root.WithOpName("a"), 1.0f);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"a"}, {}, &out).ok());
  Scope more(root.graph_def());
  GraphDef before = more.graph_def();
  ops::Identity(more.WithOpName("b"), Output("a"));
  GraphDef added;
  added.nodes.assign(more.graph_def().nodes.begin() + before.nodes.size(), more.graph_def().nodes.end());
  ASSERT_TRUE(s->Extend(added).ok());
  RunStats st;
  ASSERT_TRUE(s->Run({}, {"a"}, {}, &out, &st).ok());
  EXPECT_TRUE(st.cache_hit);
  ASSERT_TRUE(s->Run({}, {"b"}, {}, &out).ok());
  EXPECT_EQ(Scalar(out[0]), 1.0f);
  // A bad extension changes nothing.
  GraphDef bad;
  bad.nodes.push_back(NodeDef{"c", "NoSuchOp", {}, {}, ""});
  Status e = s->Extend(bad);
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_EQ(e.node(), "c");
  EXPECT_EQ(s->graph()->FindNode("c"), nullptr);
  ASSERT_TRUE(s->Run({}, {"b"}, {}, &out).ok());
}

TEST(Session, CloseRefusesNewRuns) {
  Scope root;
  ops::Const(root.WithOpName("a"), 1.0f);
  auto s = NewSession(root);
  ASSERT_TRUE(s->Close().ok());
  std::vector<Tensor> out;
  EXPECT_EQ(s->Run({}, {"a"}, {}, &out).code(), Code::kFailedPrecondition);
  EXPECT_TRUE(s->Close().ok());
}

TEST(Session, UninitializedVariableIsFailedPreconditionNamingIt) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({2}), DataType::kFloat32);
  ops::Identity(root.WithOpName("read"), w);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  Status st = s->Run({}, {"read"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.ToString();
}

TEST(Session, VariablesPersistAcrossSteps) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({2}), DataType::kFloat32);
  ops::Assign(root.WithOpName("init"), w, ops::Const(root, std::vector<float>{1, 2}));
  ops::AssignAdd(root.WithOpName("inc"), w, ops::Const(root, std::vector<float>{10, 20}));
  ops::IsVariableInitialized(root.WithOpName("ready"), w);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"ready"}, {}, &out).ok());
  EXPECT_FALSE(out[0].scalar<bool>());
  ASSERT_TRUE(s->Run({}, {}, {"init"}, &out).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->Run({}, {}, {"inc"}, &out).ok());
  ASSERT_TRUE(s->Run({}, {"w", "ready"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({31, 62})));
  EXPECT_TRUE(out[1].scalar<bool>());
  // The fetched value is a snapshot: a later update does not change it.
  Tensor snapshot = out[0];
  ASSERT_TRUE(s->Run({}, {}, {"inc"}, &out).ok());
  EXPECT_TRUE(TensorsEqual(snapshot, Tensor::FromVector<float>({31, 62})));
}

// RunOptions::iterations: the step runs that many times as one call (the
// fetches are the last run's); a step over two devices cannot, nor can
// fewer than one.
TEST(Session, IterationsRunTheStepRepeatedly) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w").WithDevice("CPU:0"), TensorShape({}), DataType::kFloat32);
  ops::Assign(root.WithOpName("init").WithDevice("CPU:0"), w, ops::Const(root.WithDevice("CPU:0"), 0.0f));
  ops::AssignAdd(root.WithOpName("inc").WithDevice("CPU:0"), w, ops::Const(root.WithDevice("CPU:0"), 1.0f));
  ops::Identity(root.WithOpName("far").WithDevice("CPU:1"),
                ops::AssignAdd(root.WithOpName("inc2").WithDevice("CPU:0"), w,
                               ops::Const(root.WithDevice("CPU:0"), 1.0f)));
  auto s = NewSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {"init"}, &out).ok());
  RunOptions five;
  five.iterations = 5;
  Status st = s->Run({}, {"inc"}, {}, &out, nullptr, five);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<float>(), 5.0f);  // the last run's value
  ASSERT_TRUE(s->Run({}, {"w"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 5.0f);
  st = s->Run({}, {"far"}, {}, &out, nullptr, five);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("one device"), std::string::npos) << st.ToString();
  RunOptions none;
  none.iterations = 0;
  EXPECT_EQ(s->Run({}, {"inc"}, {}, &out, nullptr, none).code(), Code::kInvalidArgument);
  ASSERT_TRUE(s->Run({}, {"w"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 5.0f);  // neither refused call ran
}

TEST(Session, ControlDependenciesOrderSideEffects) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({}), DataType::kFloat32);
  Output init = ops::Assign(root.WithOpName("init"), w, ops::Const(root, 3.0f));
  // Without the control edge the read could run first and fail.
  ops::Identity(root.WithOpName("read").WithControlDependencies({init.node}), w);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  for (int i = 0; i < 20; ++i) {
    Status st = s->Run({}, {"read"}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(Scalar(out[0]), 3.0f);
  }
}

TEST(Session, ThousandsOfConcurrentStepsOnSharedVariables) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({4}), DataType::kInt64);
  ops::Assign(root.WithOpName("init"), w, ops::Const(root, Tensor::FromVector<int64_t>({0, 0, 0, 0})));
  ops::AssignAdd(root.WithOpName("inc"), w, ops::Const(root, Tensor::FromVector<int64_t>({1, 2, 3, 4})));
  ops::Identity(root.WithOpName("read"), w);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {"init"}, &out).ok());
  constexpr int kThreads = 8, kSteps = 500;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Tensor> o;
      for (int i = 0; i < kSteps; ++i) {
        if (!s->Run({}, {}, {"inc"}, &o).ok()) failures++;
        if (t % 2 == 0) {
          // Readers see whole updates: every element is a multiple of its step.
          if (!s->Run({}, {"read"}, {}, &o).ok()) {
            failures++;
            continue;
          }
          const int64_t* d = o[0].data<int64_t>();
          if (d[1] != 2 * d[0] || d[2] != 3 * d[0] || d[3] != 4 * d[0]) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(s->Run({}, {"read"}, {}, &out).ok());
  const int64_t n = kThreads * kSteps;
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<int64_t>({n, 2 * n, 3 * n, 4 * n})));
}

TEST(Session, SharedResourcesAcrossSessions) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({}), DataType::kFloat32);
  ops::Assign(root.WithOpName("init"), w, ops::Const(root, 7.0f));
  SessionOptions o;
  o.devices = Pool(1);
  o.resources = std::make_shared<ResourceMgr>();
  auto a = Session::Create(root.graph_def(), o).value();
  auto b = Session::Create(root.graph_def(), o).value();
  std::vector<Tensor> out;
  ASSERT_TRUE(a->Run({}, {}, {"init"}, &out).ok());
  ASSERT_TRUE(b->Run({}, {"w"}, {}, &out).ok());
  EXPECT_EQ(Scalar(out[0]), 7.0f);
  auto v = o.resources->Lookup<Variable>("", "w");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->dtype(), DataType::kFloat32);
}

}  // namespace
}  // namespace flowstate
