#include "scheduler/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/placement.h"
#include "scheduler/runtime_kernels.h"
#include "state/kernels.h"

namespace flowstate {
namespace {

using namespace std::chrono_literals;

// What a RecvAsync callback got, readable with a deadline.
struct Received {
  std::promise<std::pair<Status, Tensor>> promise;
  std::future<std::pair<Status, Tensor>> future = promise.get_future();
  Rendezvous::DoneCallback callback() {
    return [this](const Status& s, const Tensor& t) { promise.set_value({s, t}); };
  }
  bool ready(std::chrono::milliseconds wait = 0ms) {
    return future.wait_for(wait) == std::future_status::ready;
  }
};

TEST(LocalRendezvous, SendThenRecvAndRecvThenSend) {
  LocalRendezvous r;
  ASSERT_TRUE(r.Send("a", Tensor::Scalar<float>(1.0f)).ok());
  Received a;
  r.RecvAsync("a", a.callback());
  ASSERT_TRUE(a.ready());
  EXPECT_TRUE(a.future.get().first.ok());

  Received b;
  r.RecvAsync("b", b.callback());
  EXPECT_FALSE(b.ready());
  ASSERT_TRUE(r.Send("b", Tensor::Scalar<float>(2.0f)).ok());
  ASSERT_TRUE(b.ready());
  auto [s, t] = b.future.get();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(t.scalar<float>(), 2.0f);
}

TEST(LocalRendezvous, SendTwiceIsAlreadyExists) {
  LocalRendezvous r;
  ASSERT_TRUE(r.Send("k", Tensor::Scalar<float>(1.0f)).ok());
  Status s = r.Send("k", Tensor::Scalar<float>(2.0f));
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("'k'"), std::string::npos) << s.ToString();
}

TEST(LocalRendezvous, AbortWakesPendingReceiversAtOnceWithTheStatus) {
  LocalRendezvous r;
  Received a, b;
  r.RecvAsync("a", a.callback());
  r.RecvAsync("b", b.callback());
  std::thread aborter([&] { r.StartAbort(Unavailable("worker 3 went away")); });
  ASSERT_TRUE(a.ready(10s));
  ASSERT_TRUE(b.ready(10s));
  aborter.join();
  for (Received* x : {&a, &b}) {
    Status s = x->future.get().first;
    EXPECT_EQ(s.code(), Code::kUnavailable);
    EXPECT_EQ(s.message(), "worker 3 went away");
  }
  // Later Sends and Recvs fail with the same status.
  EXPECT_EQ(r.Send("c", Tensor::Scalar<float>(1.0f)).code(), Code::kUnavailable);
  Received c;
  r.RecvAsync("c", c.callback());
  ASSERT_TRUE(c.ready());
  EXPECT_EQ(c.future.get().first.code(), Code::kUnavailable);
}

TEST(LocalRendezvous, AbortWithOkIsCancelled) {
  LocalRendezvous r;
  Received a;
  r.RecvAsync("a", a.callback());
  r.StartAbort(Status());
  ASSERT_TRUE(a.ready());
  EXPECT_EQ(a.future.get().first.code(), Code::kCancelled);
}

TEST(RendezvousKey, CarriesDevicesIncarnationAndName) {
  const std::string src = "/job:localhost/replica:0/task:0/device:CPU:0";
  const std::string dst = "/job:localhost/replica:0/task:0/device:CPU:1";
  std::string k1 = CreateRendezvousKey(src, 1, dst, "a:0");
  EXPECT_EQ(k1, src + ";0000000000000001;" + dst + ";a:0");
  // A restarted sender (another incarnation) never matches a stale key.
  EXPECT_NE(k1, CreateRendezvousKey(src, 2, dst, "a:0"));
  EXPECT_NE(k1, CreateRendezvousKey(dst, 1, src, "a:0"));
  EXPECT_NE(k1, CreateRendezvousKey(src, 1, dst, "a:1"));
  EXPECT_NE(ProcessIncarnation(), 0u);
  EXPECT_EQ(ProcessIncarnation(), ProcessIncarnation());
}

TEST(RendezvousKey, ThePartitionerUsesIt) {
  scheduler::RegisterRuntimeKernels();
  state::RegisterKernels();
  DevicePoolOptions o;
  o.num_cpu_devices = 2;
  o.intra_op_threads = 1;
  auto pool = DevicePool::Create(o).value();
  Scope root;
  Output a = ops::Const(root.WithOpName("a").WithDevice("CPU:0"), 2.0f);
  ops::Identity(root.WithOpName("b").WithDevice("CPU:1"), a);
  Graph g = Graph::Create(root.graph_def()).value();
  auto placement = PlaceGraph(g, *pool, pool->default_device());
  ASSERT_TRUE(placement.ok()) << placement.status().ToString();
  auto parts = PartitionGraph(g, *placement);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  const std::string want = CreateRendezvousKey(pool->devices()[0]->name(), ProcessIncarnation(),
                                               pool->devices()[1]->name(), "a");
  int keys = 0;
  for (const GraphPartition& p : *parts) {
    for (const NodeDef& d : p.graph.nodes) {
      if (d.op != "_Send" && d.op != "_Recv") continue;
      EXPECT_EQ(d.attrs.at("key").s(), want) << d.name;
      ++keys;
    }
  }
  EXPECT_EQ(keys, 2);
}

TEST(RendezvousMgr, OneRendezvousPerStepUntilCleanup) {
  RendezvousMgr mgr;
  std::shared_ptr<Rendezvous> r1 = mgr.Find(1);
  EXPECT_EQ(mgr.Find(1), r1);
  EXPECT_NE(mgr.Find(2), r1);
  EXPECT_EQ(mgr.num_steps(), 2);
  // Partitions of one step meet in it.
  ASSERT_TRUE(mgr.Find(1)->Send("k", Tensor::Scalar<float>(3.0f)).ok());
  Received got;
  mgr.Find(1)->RecvAsync("k", got.callback());
  ASSERT_TRUE(got.ready());
  EXPECT_EQ(got.future.get().second.scalar<float>(), 3.0f);
  mgr.Cleanup(1);
  mgr.Cleanup(2);
  mgr.Cleanup(7);  // unknown: a no-op
  EXPECT_EQ(mgr.num_steps(), 0);
  EXPECT_NE(mgr.Find(1), r1);  // a fresh one
}

TEST(RendezvousMgr, AbortStepFailsPendingAndFutureRecvsOfThatStepOnly) {
  RendezvousMgr mgr;
  Received pending1, pending2;
  mgr.Find(1)->RecvAsync("x", pending1.callback());
  mgr.Find(2)->RecvAsync("x", pending2.callback());
  mgr.AbortStep(1, Aborted("step 1 failed on worker 2"));
  ASSERT_TRUE(pending1.ready(10s));
  EXPECT_EQ(pending1.future.get().first.code(), Code::kAborted);
  Received later;
  mgr.Find(1)->RecvAsync("y", later.callback());
  ASSERT_TRUE(later.ready());
  EXPECT_EQ(later.future.get().first.code(), Code::kAborted);
  EXPECT_EQ(mgr.Find(1)->Send("z", Tensor::Scalar<float>(1.0f)).code(), Code::kAborted);

  // Step 2 still works.
  EXPECT_FALSE(pending2.ready());
  ASSERT_TRUE(mgr.Find(2)->Send("x", Tensor::Scalar<float>(5.0f)).ok());
  ASSERT_TRUE(pending2.ready(10s));
  auto [s, t] = pending2.future.get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(t.scalar<float>(), 5.0f);
}

TEST(RendezvousMgr, AbortBeforeTheStepStartsStillFailsIt) {
  RendezvousMgr mgr;
  mgr.AbortStep(9, DeadlineExceeded("too late"));
  Received r;
  mgr.Find(9)->RecvAsync("x", r.callback());
  ASSERT_TRUE(r.ready());
  EXPECT_EQ(r.future.get().first.code(), Code::kDeadlineExceeded);
  mgr.Cleanup(9);
  EXPECT_EQ(mgr.num_steps(), 0);
}

TEST(RendezvousMgr, UsesTheFactory) {
  int made = 0;
  RendezvousMgr mgr([&](int64_t step) {
    ++made;
    EXPECT_EQ(step, 4);
    return std::make_shared<LocalRendezvous>();
  });
  mgr.Find(4);
  mgr.Find(4);
  EXPECT_EQ(made, 1);
}

}  // namespace
}  // namespace flowstate
