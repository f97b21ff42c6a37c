// The Queue resource on its own (state/queue.h): order, capacity, close
// semantics, cancellation, shuffling and padding, without a session.
#include "state/queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace flowstate {
namespace {

using Tuple = Queue::Tuple;

// What one attempt's callback reported, waited for with a deadline.
struct Result {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Status> status;
  Tuple tuple;

  Queue::DoneCallback Enqueued() {
    return [this](const Status& s) { Set(s, {}); };
  }
  Queue::DequeueCallback Dequeued() {
    return [this](const Status& s, Tuple t) { Set(s, std::move(t)); };
  }
  void Set(const Status& s, Tuple t) {
    std::lock_guard<std::mutex> l(mu);
    status = s;
    tuple = std::move(t);
    cv.notify_all();
  }
  bool done() {
    std::lock_guard<std::mutex> l(mu);
    return status.has_value();
  }
  // The status, or a failure if none came within 10 s.
  Status Wait() {
    std::unique_lock<std::mutex> l(mu);
    if (!cv.wait_for(l, std::chrono::seconds(10), [&] { return status.has_value(); })) {
      ADD_FAILURE() << "no callback within 10 s";
      return Internal("timed out");
    }
    return *status;
  }
};

std::shared_ptr<Queue> MakeQueue(Queue::Kind kind, int64_t capacity = -1,
                                 std::vector<PartialShape> shapes = {PartialShape({})},
                                 int64_t min_after = 0, int64_t seed = 0) {
  Queue::Options o;
  o.name = "q";
  o.kind = kind;
  o.component_types = {DataType::kInt32};
  o.shapes = std::move(shapes);
  o.capacity = capacity;
  o.min_after_dequeue = min_after;
  o.seed = seed;
  return Queue::Create(o).value();
}

Tuple Int(int32_t v) { return {Tensor::Scalar<int32_t>(v)}; }

Status Enqueue(Queue* q, int32_t v) {
  Result r;
  q->TryEnqueue(Int(v), nullptr, r.Enqueued());
  return r.Wait();
}

int32_t DequeueInt(Queue* q) {
  Result r;
  q->TryDequeue(nullptr, r.Dequeued());
  Status s = r.Wait();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() ? r.tuple[0].scalar<int32_t>() : -1;
}

TEST(Queue, FIFOOrderAndSize) {
  auto q = MakeQueue(Queue::Kind::kFIFO);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Enqueue(q.get(), i).ok());
  EXPECT_EQ(q->size(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(DequeueInt(q.get()), i);
  EXPECT_EQ(q->size(), 0);
}

TEST(Queue, BadTuplesAreInvalidArgumentNamingTheQueue) {
  Queue::Options o;
  o.name = "pairs";
  o.component_types = {DataType::kFloat32, DataType::kInt32};
  o.shapes = {PartialShape({2}), PartialShape({})};
  auto q = Queue::Create(o).value();
  auto check = [&](const Tuple& t, bool many, const std::string& what) {
    Status s = q->ValidateTuple(t, many);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << what;
    EXPECT_NE(s.message().find("'pairs'"), std::string::npos) << s.message();
  };
  check({Tensor::FromVector<float>({1, 2})}, false, "one component of two");
  check({Tensor::FromVector<int32_t>({1, 2}), Tensor::Scalar<int32_t>(1)}, false, "dtype");
  check({Tensor::FromVector<float>({1, 2, 3}), Tensor::Scalar<int32_t>(1)}, false, "shape");
  check({Tensor::FromVector<float>({1, 2}, TensorShape({1, 2})), Tensor::FromVector<int32_t>({1, 2})},
        true, "batch sizes differ");
  check({Tensor::FromVector<float>({1, 2}), Tensor::Scalar<int32_t>(1)}, true, "no batch dim");
  EXPECT_TRUE(q->ValidateTuple({Tensor::FromVector<float>({1, 2}), Tensor::Scalar<int32_t>(1)},
                               false)
                  .ok());
}

TEST(Queue, CreateRefusesBadOptions) {
  auto make = [](auto edit) {
    Queue::Options o;
    o.name = "q";
    o.component_types = {DataType::kFloat32};
    edit(o);
    return Queue::Create(o).status();
  };
  EXPECT_EQ(make([](Queue::Options& o) { o.capacity = 0; }).code(), Code::kInvalidArgument);
  EXPECT_EQ(make([](Queue::Options& o) { o.capacity = -2; }).code(), Code::kInvalidArgument);
  EXPECT_EQ(make([](Queue::Options& o) { o.component_types.clear(); }).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(make([](Queue::Options& o) { o.shapes = {PartialShape({-1})}; }).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(make([](Queue::Options& o) { o.kind = Queue::Kind::kPaddingFIFO; }).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(make([](Queue::Options& o) {
              o.kind = Queue::Kind::kRandomShuffle;
              o.capacity = 4;
              o.min_after_dequeue = 4;
            }).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(make([](Queue::Options& o) {
                o.kind = Queue::Kind::kPaddingFIFO;
                o.shapes = {PartialShape({-1, 3})};
              }).ok());
}

TEST(Queue, EnqueueWaitsWhileFullAndADequeueLetsItIn) {
  auto q = MakeQueue(Queue::Kind::kFIFO, 2);
  ASSERT_TRUE(Enqueue(q.get(), 1).ok());
  ASSERT_TRUE(Enqueue(q.get(), 2).ok());
  Result blocked;
  q->TryEnqueue(Int(3), nullptr, blocked.Enqueued());
  EXPECT_FALSE(blocked.done());
  EXPECT_EQ(q->size(), 2);
  EXPECT_EQ(q->num_waiting_enqueues(), 1);
  EXPECT_EQ(DequeueInt(q.get()), 1);
  EXPECT_TRUE(blocked.Wait().ok());
  EXPECT_EQ(q->size(), 2);
  EXPECT_EQ(DequeueInt(q.get()), 2);
  EXPECT_EQ(DequeueInt(q.get()), 3);
}

TEST(Queue, DequeueManyMayAskForMoreThanTheCapacity) {
  auto q = MakeQueue(Queue::Kind::kFIFO, 2);
  Result batch;
  q->TryDequeueMany(5, false, nullptr, batch.Dequeued());
  std::thread producer([&] {
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(Enqueue(q.get(), i).ok());
  });
  ASSERT_TRUE(batch.Wait().ok());
  producer.join();
  ASSERT_EQ(batch.tuple[0].shape(), TensorShape({5}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(batch.tuple[0].data<int32_t>()[i], i);
}

TEST(Queue, EnqueueManySplitsTheBatchAndDequeueManyStacksIt) {
  Queue::Options o;
  o.name = "q";
  o.component_types = {DataType::kFloat32};
  o.shapes = {PartialShape({2})};
  auto q = Queue::Create(o).value();
  Result in;
  q->TryEnqueueMany({Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, TensorShape({3, 2}))}, nullptr,
                    in.Enqueued());
  ASSERT_TRUE(in.Wait().ok());
  EXPECT_EQ(q->size(), 3);
  Result out;
  q->TryDequeueMany(2, false, nullptr, out.Dequeued());
  ASSERT_TRUE(out.Wait().ok());
  ASSERT_EQ(out.tuple[0].shape(), TensorShape({2, 2}));
  EXPECT_EQ(std::vector<float>(out.tuple[0].data<float>(), out.tuple[0].data<float>() + 4),
            (std::vector<float>{1, 2, 3, 4}));
  Result zero;
  q->TryDequeueMany(0, false, nullptr, zero.Dequeued());
  ASSERT_TRUE(zero.Wait().ok());
  EXPECT_EQ(zero.tuple[0].shape(), TensorShape({0, 2}));
}

TEST(Queue, CloseWithoutCancelDrainsThenOutOfRangeAndRefusesNewEnqueues) {
  auto q = MakeQueue(Queue::Kind::kFIFO, 1);
  ASSERT_TRUE(Enqueue(q.get(), 1).ok());
  Result pending;  // waits for room; accepted before the close
  q->TryEnqueue(Int(2), nullptr, pending.Enqueued());
  q->Close(false);
  Status refused = Enqueue(q.get(), 3);
  EXPECT_EQ(refused.code(), Code::kCancelled) << refused.ToString();
  EXPECT_NE(refused.message().find("'q'"), std::string::npos) << refused.message();
  EXPECT_FALSE(pending.done());
  EXPECT_EQ(DequeueInt(q.get()), 1);
  EXPECT_TRUE(pending.Wait().ok());
  // A batch larger than what is left fails and leaves the elements queued.
  Result many;
  q->TryDequeueMany(2, false, nullptr, many.Dequeued());
  EXPECT_EQ(many.Wait().code(), Code::kOutOfRange);
  EXPECT_EQ(q->size(), 1);
  Result up_to;
  q->TryDequeueMany(2, true, nullptr, up_to.Dequeued());
  ASSERT_TRUE(up_to.Wait().ok());
  EXPECT_EQ(up_to.tuple[0].shape(), TensorShape({1}));
  EXPECT_EQ(up_to.tuple[0].data<int32_t>()[0], 2);
  Result empty;
  q->TryDequeue(nullptr, empty.Dequeued());
  Status s = empty.Wait();
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find("FIFOQueue 'q'"), std::string::npos) << s.message();
}

TEST(Queue, CloseReleasesWaitingDequeuesWithOutOfRange) {
  auto q = MakeQueue(Queue::Kind::kFIFO);
  Result a, b;
  q->TryDequeue(nullptr, a.Dequeued());
  q->TryDequeueMany(3, true, nullptr, b.Dequeued());
  ASSERT_TRUE(Enqueue(q.get(), 7).ok());  // goes to the first waiter
  EXPECT_TRUE(a.Wait().ok());
  EXPECT_FALSE(b.done());
  q->Close(false);
  EXPECT_EQ(b.Wait().code(), Code::kOutOfRange);
}

TEST(Queue, CloseWithCancelPendingEnqueuesFailsThemCancelled) {
  auto q = MakeQueue(Queue::Kind::kFIFO, 1);
  ASSERT_TRUE(Enqueue(q.get(), 1).ok());
  Result pending;
  q->TryEnqueue(Int(2), nullptr, pending.Enqueued());
  q->Close(true);
  EXPECT_EQ(pending.Wait().code(), Code::kCancelled);
  EXPECT_EQ(q->size(), 1);  // what was queued stays
  EXPECT_EQ(DequeueInt(q.get()), 1);
}

TEST(Queue, CancellingTheStepEndsAWaitAndPutsHeldElementsBack) {
  auto q = MakeQueue(Queue::Kind::kFIFO);
  CancellationManager step;
  ASSERT_TRUE(Enqueue(q.get(), 1).ok());
  Result many;  // takes the 1, waits for 2 more
  q->TryDequeueMany(3, false, &step, many.Dequeued());
  EXPECT_FALSE(many.done());
  EXPECT_EQ(q->size(), 0);
  step.StartCancel();
  EXPECT_EQ(many.Wait().code(), Code::kCancelled);
  EXPECT_EQ(q->size(), 1);
  EXPECT_EQ(q->num_waiting_dequeues(), 0);
  // A manager cancelled already: the attempt fails at once.
  Result late;
  q->TryDequeueMany(2, false, &step, late.Dequeued());
  EXPECT_EQ(late.Wait().code(), Code::kCancelled);
  EXPECT_EQ(DequeueInt(q.get()), 1);
}

TEST(Queue, ACompletedAttemptLeavesNoCallbackInTheManager) {
  auto q = MakeQueue(Queue::Kind::kFIFO);
  CancellationManager step;
  Result r;
  q->TryDequeue(&step, r.Dequeued());
  ASSERT_TRUE(Enqueue(q.get(), 4).ok());
  ASSERT_TRUE(r.Wait().ok());
  // The callback was deregistered: cancelling now calls nothing on the queue.
  step.StartCancel();
  EXPECT_EQ(q->size(), 0);
  ASSERT_TRUE(Enqueue(q.get(), 5).ok());
  EXPECT_EQ(DequeueInt(q.get()), 5);
}

std::vector<int32_t> ShuffledOrder(int64_t seed, int n) {
  auto q = MakeQueue(Queue::Kind::kRandomShuffle, -1, {PartialShape({})}, 0, seed);
  for (int i = 0; i < n; ++i) EXPECT_TRUE(Enqueue(q.get(), i).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(DequeueInt(q.get()));
  return out;
}

TEST(Queue, RandomShuffleIsDeterministicForASeedAndAPermutation) {
  const std::vector<int32_t> a = ShuffledOrder(42, 50), b = ShuffledOrder(42, 50);
  const std::vector<int32_t> c = ShuffledOrder(43, 50);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int32_t> sorted = a, identity(50);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i) identity[i] = i;
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
}

TEST(Queue, RandomShuffleKeepsMinAfterDequeueUntilClosed) {
  auto q = MakeQueue(Queue::Kind::kRandomShuffle, 10, {PartialShape({})}, 3, 7);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Enqueue(q.get(), i).ok());
  Result r;
  q->TryDequeue(nullptr, r.Dequeued());
  EXPECT_FALSE(r.done());  // 3 left would be fewer than min_after_dequeue
  ASSERT_TRUE(Enqueue(q.get(), 3).ok());
  ASSERT_TRUE(r.Wait().ok());
  EXPECT_EQ(q->size(), 3);
  Result held;
  q->TryDequeue(nullptr, held.Dequeued());
  EXPECT_FALSE(held.done());
  q->Close(false);  // now everything drains
  ASSERT_TRUE(held.Wait().ok());
  std::set<int32_t> seen{r.tuple[0].scalar<int32_t>(), held.tuple[0].scalar<int32_t>()};
  seen.insert(DequeueInt(q.get()));
  seen.insert(DequeueInt(q.get()));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(Queue, PaddingFIFOQueuePadsABatchToItsLargestElement) {
  Queue::Options o;
  o.name = "seqs";
  o.kind = Queue::Kind::kPaddingFIFO;
  o.component_types = {DataType::kInt32, DataType::kFloat32};
  o.shapes = {PartialShape({-1}), PartialShape({-1, 2})};
  auto q = Queue::Create(o).value();
  auto enqueue = [&](std::vector<int32_t> ids, int rows) {
    std::vector<float> m;
    for (int r = 0; r < rows; ++r) m.insert(m.end(), {float(r + 1), float(-(r + 1))});
    Result e;
    const int64_t n = int64_t(ids.size());
    q->TryEnqueue({Tensor::FromVector(ids, TensorShape({n})),
                   Tensor::FromVector(m, TensorShape({rows, 2}))},
                  nullptr, e.Enqueued());
    EXPECT_TRUE(e.Wait().ok());
  };
  enqueue({1, 2}, 1);
  enqueue({3, 4, 5, 6}, 3);
  enqueue({7}, 0);
  Result b;
  q->TryDequeueMany(3, false, nullptr, b.Dequeued());
  ASSERT_TRUE(b.Wait().ok());
  ASSERT_EQ(b.tuple[0].shape(), TensorShape({3, 4}));
  EXPECT_EQ(std::vector<int32_t>(b.tuple[0].data<int32_t>(), b.tuple[0].data<int32_t>() + 12),
            (std::vector<int32_t>{1, 2, 0, 0, 3, 4, 5, 6, 7, 0, 0, 0}));
  ASSERT_EQ(b.tuple[1].shape(), TensorShape({3, 3, 2}));
  EXPECT_EQ(std::vector<float>(b.tuple[1].data<float>(), b.tuple[1].data<float>() + 18),
            (std::vector<float>{1, -1, 0, 0, 0, 0, 1, -1, 2, -2, 3, -3, 0, 0, 0, 0, 0, 0}));
}

TEST(Queue, AFIFOQueueWithoutShapesRefusesToBatchUnequalShapes) {
  auto q = MakeQueue(Queue::Kind::kFIFO, -1, {});
  Result a, b, batch;
  q->TryEnqueue({Tensor::FromVector<int32_t>({1, 2})}, nullptr, a.Enqueued());
  q->TryEnqueue({Tensor::FromVector<int32_t>({1, 2, 3})}, nullptr, b.Enqueued());
  ASSERT_TRUE(a.Wait().ok() && b.Wait().ok());
  q->TryDequeueMany(2, false, nullptr, batch.Dequeued());
  Status s = batch.Wait();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("PaddingFIFOQueue"), std::string::npos) << s.message();
}

TEST(Queue, ManyThreadsLoseAndDuplicateNothing) {
  auto q = MakeQueue(Queue::Kind::kFIFO, 3);
  constexpr int kProducers = 4, kConsumers = 4, kEach = 500;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::multiset<int32_t> got;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) EXPECT_TRUE(Enqueue(q.get(), p * kEach + i).ok());
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        const int32_t v = DequeueInt(q.get());
        std::lock_guard<std::mutex> l(mu);
        got.insert(v);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::multiset<int32_t> want;
  for (int i = 0; i < kProducers * kEach; ++i) want.insert(i);
  EXPECT_EQ(got, want);
  EXPECT_EQ(q->size(), 0);
}

TEST(Queue, AHandleHasNoValue) {
  auto q = MakeQueue(Queue::Kind::kFIFO);
  EXPECT_EQ(q->Read().status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(q->ref_name(), "q");
}

}  // namespace
}  // namespace flowstate
