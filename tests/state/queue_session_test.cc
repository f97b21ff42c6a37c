// Queues in sessions: concurrent steps hand tensors through them, waits
// hold no executor thread, and a cancel, a step deadline or closing the
// session ends a wait at once. Every wait in these tests is bounded, so
// that a bug fails a test instead of hanging it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "graph/op_builders.h"
#include "graph/queue_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "state/queue.h"
#include "state/resource_mgr.h"
#include "tests/util/session_util.h"

namespace flowstate {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test::NewSession;

constexpr DataType kI32 = DataType::kInt32;

// A graph around one int32 scalar queue "q": "enqueue" (feeds "x"),
// "dequeue", "close", "close_cancel" and "size".
GraphDef QueueGraph(int64_t capacity, bool shuffle = false) {
  Scope root;
  ops::QueueAttrs attrs;
  attrs.shapes = {PartialShape(std::vector<int64_t>{})};
  attrs.capacity = capacity;
  Output q = shuffle ? ops::RandomShuffleQueue(root.WithOpName("q"), {kI32}, attrs, {0, 1, 2})
                     : ops::FIFOQueue(root.WithOpName("q"), {kI32}, attrs);
  Output x = ops::Placeholder(root.WithOpName("x"), kI32, PartialShape(std::vector<int64_t>{}));
  ops::QueueEnqueue(root.WithOpName("enqueue"), q, {x});
  ops::QueueDequeue(root.WithOpName("dequeue"), q, {kI32});
  ops::QueueClose(root.WithOpName("close"), q);
  ops::QueueClose(root.WithOpName("close_cancel"), q, true);
  ops::QueueSize(root.WithOpName("size"), q);
  return root.graph_def();
}

Status Enqueue(Session* s, int32_t v) {
  std::vector<Tensor> out;
  return s->Run({{"x", Tensor::Scalar<int32_t>(v)}}, {}, {"enqueue"}, &out);
}

StatusOr<int32_t> Dequeue(Session* s, const RunOptions& options = RunOptions()) {
  std::vector<Tensor> out;
  FS_RETURN_IF_ERROR(s->Run({}, {"dequeue"}, {}, &out, nullptr, options));
  return out[0].scalar<int32_t>();
}

int32_t Size(Session* s) {
  std::vector<Tensor> out;
  s->Run({}, {"size"}, {}, &out).CheckOk();
  return out[0].scalar<int32_t>();
}

// Null until a step has built the queue node's kernel.
std::shared_ptr<Queue> FindQueue(Session* s, const std::string& name = "q") {
  StatusOr<std::shared_ptr<Queue>> q = s->resource_manager()->Lookup<Queue>("", name);
  return q.ok() ? *q : nullptr;
}

int WaitingDequeues(Session* s, const std::string& name = "q") {
  std::shared_ptr<Queue> q = FindQueue(s, name);
  return q ? q->num_waiting_dequeues() : -1;
}

// Polls `cond` for up to 10 s.
template <typename Cond>
bool Eventually(Cond cond) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

class QueueStepsTest : public ::testing::TestWithParam<bool> {};

TEST_P(QueueStepsTest, ConcurrentProducersAndConsumersLoseAndDuplicateNothing) {
  // Capacity 4 with 8 threads each side: enqueues and dequeues wait often.
  auto s = NewSession(QueueGraph(4, GetParam()), 2);
  constexpr int kThreads = 8, kEach = 60;
  std::vector<std::future<std::vector<int32_t>>> consumers;
  std::vector<std::future<void>> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.push_back(std::async(std::launch::async, [&, t] {
      for (int i = 0; i < kEach; ++i) {
        Status st = Enqueue(s.get(), t * kEach + i);
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    }));
    consumers.push_back(std::async(std::launch::async, [&] {
      std::vector<int32_t> got;
      for (int i = 0; i < kEach; ++i) {
        StatusOr<int32_t> v = Dequeue(s.get());
        EXPECT_TRUE(v.ok()) << v.status().ToString();
        if (v.ok()) got.push_back(*v);
      }
      return got;
    }));
  }
  std::multiset<int32_t> got;
  for (auto& p : producers) ASSERT_EQ(p.wait_for(seconds(60)), std::future_status::ready);
  for (auto& c : consumers) {
    ASSERT_EQ(c.wait_for(seconds(60)), std::future_status::ready);
    for (int32_t v : c.get()) got.insert(v);
  }
  std::multiset<int32_t> want;
  for (int i = 0; i < kThreads * kEach; ++i) want.insert(i);
  EXPECT_EQ(got, want);
  EXPECT_EQ(Size(s.get()), 0);
}

INSTANTIATE_TEST_SUITE_P(FIFOAndShuffle, QueueStepsTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Shuffle" : "FIFO"; });

TEST(QueueSession, AnEnqueueStepWaitsWhileFullAndADequeueStepUnblocksIt) {
  auto s = NewSession(QueueGraph(2), 2);
  ASSERT_TRUE(Enqueue(s.get(), 1).ok());
  ASSERT_TRUE(Enqueue(s.get(), 2).ok());
  auto third = std::async(std::launch::async, [&] { return Enqueue(s.get(), 3); });
  EXPECT_EQ(third.wait_for(milliseconds(200)), std::future_status::timeout);
  EXPECT_EQ(Size(s.get()), 2);
  EXPECT_EQ(FindQueue(s.get())->num_waiting_enqueues(), 1);
  EXPECT_EQ(*Dequeue(s.get()), 1);
  ASSERT_EQ(third.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(third.get().ok());
  EXPECT_EQ(*Dequeue(s.get()), 2);
  EXPECT_EQ(*Dequeue(s.get()), 3);
}

TEST(QueueSession, CloseLetsDequeuesDrainThenOutOfRangeNamingTheNode) {
  auto s = NewSession(QueueGraph(-1), 2);
  ASSERT_TRUE(Enqueue(s.get(), 5).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {"close"}, &out).ok());
  Status refused = Enqueue(s.get(), 6);
  EXPECT_EQ(refused.code(), Code::kCancelled) << refused.ToString();
  EXPECT_EQ(refused.node(), "enqueue");
  EXPECT_EQ(*Dequeue(s.get()), 5);
  StatusOr<int32_t> empty = Dequeue(s.get());
  ASSERT_EQ(empty.status().code(), Code::kOutOfRange) << empty.status().ToString();
  EXPECT_EQ(empty.status().node(), "dequeue");
  EXPECT_NE(empty.status().message().find("FIFOQueue 'q' (int32[]) is closed"), std::string::npos)
      << empty.status().message();
}

TEST(QueueSession, CloseWithCancelPendingEnqueuesFailsAWaitingEnqueueStep) {
  auto s = NewSession(QueueGraph(1), 2);
  ASSERT_TRUE(Enqueue(s.get(), 1).ok());
  auto waiting = std::async(std::launch::async, [&] { return Enqueue(s.get(), 2); });
  ASSERT_TRUE(Eventually([&] { return FindQueue(s.get())->num_waiting_enqueues() == 1; }));
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {"close_cancel"}, &out).ok());
  ASSERT_EQ(waiting.wait_for(seconds(10)), std::future_status::ready);
  Status st = waiting.get();
  EXPECT_EQ(st.code(), Code::kCancelled) << st.ToString();
  EXPECT_EQ(st.node(), "enqueue");
  EXPECT_EQ(*Dequeue(s.get()), 1);
}

