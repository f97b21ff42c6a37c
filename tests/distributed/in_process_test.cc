// The distributed runtime with 3 tasks in this process, each behind its own
// gRPC server on loopback: the same graphs as the single-process tests give
// the same results; errors abort the step everywhere and name the task and
// node; a task that goes away fails the step UNAVAILABLE within the
// deadline, and once it is back the next step runs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "api/worker.grpc.pb.h"
#include "api/worker.pb.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "distributed/wire_internal.h"
#include "scheduler/rendezvous.h"
#include "tests/distributed/local_cluster.h"
#include "tests/distributed/test_ops.h"

namespace flowstate {
namespace {

using testing::LocalCluster;

constexpr const char* kT0 = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr const char* kT1 = "/job:worker/replica:0/task:1/device:CPU:0";
constexpr const char* kT2 = "/job:worker/replica:0/task:2/device:CPU:0";

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs in a thread; fails the test instead of hanging past `seconds`.
Status RunWithin(Session* s, double seconds, const std::vector<std::pair<std::string, Tensor>>& feeds,
                 const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                 std::vector<Tensor>* out, RunStats* stats = nullptr) {
  auto f = std::async(std::launch::async, [&] { return s->Run(feeds, fetches, targets, out, stats); });
  if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "the step did not end within " << seconds << " s";
    std::abort();  // a hung step cannot be cleaned up: fail loudly
  }
  return f.get();
}

TEST(DistributedInProcess, ArithmeticChainAcrossTasks) {
  LocalCluster cluster(3);
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({-1}));
  Output a = ops::Square(root.WithOpName("a").WithDevice(kT1), x);         // task 1
  Output b = ops::Add(root.WithOpName("b").WithDevice(kT2), a, x);         // task 2
  Output c = ops::Mul(root.WithOpName("c").WithDevice("/job:worker/task:0"), b,
                      ops::Const(root.WithOpName("two").WithDevice(kT1), 2.0f));
  Output d = ops::Neg(root.WithOpName("d").WithDevice("/job:worker/task:2"), c);
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  RunStats stats;
  Status st = RunWithin(s.get(), 30, {{"x", Tensor::FromVector<float>({1, 2, 3})}}, {"d", "a"}, {},
                        &out, &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(stats.num_partitions, 3);
  // d = -2 (x^2 + x)
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({-4, -12, -24})));
  EXPECT_TRUE(TensorsEqual(out[1], Tensor::FromVector<float>({1, 4, 9})));
  // Again: the executable is reused, the results are the same.
  st = RunWithin(s.get(), 30, {{"x", Tensor::FromVector<float>({1, 2, 3})}}, {"d", "a"}, {}, &out,
                 &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(stats.cache_hit);
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({-4, -12, -24})));

  // Every task forgets the steps (their rendezvous) once they ended: the
  // cleanups ride on later calls, and the rest go when the session closes.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(RunWithin(s.get(), 30, {{"x", Tensor::FromVector<float>({1})}}, {"d"}, {}, &out).ok());
  }
  EXPECT_LE(cluster.task(1).cluster->rendezvous_mgr()->num_steps(), 64 + 1);
  s.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto held = [&] {
    int n = 0;
    for (int t = 0; t < 3; ++t) n += cluster.task(t).cluster->rendezvous_mgr()->num_steps();
    return n;
  };
  while (held() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(cluster.task(1).service->num_sessions(), 0);  // closed with the session
}

