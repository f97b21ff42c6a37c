// A task that restarts between two steps of a session, with no step running
// while it goes away (so no step failed to tell the master): the session
// notices the new incarnation — from the heartbeat, or from the restarted
// task's answer to RunGraph — and registers its partitions there again, or,
// where the session kept state on the task (a variable), fails naming the
// task and asking for a new session. Never "not registered here" step after
// step. Three tasks in this process (LocalCluster: loopback ports picked by
// the system); every step runs within a deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "tests/distributed/local_cluster.h"

namespace flowstate {
namespace {

using testing::LocalCluster;

constexpr const char* kT0 = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr const char* kT1 = "/job:worker/replica:0/task:1/device:CPU:0";
constexpr const char* kT2 = "/job:worker/replica:0/task:2/device:CPU:0";

// Runs in a thread; fails the test instead of hanging past `seconds`.
Status RunWithin(Session* s, double seconds, const std::vector<std::pair<std::string, Tensor>>& feeds,
                 const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                 std::vector<Tensor>* out) {
  auto f = std::async(std::launch::async, [&] { return s->Run(feeds, fetches, targets, out); });
  if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "the step did not end within " << seconds << " s";
    std::abort();  // a hung step cannot be cleaned up: fail loudly
  }
  return f.get();
}

bool Has(const Status& s, const std::string& words) {
  return s.message().find(words) != std::string::npos;
}

// out = -(x^2): the square on task 1, the negation on task 2, the result
// fetched on task 0. Nothing on task 2 keeps state.
GraphDef StatelessGraph() {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output a = ops::Square(root.WithOpName("a").WithDevice(kT1), x);
  Output b = ops::Neg(root.WithOpName("b").WithDevice(kT2), a);
  ops::Identity(root.WithOpName("out").WithDevice(kT0), b);
  return root.graph_def();
}

TEST(TaskRestart, AStatelessTaskRestartedBetweenStepsIsRegisteredAgain) {
  LocalCluster cluster(3);
  auto s = cluster.NewSession(StatelessGraph());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  auto step = [&](float x) { return RunWithin(s.get(), 30, {{"x", Tensor::Scalar(x)}}, {"out"}, {}, &out); };
  Status st = step(3);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<float>(), -9.0f);

  // 1. Restarted, and stepped at once: the master's heartbeat (every 0.2 s)
  // may not have seen the new incarnation yet. The step either runs (it
  // did) or fails UNAVAILABLE saying task 2 restarted; the next one runs.
  for (int round = 0; round < 3; ++round) {
    cluster.Stop(2);
    cluster.Restart(2);
    st = step(4);
    if (st.ok()) {
      EXPECT_EQ(out[0].scalar<float>(), -16.0f);
    } else {
      std::printf("round %d, the step right after the restart: %s\n", round, st.ToString().c_str());
      EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
      EXPECT_TRUE(Has(st, "/job:worker/task:2")) << st.ToString();
      EXPECT_TRUE(Has(st, "restarted")) << st.ToString();
      EXPECT_FALSE(Has(st, "not registered here")) << st.ToString();
    }
    st = step(5);
    ASSERT_TRUE(st.ok()) << "round " << round << ", the step after: " << st.ToString();
    EXPECT_EQ(out[0].scalar<float>(), -25.0f);
  }

  // 2. Restarted, and seen by the master's heartbeat before the next step
  // (as a real process's restart is): that step registers the partitions
  // on the new incarnation and runs — the stale executable's deregistration
  // reaches the new incarnation, which must not drop its own graph of the
  // same handle — and so does every step after it.
  Cluster* master = cluster.task(0).cluster.get();
  for (int round = 0; round < 2; ++round) {
    const uint64_t before = master->Snapshot()[2].incarnation;
    cluster.Stop(2);
    cluster.Restart(2);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto seen = [&] {
      const ClusterTaskInfo t = master->Snapshot()[2];
      return t.state == ClusterTaskInfo::State::kUp && t.incarnation != before;
    };
    while (!seen() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(seen()) << "the master's heartbeat never saw task 2's new incarnation";
    for (float x : {6.0f, 7.0f, 8.0f}) {
      st = step(x);
      ASSERT_TRUE(st.ok()) << "round " << round << ", x = " << x << ": " << st.ToString();
      EXPECT_EQ(out[0].scalar<float>(), -x * x);
    }
  }
}

TEST(TaskRestart, ATaskThatHeldTheSessionsVariableAsksForANewSession) {
  LocalCluster cluster(3);
  Scope root;
  Scope t2 = root.WithDevice(kT2);
  Output v = ops::Variable(t2.WithOpName("v"), TensorShape({}), DataType::kFloat32);
  ops::Assign(t2.WithOpName("init"), v, ops::Const(t2, 10.0f));
  ops::AssignAdd(t2.WithOpName("inc"), v, ops::Const(t2, 1.0f));
  ops::Identity(root.WithOpName("read").WithDevice(kT0), v);
  // A signature that runs only on tasks 0 and 1.
  Output y = ops::Square(root.WithOpName("y").WithDevice(kT1),
                         ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({})));
  ops::Identity(root.WithOpName("y_out").WithDevice(kT0), y);
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {}, {"init"}, &out).ok());
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {}, {"inc"}, &out).ok());
  Status st = RunWithin(s.get(), 30, {}, {"read"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<float>(), 11.0f);

  // Task 2 restarts with no step running: v is gone with it.
  cluster.Stop(2);
  cluster.Restart(2);
  auto expect_recreate = [](const Status& st) {
    EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
    EXPECT_TRUE(Has(st, "/job:worker/task:2 restarted")) << st.ToString();
    EXPECT_TRUE(Has(st, "'v'")) << st.ToString();
    EXPECT_TRUE(Has(st, "recreate the session")) << st.ToString();
  };
  // The first step may reach task 2 before the heartbeat has seen it: then
  // the task's answer says it restarted. From the next step on (or this
  // one, once the heartbeat saw it) the session names the lost state.
  st = RunWithin(s.get(), 30, {}, {"read"}, {}, &out);
  ASSERT_FALSE(st.ok()) << "read " << out[0].DebugString() << " from a restarted task";
  std::printf("the step right after the restart: %s\n", st.ToString().c_str());
  if (st.code() == Code::kUnavailable) {
    EXPECT_TRUE(Has(st, "/job:worker/task:2")) << st.ToString();
    EXPECT_TRUE(Has(st, "restarted")) << st.ToString();
  } else {
    expect_recreate(st);
  }
  for (const char* target : {"inc", "init"}) {
    st = RunWithin(s.get(), 30, {}, {}, {target}, &out);
    expect_recreate(st);
  }
  st = RunWithin(s.get(), 30, {}, {"read"}, {}, &out);
  expect_recreate(st);
  EXPECT_FALSE(Has(st, "not registered here")) << st.ToString();

  // What never ran on task 2 still runs.
  st = RunWithin(s.get(), 30, {{"x", Tensor::Scalar(3.0f)}}, {"y_out"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<float>(), 9.0f);

  // A new session runs on the restarted task.
  s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {}, {"init"}, &out).ok());
  st = RunWithin(s.get(), 30, {}, {"read"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<float>(), 10.0f);
}

}  // namespace
}  // namespace flowstate