TEST(QueueSession, CloseWithoutCancelLetsAWaitingEnqueueStepFinish) {
  auto s = NewSession(QueueGraph(1), 2);
  ASSERT_TRUE(Enqueue(s.get(), 1).ok());
  auto waiting = std::async(std::launch::async, [&] { return Enqueue(s.get(), 2); });
  ASSERT_TRUE(Eventually([&] { return FindQueue(s.get())->num_waiting_enqueues() == 1; }));
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {"close"}, &out).ok());
  EXPECT_EQ(waiting.wait_for(milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(*Dequeue(s.get()), 1);
  ASSERT_EQ(waiting.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
  EXPECT_EQ(*Dequeue(s.get()), 2);
  EXPECT_EQ(Dequeue(s.get()).status().code(), Code::kOutOfRange);
}

TEST(QueueSession, ABlockedDequeueIsReleasedByCancellingItsStep) {
  auto s = NewSession(QueueGraph(-1), 2);
  CancellationManager cancel;
  RunOptions options;
  options.cancellation = &cancel;
  const auto start = std::chrono::steady_clock::now();
  auto waiting = std::async(std::launch::async, [&] { return Dequeue(s.get(), options); });
  ASSERT_TRUE(Eventually([&] { return WaitingDequeues(s.get()) == 1; }));
  cancel.StartCancel();
  ASSERT_EQ(waiting.wait_for(seconds(10)), std::future_status::ready);
  Status st = waiting.get().status();
  EXPECT_EQ(st.code(), Code::kCancelled) << st.ToString();
  EXPECT_NE(st.message().find("cancelled by its caller"), std::string::npos) << st.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_EQ(FindQueue(s.get())->num_waiting_dequeues(), 0);
  // The session goes on: the queue still works.
  ASSERT_TRUE(Enqueue(s.get(), 9).ok());
  EXPECT_EQ(*Dequeue(s.get()), 9);
}

TEST(QueueSession, ABlockedDequeueIsReleasedByTheStepDeadline) {
  auto s = NewSession(QueueGraph(-1), 2);
  RunOptions options;
  options.timeout = milliseconds(100);
  const auto start = std::chrono::steady_clock::now();
  auto waiting = std::async(std::launch::async, [&] { return Dequeue(s.get(), options); });
  ASSERT_EQ(waiting.wait_for(seconds(10)), std::future_status::ready);
  const auto took = std::chrono::steady_clock::now() - start;
  Status st = waiting.get().status();
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("deadline of 100 ms"), std::string::npos) << st.message();
  EXPECT_GE(took, milliseconds(100));
  EXPECT_EQ(FindQueue(s.get())->num_waiting_dequeues(), 0);
  // A step that finishes in time is untouched by its deadline.
  ASSERT_TRUE(Enqueue(s.get(), 3).ok());
  options.timeout = seconds(10);
  StatusOr<int32_t> v = Dequeue(s.get(), options);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 3);
}

