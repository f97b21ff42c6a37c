// The queue's attempts: how enqueues and dequeues wait, progress, complete
// and are cancelled. Tuples, batches and padding are in queue_batch.cc.
#include "state/queue.h"
#include "graph/mutex.h"

#include <utility>

namespace flowstate {
namespace {

std::mt19937_64 SeededRng(int64_t seed, int64_t seed2) {
  if (seed == 0 && seed2 == 0) return std::mt19937_64(std::random_device{}());
  std::seed_seq seq{uint32_t(seed), uint32_t(uint64_t(seed) >> 32), uint32_t(seed2),
                    uint32_t(uint64_t(seed2) >> 32)};
  return std::mt19937_64(seq);
}

}  // namespace

Queue::Queue(Options options)
    : options_(std::move(options)), rng_(SeededRng(options_.seed, options_.seed2)) {}

Queue::~Queue() {
  // Attempts hold no reference to the queue, so some may wait here still
  // if their steps were never cancelled; they must not hang.
  Completions done;
  {
    MutexLock l(mu_);
    for (std::list<Attempt>* line : {&enqueues_, &dequeues_}) {
      for (Attempt& a : *line) {
        done.push_back(Complete(&a, Cancelled(DebugString() + " was destroyed")));
      }
      line->clear();
    }
  }
  Run(&done);
}

StatusOr<Tensor> Queue::Read() {
  return FailedPrecondition("'" + name() + "' is a " + KindName() +
                                " handle, which has no value; only the Queue* ops take it",
                            name());
}

Status Queue::Mutate(const std::function<Status(Tensor* value)>&) { return Read().status(); }

int64_t Queue::size() const {
  MutexLock l(mu_);
  return int64_t(elements_.size());
}

bool Queue::is_closed() const {
  MutexLock l(mu_);
  return closed_;
}

int Queue::num_waiting_enqueues() const {
  MutexLock l(mu_);
  return int(enqueues_.size());
}

int Queue::num_waiting_dequeues() const {
  MutexLock l(mu_);
  return int(dequeues_.size());
}

void Queue::TryEnqueue(Tuple tuple, CancellationManager* cancel, DoneCallback done) {
  Attempt a;
  a.cancel = cancel;
  a.pending.push_back(std::move(tuple));
  a.enqueue_done = std::move(done);
  Start(&enqueues_, std::move(a));
}

void Queue::TryEnqueueMany(Tuple tuple, CancellationManager* cancel, DoneCallback done) {
  Attempt a;
  a.cancel = cancel;
  a.enqueue_done = std::move(done);
  const int64_t n = tuple.empty() ? 0 : tuple[0].dim(0);
  for (int64_t k = 0; k < n; ++k) {
    Tuple element;
    element.reserve(tuple.size());
    for (const Tensor& c : tuple) {
      // Row k without its dimension 0, sharing the batch's buffer.
      TensorShape shape = c.shape();
      shape.RemoveDim(0);
      StatusOr<Tensor> row = c.Slice(k, k + 1).Reshaped(shape);
      if (!row.ok()) {  // unreachable for a validated tuple
        a.enqueue_done(row.status());
        return;
      }
      element.push_back(std::move(row).value());
    }
    a.pending.push_back(std::move(element));
  }
  Start(&enqueues_, std::move(a));
}

void Queue::TryDequeue(CancellationManager* cancel, DequeueCallback done) {
  Attempt a;
  a.cancel = cancel;
  a.requested = 1;
  a.dequeue_done = std::move(done);
  Start(&dequeues_, std::move(a));
}

void Queue::TryDequeueMany(int64_t n, bool allow_smaller, CancellationManager* cancel,
                           DequeueCallback done) {
  if (n < 0) {
    done(InvalidArgument("cannot dequeue " + std::to_string(n) + " elements from " +
                         DebugString() + ": n must be >= 0"),
         {});
    return;
  }
  if (n == 0) {
    StatusOr<Tuple> empty = EmptyBatch();
    done(empty.status(), empty.ok() ? std::move(empty).value() : Tuple());
    return;
  }
  Attempt a;
  a.cancel = cancel;
  a.requested = n;
  a.many = true;
  a.allow_smaller = allow_smaller;
  a.dequeue_done = std::move(done);
  Start(&dequeues_, std::move(a));
}

void Queue::Close(bool cancel_pending_enqueues) {
  Completions done;
  {
    MutexLock l(mu_);
    closed_ = true;
    if (cancel_pending_enqueues) {
      for (Attempt& a : enqueues_) {
        done.push_back(Complete(
            &a, Cancelled("an enqueue into " + DebugString() +
                          " was cancelled: the queue was closed with cancel_pending_enqueues")));
      }
      enqueues_.clear();
    }
    Flush(&done);
  }
  Run(&done);
}

void Queue::Start(std::list<Attempt>* line, Attempt attempt) {
  CancellationManager* cancel = attempt.cancel;
  int64_t id = 0;
  bool waiting = false;
  Completions done;
  {
    MutexLock l(mu_);
    id = attempt.id = next_id_++;
    if (line == &enqueues_ && closed_) {
      done.push_back(Complete(&attempt, Cancelled(DebugString() + " is closed")));
    } else {
      line->push_back(std::move(attempt));
      Flush(&done);
      for (const Attempt& a : *line) waiting |= a.id == id;
    }
  }
  Run(&done);
  if (!waiting || cancel == nullptr) return;
  // Registered outside the lock: the callback may run at once, and it
  // takes the lock. Whoever finds the attempt gone deregisters.
  const CancellationManager::Token token =
      cancel->Register([self = shared_from_this(), id] { self->Cancel(id); });
  if (token == CancellationManager::kInvalidToken) {  // cancelled already
    Cancel(id);
    return;
  }
  bool found = false;
  {
    MutexLock l(mu_);
    for (Attempt& a : *line) {
      if (a.id == id) {
        a.token = token;
        found = true;
      }
    }
  }
  if (!found) cancel->Deregister(token);
}

void Queue::Cancel(int64_t id) {
  Completions done;
  {
    MutexLock l(mu_);
    for (std::list<Attempt>* line : {&enqueues_, &dequeues_}) {
      for (auto it = line->begin(); it != line->end(); ++it) {
        if (it->id != id) continue;
        const bool dequeue = line == &dequeues_;
        if (dequeue) PutBack(&it->taken);
        done.push_back(Complete(&*it, Cancelled(std::string(dequeue ? "a dequeue from "
                                                                    : "an enqueue into ") +
                                                DebugString() + " was cancelled")));
        line->erase(it);
        Flush(&done);  // elements put back may serve the next dequeue
        break;
      }
    }
  }
  Run(&done);
}

bool Queue::HasRoom() const {
  return options_.capacity < 0 || int64_t(elements_.size()) < options_.capacity;
}

bool Queue::CanTakeOne() const {
  if (elements_.empty()) return false;
  return options_.kind != Kind::kRandomShuffle || closed_ ||
         int64_t(elements_.size()) > options_.min_after_dequeue;
}

Queue::Tuple Queue::TakeOne() {
  if (options_.kind == Kind::kRandomShuffle && elements_.size() > 1) {
    const size_t i = std::uniform_int_distribution<size_t>(0, elements_.size() - 1)(rng_);
    std::swap(elements_[i], elements_.back());
    Tuple t = std::move(elements_.back());
    elements_.pop_back();
    return t;
  }
  Tuple t = std::move(elements_.front());
  elements_.pop_front();
  return t;
}

void Queue::PutBack(std::vector<Tuple>* taken) {
  for (auto it = taken->rbegin(); it != taken->rend(); ++it) elements_.push_front(std::move(*it));
  taken->clear();
}

void Queue::Flush(Completions* done) {
  bool progress = true;
  while (progress) {
    progress = false;
    while (!enqueues_.empty()) {
      Attempt& a = enqueues_.front();
      while (!a.pending.empty() && HasRoom()) {
        elements_.push_back(std::move(a.pending.front()));
        a.pending.pop_front();
        progress = true;
      }
      if (!a.pending.empty()) break;  // full: the rest wait behind it
      done->push_back(Complete(&a, Status()));
      enqueues_.pop_front();
      progress = true;
    }
    while (!dequeues_.empty()) {
      Attempt& a = dequeues_.front();
      while (int64_t(a.taken.size()) < a.requested && CanTakeOne()) {
        a.taken.push_back(TakeOne());
        progress = true;
      }
      if (int64_t(a.taken.size()) < a.requested) {
        // Nothing more can come: closed, empty, no enqueue waiting.
        if (!closed_ || !elements_.empty() || !enqueues_.empty()) break;
        if (!(a.allow_smaller && !a.taken.empty())) {
          const int64_t have = int64_t(a.taken.size());
          PutBack(&a.taken);
          done->push_back(Complete(
              &a, OutOfRange(DebugString() + " is closed and has insufficient elements "
                                             "(requested " + std::to_string(a.requested) +
                             ", current size " + std::to_string(have) + ")")));
          dequeues_.pop_front();
          progress = true;
          continue;
        }
      }
      done->push_back(Complete(&a, Status()));
      dequeues_.pop_front();
      progress = true;
    }
  }
}

std::function<void()> Queue::Complete(Attempt* a, const Status& s) {
  CancellationManager* cancel = a->token != CancellationManager::kInvalidToken ? a->cancel : nullptr;
  const CancellationManager::Token token = a->token;
  if (a->enqueue_done) {
    return [cancel, token, s, done = std::move(a->enqueue_done)] {
      if (cancel != nullptr) cancel->Deregister(token);
      done(s);
    };
  }
  return [this, cancel, token, s, many = a->many, taken = std::move(a->taken),
          done = std::move(a->dequeue_done)]() mutable {
    if (cancel != nullptr) cancel->Deregister(token);
    if (!s.ok()) {
      done(s, {});
    } else if (!many) {
      done(s, std::move(taken[0]));
    } else {
      StatusOr<Tuple> batch = Batch(taken);
      done(batch.status(), batch.ok() ? std::move(batch).value() : Tuple());
    }
  };
}

void Queue::Run(Completions* done) {
  for (auto& f : *done) f();
  done->clear();
}

}  // namespace flowstate
