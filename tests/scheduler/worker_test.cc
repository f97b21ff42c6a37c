#include "scheduler/local_worker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "graph/subgraph.h"
#include "scheduler/call_frame.h"
#include "scheduler/placement.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/session.h"
#include "state/kernels.h"
#include "state/resource_mgr.h"

namespace flowstate {
namespace {

using namespace std::chrono_literals;

DevicePool* TwoCpus() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

// The partitions (CPU:0 first) of the graph that fetches `fetches`.
std::vector<GraphPartition> Partitions(const Scope& root, const std::vector<std::string>& fetches) {
  scheduler::RegisterRuntimeKernels();
  state::RegisterKernels();
  Graph full = Graph::Create(root.graph_def()).value();
  PrunedGraph pruned = PruneForSignature(full, {{}, fetches, {}}).value();
  Graph g = Graph::Create(pruned.graph).value();
  std::vector<Device*> placement = PlaceGraph(g, *TwoCpus(), TwoCpus()->default_device()).value();
  return PartitionGraph(g, placement).value();
}

// a (CPU:0) -> b = Identity(a) on CPU:1, fetched.
Scope CrossDevice() {
  Scope root;
  Output a = ops::Const(root.WithOpName("a").WithDevice("CPU:0"), 7.0f);
  ops::Identity(root.WithOpName("b").WithDevice("CPU:1"), a);
  return root;
}

struct Fixture {
  ResourceMgr resources;
  std::unique_ptr<LocalWorker> worker;
  std::vector<RegisteredGraph*> graphs;
  Fixture() {
    LocalWorkerOptions o;
    o.devices = TwoCpus();
    o.resources = &resources;
    worker = std::make_unique<LocalWorker>(o);
  }
  ~Fixture() {
    for (RegisteredGraph* g : graphs) worker->DeregisterGraph(g);
  }
  RegisteredGraph* Register(const GraphPartition& p) {
    StatusOr<RegisteredGraph*> g = worker->RegisterGraph({p.device->name(), p.graph, "", 0});
    g.status().CheckOk();
    graphs.push_back(*g);
    return *g;
  }
};

RunGraphArgs Args(int64_t step, CallFrame* frame) {
  RunGraphArgs a;
  a.step_id = step;
  a.call_frame = frame;
  return a;
}

// RunGraph's result, readable with a deadline.
struct Done {
  std::promise<Status> promise;
  std::future<Status> future = promise.get_future();
  Worker::StatusCallback callback() {
    return [this](const Status& s) { promise.set_value(s); };
  }
  bool ready(std::chrono::milliseconds wait = 0ms) {
    return future.wait_for(wait) == std::future_status::ready;
  }
};

// Runs the sending (g0) and the receiving (g1) partition of step a.step_id,
// the receiver first so that it waits in the step's rendezvous, and returns
// their results. A step still running after 10 s fails the test and is
// aborted.
std::pair<Status, Status> RunBoth(Worker* w, RegisteredGraph* g0, RegisteredGraph* g1,
                                  const RunGraphArgs& a) {
  Done d0, d1;
  w->RunGraph(g1, a, d1.callback());
  w->RunGraph(g0, a, d0.callback());
  if (!d0.ready(10s) || !d1.ready(10s)) {
    ADD_FAILURE() << "step " << a.step_id << " did not finish in 10 s";
    w->AbortStep(a.step_id, Internal("the test gave up"));
    if (!d0.ready(10s) || !d1.ready(10s)) std::abort();  // would hang: stop here
  }
  return {d0.future.get(), d1.future.get()};
}

// `read` (CPU:0) reads `w`, which was never initialized; `far` on CPU:1
// takes its value.
Scope UninitializedRead() {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w").WithDevice("CPU:0"), TensorShape({}),
                           DataType::kFloat32);
  Output read = ops::Identity(root.WithOpName("read").WithDevice("CPU:0"), w);
  ops::Identity(root.WithOpName("far").WithDevice("CPU:1"), read);
  return root;
}

TEST(LocalWorker, RunsTheStepsPartitionsWithOneStepId) {
  std::vector<GraphPartition> parts = Partitions(CrossDevice(), {"b"});
  ASSERT_EQ(parts.size(), 2u);
  Fixture f;
  RegisteredGraph* g0 = f.Register(parts[0]);
  RegisteredGraph* g1 = f.Register(parts[1]);
  for (int64_t step = 1; step <= 3; ++step) {
    CallFrame frame({}, 1);
    auto [s0, s1] = RunBoth(f.worker.get(), g0, g1, Args(step, &frame));
    ASSERT_TRUE(s0.ok()) << s0.ToString();
    ASSERT_TRUE(s1.ok()) << s1.ToString();
    EXPECT_EQ(frame.rets()[0].scalar<float>(), 7.0f);
    EXPECT_EQ(f.worker->num_steps(), 1);
    f.worker->CleanupStep(step);
    EXPECT_EQ(f.worker->num_steps(), 0);
    EXPECT_EQ(f.worker->rendezvous_mgr()->num_steps(), 0);
  }
}

TEST(LocalWorker, UnknownDeviceIsInvalidArgument) {
  Fixture f;
  GraphDef empty;
  StatusOr<RegisteredGraph*> g = f.worker->RegisterGraph({"/job:nope/device:CPU:9", empty, "", 0});
  EXPECT_EQ(g.status().code(), Code::kInvalidArgument);
}

TEST(LocalWorker, AbortStepWakesAPartitionWaitingOnARecvAtOnce) {
  // Only the receiving partition runs: its _Recv would wait forever.
  std::vector<GraphPartition> parts = Partitions(CrossDevice(), {"b"});
  Fixture f;
  RegisteredGraph* g1 = f.Register(parts[1]);
  CallFrame frame({}, 1);
  RunGraphArgs a = Args(5, &frame);
  Done d;
  f.worker->RunGraph(g1, a, d.callback());
  EXPECT_FALSE(d.ready(50ms));
  f.worker->AbortStep(5, Unavailable("task 1 was lost"));
  ASSERT_TRUE(d.ready(10s));
  Status s = d.future.get();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_EQ(s.message(), "task 1 was lost");
  f.worker->CleanupStep(5);
  EXPECT_EQ(f.worker->num_steps(), 0);
}

TEST(LocalWorker, AbortingOneStepLeavesAnotherRunning) {
  std::vector<GraphPartition> parts = Partitions(CrossDevice(), {"b"});
  Fixture f;
  RegisteredGraph* g0 = f.Register(parts[0]);
  RegisteredGraph* g1 = f.Register(parts[1]);
  CallFrame frame1({}, 1), frame2({}, 1);
  RunGraphArgs a1 = Args(1, &frame1), a2 = Args(2, &frame2);
  Done r1, r2, s2;
  f.worker->RunGraph(g1, a1, r1.callback());
  f.worker->RunGraph(g1, a2, r2.callback());
  f.worker->AbortStep(1, Aborted("step 1 failed elsewhere"));
  ASSERT_TRUE(r1.ready(10s));
  EXPECT_EQ(r1.future.get().code(), Code::kAborted);
  EXPECT_FALSE(r2.ready(50ms));
  // Step 2 completes once its sender runs.
  f.worker->RunGraph(g0, a2, s2.callback());
  ASSERT_TRUE(r2.ready(10s) && s2.ready(10s));
  EXPECT_TRUE(r2.future.get().ok());
  EXPECT_TRUE(s2.future.get().ok());
  EXPECT_EQ(frame2.rets()[0].scalar<float>(), 7.0f);
  f.worker->CleanupStep(1);
  f.worker->CleanupStep(2);
  EXPECT_EQ(f.worker->num_steps(), 0);
}

TEST(LocalWorker, AStepAbortedBeforeItRunsFailsAtOnce) {
  std::vector<GraphPartition> parts = Partitions(CrossDevice(), {"b"});
  Fixture f;
  RegisteredGraph* g1 = f.Register(parts[1]);
  f.worker->AbortStep(3, DeadlineExceeded("the master gave up"));
  CallFrame frame({}, 1);
  RunGraphArgs a = Args(3, &frame);
  Done d;
  f.worker->RunGraph(g1, a, d.callback());
  ASSERT_TRUE(d.ready(10s));
  EXPECT_EQ(d.future.get().code(), Code::kDeadlineExceeded);
  f.worker->CleanupStep(3);
  EXPECT_EQ(f.worker->num_steps(), 0);
}

TEST(LocalWorker, EveryFailingPartitionReportsTheStepsFirstError) {
  // `read` fails on CPU:0; CPU:1's _Recv fails as a consequence, and
  // reports the cause, not its own abort.
  std::vector<GraphPartition> parts = Partitions(UninitializedRead(), {"far"});
  Fixture f;
  RegisteredGraph* g0 = f.Register(parts[0]);
  RegisteredGraph* g1 = f.Register(parts[1]);
  for (int64_t step = 1; step <= 20; ++step) {
    CallFrame frame({}, 1);
    auto [s0, s1] = RunBoth(f.worker.get(), g0, g1, Args(step, &frame));
    EXPECT_EQ(s0.code(), Code::kFailedPrecondition) << s0.ToString();
    EXPECT_NE(s0.message().find("'w'"), std::string::npos) << s0.ToString();
    EXPECT_EQ(s1.ToString(), s0.ToString());
    f.worker->CleanupStep(step);
  }
  EXPECT_EQ(f.worker->num_steps(), 0);
}

TEST(SessionOverWorkers, TheStepsErrorIsTheFirstErrorNotItsEcho) {
  Scope root = UninitializedRead();
  SessionOptions o;
  o.devices = TwoCpus();
  o.inter_op_threads = 2;
  auto s = Session::Create(root.graph_def(), o).value();
  std::vector<Tensor> out;
  for (int i = 0; i < 20; ++i) {
    Status st = s->Run({}, {"far"}, {}, &out);
    ASSERT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
    EXPECT_EQ(st.message(), "node 'read' (Identity): variable 'w' is read before it was initialized")
        << st.ToString();
  }
}

}  // namespace
}  // namespace flowstate