TEST(QueueSession, ClosingTheSessionReleasesBlockedSteps) {
  auto s = NewSession(QueueGraph(1), 2);
  ASSERT_TRUE(Enqueue(s.get(), 1).ok());
  std::vector<std::future<Status>> blocked;
  for (int i = 0; i < 3; ++i) {
    blocked.push_back(std::async(std::launch::async, [&, i] { return Enqueue(s.get(), 10 + i); }));
  }
  std::shared_ptr<Queue> q = FindQueue(s.get());
  ASSERT_TRUE(Eventually([&] { return q->num_waiting_enqueues() == 3; }));
  auto closed = std::async(std::launch::async, [&] { return s->Close(); });
  ASSERT_EQ(closed.wait_for(seconds(10)), std::future_status::ready) << "Close() hung";
  EXPECT_TRUE(closed.get().ok());
  for (auto& b : blocked) {
    ASSERT_EQ(b.wait_for(seconds(10)), std::future_status::ready);
    Status st = b.get();
    EXPECT_EQ(st.code(), Code::kCancelled) << st.ToString();
    EXPECT_NE(st.message().find("the session was closed"), std::string::npos) << st.message();
  }
  EXPECT_EQ(q->num_waiting_enqueues(), 0);
}

// With an inter-op pool of one thread, steps whose dequeue runs on that
// thread (it follows another async kernel, whose successors go to the
// pool) wait without holding it: another step that needs the pool runs.
TEST(QueueSession, ABlockedDequeueHoldsNoExecutorThread) {
  Scope root;
  ops::QueueAttrs attrs;
  attrs.shapes = {PartialShape(std::vector<int64_t>{})};
  Output ready = ops::FIFOQueue(root.WithOpName("ready"), {kI32}, attrs);
  Output empty = ops::FIFOQueue(root.WithOpName("empty"), {kI32}, attrs);
  Output x = ops::Placeholder(root.WithOpName("x"), kI32, PartialShape(std::vector<int64_t>{}));
  ops::QueueEnqueue(root.WithOpName("fill_ready"), ready, {x});
  ops::QueueEnqueue(root.WithOpName("fill_empty"), empty, {x});
  Output first = ops::QueueDequeue(root.WithOpName("first"), ready, {kI32})[0];
  Output second = ops::QueueDequeue(root.WithOpName("second").WithControlDependencies({"first"}),
                                    empty, {kI32})[0];
  ops::Add(root.WithOpName("waiter"), first, second);
  ops::Add(root.WithOpName("other"), first, ops::Const(root, 100));
  auto s = NewSession(root.graph_def(), 1);
  std::vector<Tensor> out;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s->Run({{"x", Tensor::Scalar<int32_t>(i)}}, {}, {"fill_ready"}, &out).ok());
  }
  constexpr int kWaiters = 3;
  std::vector<std::future<Status>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      std::vector<Tensor> o;
      return s->Run({}, {"waiter"}, {}, &o);
    }));
  }
  ASSERT_TRUE(Eventually([&] { return WaitingDequeues(s.get(), "empty") == kWaiters; }));
  // "other" runs its Add on the pool's only thread after its dequeue.
  auto other = std::async(std::launch::async, [&] {
    std::vector<Tensor> o;
    Status st = s->Run({}, {"other"}, {}, &o);
    return st.ok() ? o[0].scalar<int32_t>() : -1;
  });
  ASSERT_EQ(other.wait_for(seconds(10)), std::future_status::ready)
      << "the pool's thread is held by a waiting dequeue";
  EXPECT_GE(other.get(), 100);
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(s->Run({{"x", Tensor::Scalar<int32_t>(i)}}, {}, {"fill_empty"}, &out).ok());
  }
  for (auto& w : waiters) {
    ASSERT_EQ(w.wait_for(seconds(10)), std::future_status::ready);
    EXPECT_TRUE(w.get().ok());
  }
}