// A step whose nodes are all on task 1 runs `iterations` times as one call
// to that task (what a data-parallel replica there does with a chunk of
// steps); the first error ends the runs there: with w going 1, 2, 3, 4 and
// a check that fails once w > 3.5, ten iterations stop at the fourth.
TEST(DistributedInProcess, IterationsRunOnTheTaskAndStopAtTheFirstError) {
  LocalCluster cluster(2);
  Scope root;
  Scope t1 = root.WithDevice(kT1);
  Output w = ops::Variable(t1.WithOpName("w"), TensorShape({}), DataType::kFloat32);
  ops::Assign(t1.WithOpName("init"), w, ops::Const(t1, 0.0f));
  Output inc = ops::AssignAdd(t1.WithOpName("inc"), w, ops::Const(t1, 1.0f));
  Output log = ops::Log(t1.WithOpName("log"), ops::Sub(t1, ops::Const(t1, 3.5f), inc));
  t1.AddNode("check", "CheckNumerics", {log.name()}, {{"message", AttrValue(std::string("w > 3.5"))}});
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {}, {"init"}, &out).ok());
  RunOptions o;
  o.iterations = 50;
  Status st = s->Run({}, {}, {"inc"}, &out, nullptr, o);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {"w"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 50.0f);
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {}, {"init"}, &out).ok());
  o.iterations = 10;
  st = s->Run({}, {}, {"check"}, &out, nullptr, o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("w > 3.5"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("/job:worker/task:1"), std::string::npos) << st.ToString();
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {"w"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 4.0f);
}

// A kernel's random stream restored into a session whose kernel runs on
// another task (a checkpoint's states, as a replica there resumes): the
// remote RandomUniform goes on where the local one left off, and only
// with the import.
TEST(DistributedInProcess, KernelStatesReachTheTaskTheKernelRunsOn) {
  LocalCluster cluster(2);
  auto graph = [](const char* device) {
    Scope root;
    ops::RandomAttrs a;
    a.seed = 7;
    a.seed2 = 3;
    ops::RandomUniform(root.WithOpName("r").WithDevice(device), {4}, a);
    return root.graph_def();
  };
  std::vector<Tensor> first, second, out;
  auto here = cluster.NewSession(graph(kT0));
  ASSERT_NE(here, nullptr);
  ASSERT_TRUE(RunWithin(here.get(), 30, {}, {"r"}, {}, &first).ok());
  StatusOr<std::map<std::string, std::string>> states = here->ExportKernelStates();
  ASSERT_TRUE(states.ok()) << states.status().ToString();
  ASSERT_EQ(states->count("r"), 1u);
  ASSERT_TRUE(RunWithin(here.get(), 30, {}, {"r"}, {}, &second).ok());
  ASSERT_FALSE(TensorsEqual(first[0], second[0]));

  // On task 1, imported before its first step (its worker there does not
  // exist yet): the next tensor of the stream.
  auto there = cluster.NewSession(graph(kT1));
  ASSERT_NE(there, nullptr);
  Status st = there->ImportKernelStates(*states);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(RunWithin(there.get(), 30, {}, {"r"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], second[0])) << out[0].DebugString() << " vs " << second[0].DebugString();
  // Imported between steps, once the kernel there is built: back again.
  ASSERT_TRUE(there->ImportKernelStates(*states).ok());
  ASSERT_TRUE(RunWithin(there.get(), 30, {}, {"r"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], second[0]));
  // Without the import the stream starts from its seed.
  auto fresh = cluster.NewSession(graph(kT1));
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(RunWithin(fresh.get(), 30, {}, {"r"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], first[0]));
  // A state the kernel there refuses names the node and the task.
  st = fresh->ImportKernelStates({{"r", "not a state"}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/job:worker/task:1"), std::string::npos) << st.ToString();
}

TEST(DistributedInProcess, FanOutFanInAndControlEdges) {
  LocalCluster cluster(3);
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({2}));
  // Fan out from task 0 to both others and back in on task 0.
  Output y1 = ops::Square(root.WithOpName("y1").WithDevice(kT1), x);
  Output y2 = ops::Neg(root.WithOpName("y2").WithDevice(kT2), x);
  Output y3 = ops::Add(root.WithOpName("y3").WithDevice(kT2), y1, y2);
  Output z = ops::AddN(root.WithOpName("z").WithDevice(kT0), {y1, y2, y3});
  // A counter on task 1 bumped by a target; a read on task 2 that must see
  // the bump through a control edge across tasks.
  Output v = ops::Variable(root.WithOpName("v").WithDevice(kT1), PartialShape({}), DataType::kFloat32);
  ops::Assign(root.WithOpName("init"), v, ops::Const(root.WithOpName("zero"), 0.0f));
  Output inc = ops::AssignAdd(root.WithOpName("inc"), v, ops::Const(root.WithOpName("one"), 1.0f));
  ops::Identity(root.WithOpName("read").WithDevice(kT2).WithControlDependencies({"inc"}), v);
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = RunWithin(s.get(), 30, {{"x", Tensor::FromVector<float>({1, 3})}}, {"z"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  // y1 = [1, 9], y2 = [-1, -3], y3 = [0, 6]: z = [0, 12]
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({0, 12})));
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {}, {"init"}, &out).ok());
  for (int i = 1; i <= 3; ++i) {
    st = RunWithin(s.get(), 30, {}, {"read"}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(out[0].scalar<float>(), float(i));
  }
  // The variable lives on task 1 (in its worker session), not here.
  EXPECT_EQ(cluster.task(1).service->num_sessions(), 1);
}

