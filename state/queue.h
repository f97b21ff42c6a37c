// Queue: the paper's queues (section 3.4) — a resource that concurrent
// steps hand tuples of tensors through: FIFOQueue, RandomShuffleQueue and
// PaddingFIFOQueue, as in TensorFlow.
//
// An element is a tuple with one tensor per component. Enqueues and
// dequeues never block a thread: each is an *attempt* that completes at
// once when it can, or waits in the queue's list until another operation
// (an enqueue, a dequeue, Close, a cancel) lets it finish, and its callback
// then runs on the thread of that operation, outside the queue's lock.
// Attempts are served in arrival order, each kind in its own line: an
// enqueue waits while the queue is full (capacity), a dequeue while it is
// empty (for a RandomShuffleQueue, while it holds min_after_dequeue or
// fewer, until it is closed). A DequeueMany takes elements one at a time as
// they come and holds them, so it may ask for more than the capacity; if it
// fails (closed with too few, cancelled) they go back to the front.
//
// Close(): later enqueues fail CANCELLED; dequeues drain what is left, then
// fail OUT_OF_RANGE; enqueues already waiting for room keep waiting (they
// were accepted before the close) unless cancel_pending_enqueues, which
// fails them CANCELLED — TensorFlow's semantics.
//
// An attempt made with a CancellationManager (the step's) is cancelled
// when the manager is: its callback gets CANCELLED, and elements a
// DequeueMany held go back. So cancelling a step, its deadline or closing
// its session ends a wait at once.
//
// A Queue is a TensorRef only so that its handle can travel the graph's Ref
// edges (its consumers are then placed on its device); it has no value:
// Read and Mutate fail. Owned by shared_ptr (the ResourceMgr, kernels and
// pending cancellation callbacks). Thread-safe.
#ifndef FLOWSTATE_STATE_QUEUE_H_
#define FLOWSTATE_STATE_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "devices/op_kernel.h"
#include "graph/allocator.h"
#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/tensor_ref.h"
#include "graph/tensor_shape.h"
#include "state/resource_mgr.h"

namespace flowstate {

class Queue final : public ResourceBase,
                    public TensorRef,
                    public std::enable_shared_from_this<Queue> {
 public:
  enum class Kind { kFIFO, kRandomShuffle, kPaddingFIFO };
  using Tuple = std::vector<Tensor>;
  using DoneCallback = std::function<void(const Status&)>;
  using DequeueCallback = std::function<void(const Status&, Tuple)>;

  struct Options {
    std::string name;  // in errors: the shared name (the queue node's name by default)
    Kind kind = Kind::kFIFO;
    std::vector<DataType> component_types;  // at least one
    // One per component, or empty (any shapes; not for kPaddingFIFO). Fully
    // defined except for kPaddingFIFO, where -1 dims vary (known rank).
    std::vector<PartialShape> shapes;
    int64_t capacity = -1;  // -1: unbounded; else >= 1
    int64_t min_after_dequeue = 0;  // kRandomShuffle; < capacity
    int64_t seed = 0, seed2 = 0;    // kRandomShuffle; both 0: random
    Allocator* allocator = nullptr;  // batches of DequeueMany; null: HostAllocator()
  };
  // INVALID_ARGUMENT for options that do not make a queue (the op's shape
  // function checks the same for graphs).
  static StatusOr<std::shared_ptr<Queue>> Create(Options options);
  ~Queue() override;

  // INVALID_ARGUMENT, saying what differs, unless `o` declares this queue
  // (kind, components, shapes, capacity, min_after_dequeue): a node that
  // finds the queue by its shared name must agree with its creator.
  Status CheckSame(const Options& o) const;

  const std::string& name() const { return options_.name; }
  Kind kind() const { return options_.kind; }
  const std::vector<DataType>& component_types() const { return options_.component_types; }
  std::string DebugString() const override;  // "FIFOQueue 'q' (float32[2], int32[])"

  // Checks a tuple against the components (count, dtypes, shapes); with
  // `many`, each component's dimension 0 indexes the elements (the same for
  // every component) and its other dimensions are the element's.
  // INVALID_ARGUMENT naming the queue.
  Status ValidateTuple(const Tuple& tuple, bool many) const;

  // Enqueues one element / the elements of a batch (ValidateTuple first:
  // REQUIRES a valid tuple). `done` runs exactly once, on this thread or on
  // the thread that lets the attempt finish; never with the lock held.
  void TryEnqueue(Tuple tuple, CancellationManager* cancel, DoneCallback done);
  void TryEnqueueMany(Tuple tuple, CancellationManager* cancel, DoneCallback done);
  // Dequeues one element: `done` gets its components.
  void TryDequeue(CancellationManager* cancel, DequeueCallback done);
  // Dequeues n elements stacked into batches (padded for kPaddingFIFO);
  // with allow_smaller, a closed queue yields the 1..n left. n == 0 yields
  // empty batches when the shapes are fully defined. INVALID_ARGUMENT for
  // n < 0, or elements of a batch whose shapes differ (not kPaddingFIFO).
  void TryDequeueMany(int64_t n, bool allow_smaller, CancellationManager* cancel,
                      DequeueCallback done);
  void Close(bool cancel_pending_enqueues);

  int64_t size() const;
  bool is_closed() const;
  // Attempts waiting now (for tests).
  int num_waiting_enqueues() const;
  int num_waiting_dequeues() const;

  // TensorRef: a queue handle has no value (FAILED_PRECONDITION naming it).
  StatusOr<Tensor> Read() override;
  Status Mutate(const std::function<Status(Tensor* value)>& fn) override;
  const std::string& ref_name() const override { return options_.name; }

 private:
  struct Attempt {
    int64_t id = 0;
    CancellationManager* cancel = nullptr;
    CancellationManager::Token token = CancellationManager::kInvalidToken;
    // Enqueue: the elements still to add, in order.
    std::deque<Tuple> pending;
    DoneCallback enqueue_done;
    // Dequeue: how many, and those taken so far.
    int64_t requested = 0;
    bool many = false;
    bool allow_smaller = false;
    std::vector<Tuple> taken;
    DequeueCallback dequeue_done;
  };
  using Completions = std::vector<std::function<void()>>;

  explicit Queue(Options options);
  // Adds the attempt, makes what progress can be made, and registers the
  // attempt with its cancellation manager if it still waits.
  void Start(std::list<Attempt>* line, Attempt attempt);
  void Cancel(int64_t id);

  // Moves elements while attempts can progress; finished attempts go to
  // `done` as completions.
  void Flush(Completions* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CanTakeOne() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Tuple TakeOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // REQUIRES: CanTakeOne()
  // Puts a failed dequeue's elements back at the front.
  void PutBack(std::vector<Tuple>* taken) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::function<void()> Complete(Attempt* a, const Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Completions* done);

  // The batch of a DequeueMany from its elements (padded for kPaddingFIFO).
  StatusOr<Tuple> Batch(const std::vector<Tuple>& elements) const;
  StatusOr<Tuple> EmptyBatch() const;
  const char* KindName() const;

  const Options options_;
  mutable Mutex mu_;
  std::deque<Tuple> elements_ ABSL_GUARDED_BY(mu_);
  std::list<Attempt> enqueues_ ABSL_GUARDED_BY(mu_);          // waiting, in order
  std::list<Attempt> dequeues_ ABSL_GUARDED_BY(mu_);          // waiting, in order
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);                  // kRandomShuffle's picks
};

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_QUEUE_H_
