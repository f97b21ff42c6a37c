// Queues across tasks: a queue placed on task 1 of an in-process cluster
// (tasks behind loopback gRPC) takes the enqueues of steps run from task 0
// and hands its elements to consumers on task 0; its enqueue and dequeue
// ops run beside it (its handle is a Ref edge). A dequeue waiting on the
// other task ends at the step's deadline and when the session closes, and
// OUT_OF_RANGE reaches the master with its code and node.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <set>

#include "graph/op_builders.h"
#include "graph/queue_builders.h"
#include "graph/scope.h"
#include "tests/distributed/local_cluster.h"

namespace flowstate {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::LocalCluster;

constexpr const char* kT0 = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr const char* kT1 = "/job:worker/replica:0/task:1/device:CPU:0";
constexpr DataType kI32 = DataType::kInt32;

// q on task 1; "enqueue" feeds x from task 0; "consume" squares a dequeued
// element on task 0; "close" closes q.
GraphDef ClusterQueueGraph() {
  Scope root;
  ops::QueueAttrs attrs;
  attrs.shapes = {PartialShape(std::vector<int64_t>{})};
  attrs.capacity = 4;
  Output q = ops::FIFOQueue(root.WithOpName("q").WithDevice(kT1), {kI32}, attrs);
  Output x = ops::Placeholder(root.WithOpName("x").WithDevice(kT0), kI32,
                              PartialShape(std::vector<int64_t>{}));
  ops::QueueEnqueue(root.WithOpName("enqueue"), q, {x});
  Output d = ops::QueueDequeue(root.WithOpName("dequeue"), q, {kI32})[0];
  ops::Mul(root.WithOpName("consume").WithDevice(kT0), d, d);
  ops::QueueClose(root.WithOpName("close"), q);
  return root.graph_def();
}

// Runs a step in a thread; fails the test (and aborts: a hung step cannot
// be cleaned up) instead of hanging past 30 s.
Status RunWithin(Session* s, const std::vector<std::pair<std::string, Tensor>>& feeds,
                 const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                 std::vector<Tensor>* out, const RunOptions& options = RunOptions()) {
  auto f = std::async(std::launch::async,
                      [&] { return s->Run(feeds, fetches, targets, out, nullptr, options); });
  if (f.wait_for(seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "the step did not end within 30 s";
    std::abort();
  }
  return f.get();
}

TEST(QueueCluster, ProducersAndAConsumerOnTheMasterShareAQueueOnAnotherTask) {
  LocalCluster cluster(2);
  auto s = cluster.NewSession(ClusterQueueGraph());
  ASSERT_NE(s, nullptr);
  constexpr int kThreads = 3, kEach = 20;
  std::vector<std::future<void>> producers;
  std::vector<std::future<std::vector<int32_t>>> consumers;
  for (int t = 0; t < kThreads; ++t) {
    producers.push_back(std::async(std::launch::async, [&, t] {
      for (int i = 0; i < kEach; ++i) {
        std::vector<Tensor> out;
        Status st = s->Run({{"x", Tensor::Scalar<int32_t>(t * kEach + i)}}, {}, {"enqueue"}, &out);
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    }));
    consumers.push_back(std::async(std::launch::async, [&] {
      std::vector<int32_t> got;
      for (int i = 0; i < kEach; ++i) {
        std::vector<Tensor> out;
        Status st = s->Run({}, {"consume"}, {}, &out);
        EXPECT_TRUE(st.ok()) << st.ToString();
        if (st.ok()) got.push_back(out[0].scalar<int32_t>());
      }
      return got;
    }));
  }
  for (auto& p : producers) ASSERT_EQ(p.wait_for(seconds(60)), std::future_status::ready);
  std::multiset<int32_t> got, want;
  for (auto& c : consumers) {
    ASSERT_EQ(c.wait_for(seconds(60)), std::future_status::ready);
    for (int32_t v : c.get()) got.insert(v);
  }
  for (int i = 0; i < kThreads * kEach; ++i) want.insert(i * i);
  EXPECT_EQ(got, want);
}

TEST(QueueCluster, ARemoteWaitEndsAtTheDeadlineAndOutOfRangeReachesTheMaster) {
  LocalCluster cluster(2);
  auto s = cluster.NewSession(ClusterQueueGraph());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  RunOptions options;
  options.timeout = milliseconds(200);
  Status st = RunWithin(s.get(), {}, {"consume"}, {}, &out, options);
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();

  ASSERT_TRUE(RunWithin(s.get(), {{"x", Tensor::Scalar<int32_t>(3)}}, {}, {"enqueue"}, &out).ok());
  ASSERT_TRUE(RunWithin(s.get(), {}, {}, {"close"}, &out).ok());
  st = RunWithin(s.get(), {}, {"consume"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<int32_t>(), 9);
  st = RunWithin(s.get(), {}, {"consume"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kOutOfRange) << st.ToString();
  EXPECT_EQ(st.node(), "dequeue") << st.ToString();
  EXPECT_NE(st.message().find("FIFOQueue 'q'"), std::string::npos) << st.ToString();
}

TEST(QueueCluster, ClosingTheSessionReleasesADequeueWaitingOnAnotherTask) {
  LocalCluster cluster(2);
  auto s = cluster.NewSession(ClusterQueueGraph());
  ASSERT_NE(s, nullptr);
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<Tensor> out;
    return s->Run({}, {"consume"}, {}, &out);
  });
  EXPECT_EQ(waiting.wait_for(milliseconds(300)), std::future_status::timeout);
  auto closed = std::async(std::launch::async, [&] { return s->Close(); });
  ASSERT_EQ(closed.wait_for(seconds(30)), std::future_status::ready) << "Close() hung";
  ASSERT_EQ(waiting.wait_for(seconds(30)), std::future_status::ready);
  Status st = waiting.get();
  EXPECT_EQ(st.code(), Code::kCancelled) << st.ToString();
}

}  // namespace
}  // namespace flowstate