TEST(DistributedInProcess, LargeTensorCrossesTasks) {
  LocalCluster cluster(3);
  Scope root;
  const int32_t n = 16 << 20;  // 64 MiB of float32
  Output big = ops::Fill(root.WithOpName("big").WithDevice(kT1), {n},
                         ops::Const(root.WithOpName("v"), 1.5f));
  Output twice = ops::Mul(root.WithOpName("twice").WithDevice(kT2), big,
                          ops::Const(root.WithOpName("k").WithDevice(kT2), 2.0f));
  ops::Sum(root.WithOpName("sum").WithDevice(kT0), twice, std::vector<int32_t>{0});
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = RunWithin(s.get(), 60, {}, {"sum", "twice"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NEAR(out[0].scalar<float>(), 3.0 * n, 3.0 * n * 1e-3);
  ASSERT_EQ(out[1].num_elements(), n);
  auto flat = out[1].flat<float>();
  EXPECT_EQ(flat[0], 3.0f);
  EXPECT_EQ(flat[n - 1], 3.0f);
}

TEST(DistributedInProcess, ParameterServerAsAGraphConverges) {
  // y = w * x with w_true = 3: w lives on task 0; tasks 1 and 2 compute
  // gradients on their own data; the update runs on task 0 (AssignSub takes
  // w by reference, so it is colocated with w). Four clients step at once.
  LocalCluster cluster(3);
  Scope root;
  Output w = ops::Variable(root.WithOpName("w").WithDevice(kT0), PartialShape({}), DataType::kFloat32);
  ops::Assign(root.WithOpName("init"), w, ops::Const(root.WithOpName("w0"), 0.0f));
  for (int r = 1; r <= 2; ++r) {
    const std::string dev = r == 1 ? kT1 : kT2;
    const std::string p = "r" + std::to_string(r) + "/";
    Output x = ops::Const(root.WithOpName(p + "x").WithDevice(dev),
                          Tensor::FromVector<float>({0.5f * r, 1.0f, -1.0f * r}));
    Output y = ops::Mul(root.WithOpName(p + "y").WithDevice(dev), x,
                        ops::Const(root.WithOpName(p + "wt").WithDevice(dev), 3.0f));
    Output err = ops::Sub(root.WithOpName(p + "err").WithDevice(dev), ops::Mul(root.WithOpName(p + "wx").WithDevice(dev), w, x), y);
    Output grad = ops::Mean(root.WithOpName(p + "grad").WithDevice(dev),
                            ops::Mul(root.WithOpName(p + "ex").WithDevice(dev), err, x),
                            std::vector<int32_t>{0});
    ops::AssignSub(root.WithOpName(p + "update"), w,
                   ops::Mul(root.WithOpName(p + "step").WithDevice(dev), grad,
                            ops::Const(root.WithOpName(p + "lr").WithDevice(dev), 0.05f)));
  }
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  ASSERT_TRUE(RunWithin(s.get(), 30, {}, {}, {"init"}, &out).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      const std::string target = c % 2 == 0 ? "r1/update" : "r2/update";
      for (int i = 0; i < 60; ++i) {
        std::vector<Tensor> o;
        Status st = s->Run({}, {}, {target}, &o);
        if (!st.ok()) {
          failures.fetch_add(1);
          ADD_FAILURE() << st.ToString();
          return;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
  Status st = RunWithin(s.get(), 30, {}, {"w"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NEAR(out[0].scalar<float>(), 3.0f, 0.05f);
}

TEST(DistributedInProcess, KernelErrorAbortsTheStepEverywhere) {
  testing::RegisterDistributedTestOps();
  LocalCluster cluster(3);
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  // Task 1 waits (until cancelled) for a long time; task 2 fails: the step
  // must end at once with task 2's error.
  Output wait = ops::Square(root.WithOpName("wait_in").WithDevice(kT1), x);
  root.WithOpName("blocked").WithDevice(kT1).AddNode("blocked", "_TestBlock", {wait.name()},
                                                     {{"seconds", AttrValue(60.0f)}});
  root.WithOpName("bad").WithDevice(kT2).AddNode("bad", "_TestFailOnTask", {x.name()},
                                                 {{"delay_ms", AttrValue(int64_t(200))}});
  ops::Add(root.WithOpName("out").WithDevice(kT0), Output("blocked"), Output("bad"));
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = RunWithin(s.get(), 20, {{"x", Tensor::Scalar(2.0f)}}, {"out"}, {}, &out);
  EXPECT_LT(SecondsSince(t0), 10.0);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "bad");
  EXPECT_NE(st.message().find("/job:worker/task:2"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("fails on purpose"), std::string::npos) << st.ToString();
}

TEST(DistributedInProcess, UnknownTaskIsInvalidArgumentNamingTheNode) {
  LocalCluster cluster(3);
  Scope root;
  Output a = ops::Const(root.WithOpName("a"), 1.0f);
  ops::Neg(root.WithOpName("far").WithDevice("/job:worker/task:7"), a);
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = RunWithin(s.get(), 30, {}, {"far"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "far");
  EXPECT_NE(st.message().find("task:7"), std::string::npos) << st.ToString();
  // Nothing was registered anywhere.
  EXPECT_EQ(cluster.task(1).service->num_sessions(), 0);
  EXPECT_EQ(cluster.task(2).service->num_sessions(), 0);
}

TEST(DistributedInProcess, PartialSpecAndColocationAcrossTasks) {
  LocalCluster cluster(3, /*cpus_per_task=*/2);
  Scope root;
  // "/job:worker/task:1" picks a device of task 1; the Assign follows its
  // variable to task 2 although it asks for nothing.
  Output a = ops::Const(root.WithOpName("a").WithDevice("/job:worker/task:1"), 4.0f);
  Output v = ops::Variable(root.WithOpName("v").WithDevice("/job:worker/task:2/device:CPU:1"),
                           PartialShape({}), DataType::kFloat32);
  ops::Assign(root.WithOpName("set"), v, ops::Square(root.WithOpName("sq").WithDevice("/job:worker/task:1"), a));
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  RunStats stats;
  Status st = RunWithin(s.get(), 30, {}, {"set"}, {}, &out, &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<float>(), 16.0f);
  // Task 1, task 2's CPU:1, and task 0 (the master), where fetched values
  // are delivered.
  EXPECT_EQ(stats.num_partitions, 3);
}

TEST(DistributedInProcess, StoppedTaskIsUnavailableThenRestartedTaskRunsAgain) {
  testing::RegisterDistributedTestOps();
  LocalCluster cluster(3);
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output a = ops::Square(root.WithOpName("a").WithDevice(kT1), x);
  root.WithOpName("block").WithDevice(kT2).AddNode("block", "_TestBlock", {a.name()},
                                                   {{"seconds", AttrValue(0.0f)}});
  ops::Neg(root.WithOpName("out").WithDevice(kT0), Output("block"));
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = RunWithin(s.get(), 30, {{"x", Tensor::Scalar(3.0f)}}, {"out"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<float>(), -9.0f);

  // A step that blocks on task 2 (the block op waits there for 60 s unless
  // cancelled) — fed through a second signature whose block waits long.
  Scope more(root.graph_def());
  more.WithOpName("long_block").WithDevice(kT2).AddNode("long_block", "_TestBlock", {a.name()},
                                                        {{"seconds", AttrValue(60.0f)}});
  ops::Neg(more.WithOpName("long_out").WithDevice(kT0), Output("long_block"));
  GraphDef extra;
  for (const NodeDef& n : more.graph_def().nodes) {
    if (n.name == "long_block" || n.name == "long_out") extra.nodes.push_back(n);
  }
  ASSERT_TRUE(s->Extend(extra).ok());
  const int started = testing::BlocksStarted();
  auto running = std::async(std::launch::async, [&] {
    std::vector<Tensor> o;
    return s->Run({{"x", Tensor::Scalar(3.0f)}}, {"long_out"}, {}, &o);
  });
  const auto wait_until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (testing::BlocksStarted() == started && std::chrono::steady_clock::now() < wait_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(testing::BlocksStarted(), started) << "the step never reached task 2";
  const auto t0 = std::chrono::steady_clock::now();
  cluster.Stop(2);
  ASSERT_EQ(running.wait_for(std::chrono::seconds(15)), std::future_status::ready)
      << "the step did not end after task 2 went away";
  st = running.get();
  EXPECT_LT(SecondsSince(t0), 10.0);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("/job:worker/task:2"), std::string::npos) << st.ToString();

  // While it is down: UNAVAILABLE naming it again, quickly.
  st = RunWithin(s.get(), 30, {{"x", Tensor::Scalar(3.0f)}}, {"out"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("/job:worker/task:2"), std::string::npos) << st.ToString();

  // Back, with a new incarnation: the next step registers again and runs.
  cluster.Restart(2);
  RunStats stats;
  st = RunWithin(s.get(), 30, {{"x", Tensor::Scalar(4.0f)}}, {"out"}, {}, &out, &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(stats.cache_hit);
  EXPECT_EQ(out[0].scalar<float>(), -16.0f);
}

TEST(DistributedInProcess, HeartbeatsReportTasksUpAndDown) {
  LocalCluster cluster(3);
  Cluster* c = cluster.task(0).cluster.get();
  c->HeartbeatNow();
  std::vector<ClusterTaskInfo> tasks = c->Snapshot();
  ASSERT_EQ(tasks.size(), 3u);
  for (const ClusterTaskInfo& t : tasks) {
    EXPECT_EQ(t.state, ClusterTaskInfo::State::kUp) << t.name << ": " << t.last_error;
    EXPECT_NE(t.incarnation, 0u);
    ASSERT_EQ(t.devices.size(), 1u);
    EXPECT_EQ(t.devices[0].type, "CPU");
  }
  EXPECT_TRUE(tasks[0].is_self);
  EXPECT_EQ(tasks[2].devices[0].name, kT2);
  const uint64_t before = tasks[2].incarnation;
  const uint64_t generation = c->generation();
  cluster.Stop(2);
  // Reported down within a few heartbeats (interval 0.2 s, deadline 1 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (c->Snapshot()[2].state == ClusterTaskInfo::State::kUp &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  tasks = c->Snapshot();
  EXPECT_EQ(tasks[2].state, ClusterTaskInfo::State::kUnreachable);
  EXPECT_NE(tasks[2].last_error.find("/job:worker/task:2"), std::string::npos) << tasks[2].last_error;
  cluster.Restart(2);
  c->HeartbeatNow();
  tasks = c->Snapshot();
  EXPECT_EQ(tasks[2].state, ClusterTaskInfo::State::kUp) << tasks[2].last_error;
  EXPECT_NE(tasks[2].incarnation, before);
  EXPECT_GT(c->generation(), generation);
  EXPECT_GE(tasks[2].seconds_since_heartbeat, 0.0);
  EXPECT_LT(tasks[2].seconds_since_heartbeat, 5.0);
}

TEST(DistributedInProcess, RecvTensorServesSentTensorsAndAnswersAborts) {
  // The unary RecvTensor, as a plain protobuf peer calls it.
  namespace wpb = ::flowstate::worker::v1;
  LocalCluster cluster(2);
  Cluster* c1 = cluster.task(1).cluster.get();
  const std::string key = CreateRendezvousKey(kT1, c1->local_incarnation(), kT0, "t");
  Tensor sent = Tensor::FromVector<float>({1, 2, 3}, TensorShape({3}));
  ASSERT_TRUE(c1->rendezvous_mgr()->Find(7)->Send(key, sent).ok());
  auto stub = wpb::Worker::NewStub(
      ::grpc::CreateChannel(cluster.Address(1), ::grpc::InsecureChannelCredentials()));
  auto recv = [&](int64_t step, const std::string& k, wpb::RecvTensorResponse* resp) {
    ::grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    // A fresh channel's first call would fail at once on a connect attempt
    // that a loaded machine delays (seen once in a full suite); it waits for
    // the channel instead, within the deadline.
    ctx.set_wait_for_ready(true);
    wpb::RecvTensorRequest req;
    req.set_step_id(step);
    req.set_rendezvous_key(k);
    return stub->RecvTensor(&ctx, req, resp);
  };
  wpb::RecvTensorResponse resp;
  ::grpc::Status first = recv(7, key, &resp);
  ASSERT_TRUE(first.ok()) << first.error_code() << " " << first.error_message();
  EXPECT_EQ(resp.status().code(), 0) << resp.status().message();
  EXPECT_EQ(resp.tensor().dtype(), "float32");
  EXPECT_EQ(resp.tensor().content().size(), 12u);

  // A key this task never sends for: INVALID_ARGUMENT naming the task.
  const std::string foreign = CreateRendezvousKey(kT2, 5, kT0, "t");
  ASSERT_TRUE(recv(7, foreign, &resp).ok());
  EXPECT_EQ(resp.status().code(), int(Code::kInvalidArgument));
  EXPECT_NE(resp.status().message().find("/job:worker/task:1"), std::string::npos);

  // One that waits answers at once when the step is aborted, with the abort.
  const std::string later = CreateRendezvousKey(kT1, c1->local_incarnation(), kT0, "never");
  auto waiting = std::async(std::launch::async, [&] {
    wpb::RecvTensorResponse r;
    ::grpc::Status s = recv(8, later, &r);
    return std::make_pair(s, r);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    ::grpc::ClientContext ctx;
    wpb::AbortStepRequest req;
    wpb::AbortStepResponse r;
    req.set_step_id(8);
    req.mutable_status()->set_code(int(Code::kAborted));
    req.mutable_status()->set_message("/job:worker/task:0: stop");
    ASSERT_TRUE(stub->AbortStep(&ctx, req, &r).ok());
  }
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto [status, r] = waiting.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(r.status().code(), int(Code::kAborted));
  EXPECT_EQ(r.status().message(), "/job:worker/task:0: stop");
  for (int64_t step : {7, 8}) {
    ::grpc::ClientContext ctx;
    wpb::CleanupStepRequest req;
    wpb::CleanupStepResponse cr;
    req.set_step_id(step);
    ASSERT_TRUE(stub->CleanupStep(&ctx, req, &cr).ok());
  }
  EXPECT_EQ(c1->rendezvous_mgr()->num_steps(), 0);
}

}  // namespace
}  // namespace flowstate