TEST(QueueSession, StepsOfTwoSessionsSharingAResourceMgrShareTheQueue) {
  auto resources = std::make_shared<ResourceMgr>();
  SessionOptions o;
  o.devices = test::SharedTestPool();
  o.resources = resources;
  auto a = Session::Create(QueueGraph(-1), o).value();
  auto b = Session::Create(QueueGraph(-1), o).value();
  ASSERT_TRUE(Enqueue(a.get(), 42).ok());
  EXPECT_EQ(*Dequeue(b.get()), 42);
}

TEST(QueueSession, AQueueOfTheSameNameMustBeDeclaredTheSame) {
  Scope root;
  ops::QueueAttrs attrs;
  attrs.shared_name = "shared";
  attrs.capacity = 4;
  Output a = ops::FIFOQueue(root.WithOpName("a"), {kI32}, attrs);
  attrs.capacity = 5;
  Output b = ops::FIFOQueue(root.WithOpName("b"), {kI32}, attrs);
  ops::QueueSize(root.WithOpName("size_a"), a);
  ops::QueueSize(root.WithOpName("size_b"), b);
  auto s = NewSession(root.graph_def(), 2);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"size_a"}, {}, &out).ok());
  Status st = s->Run({}, {"size_b"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "b") << st.ToString();
  EXPECT_NE(st.message().find("capacity 5"), std::string::npos) << st.message();
}

TEST(QueueSession, BadEnqueuesAndHandlesAreInvalidArgumentNamingTheNode) {
  Scope root;
  ops::QueueAttrs attrs;
  attrs.shapes = {PartialShape({2})};
  Output q = ops::FIFOQueue(root.WithOpName("q"), {DataType::kFloat32}, attrs);
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32);
  ops::QueueEnqueue(root.WithOpName("enqueue"), q, {x});
  ops::QueueDequeue(root.WithOpName("wrong_types"), q, {kI32});
  // A queue handle where a variable belongs: refused by the kernel.
  ops::Assign(root.WithOpName("assign"), q, ops::Const(root, 1));
  auto s = NewSession(root.graph_def(), 2);
  std::vector<Tensor> out;
  Status st = s->Run({{"x", Tensor::FromVector<float>({1, 2, 3})}}, {}, {"enqueue"}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "enqueue");
  EXPECT_NE(st.message().find("element shape [2]; got [3]"), std::string::npos) << st.message();
  st = s->Run({}, {"wrong_types"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "wrong_types");
  st = s->Run({}, {}, {"assign"}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "assign");
  EXPECT_NE(st.message().find("must be a variable"), std::string::npos) << st.message();
}

TEST(QueueSession, BadQueueAttrsAreRefusedWhenTheGraphIsBuilt) {
  auto refuse = [](auto build, const std::string& what) {
    Scope root;
    build(root);
    StatusOr<std::unique_ptr<Session>> s = test::TryNewSession(root.graph_def(), 1);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << what;
    EXPECT_EQ(s.status().node(), "q") << what << ": " << s.status().ToString();
  };
  auto capacity = [](int64_t c) {
    ops::QueueAttrs a;
    a.capacity = c;
    return a;
  };
  refuse([&](Scope& r) { ops::FIFOQueue(r.WithOpName("q"), {kI32}, capacity(-5)); },
         "negative capacity");
  refuse([&](Scope& r) { ops::FIFOQueue(r.WithOpName("q"), {kI32}, capacity(0)); },
         "zero capacity");
  refuse([](Scope& r) { ops::FIFOQueue(r.WithOpName("q"), {}, {}); }, "no components");
  refuse([](Scope& r) {
    ops::QueueAttrs one_shape;
    one_shape.shapes = {PartialShape({1})};
    ops::FIFOQueue(r.WithOpName("q"), {kI32, kI32}, one_shape);
  }, "one shape for two components");
  refuse([&](Scope& r) {
    ops::RandomShuffleQueue(r.WithOpName("q"), {kI32}, capacity(4), {.min_after_dequeue = 4});
  }, "min_after_dequeue >= capacity");
  refuse([](Scope& r) { ops::PaddingFIFOQueue(r.WithOpName("q"), {kI32}, {}); },
         "padding without shapes");
}

}  // namespace
}  // namespace flowstate
