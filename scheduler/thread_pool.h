// ThreadPool: the inter-op pool that runs ready nodes of steps (Eigen's
// non-blocking work-stealing pool behind a plain interface). A pool may be
// shared by many sessions. Thread-safe; the destructor waits for queued work.
#ifndef FLOWSTATE_SCHEDULER_THREAD_POOL_H_
#define FLOWSTATE_SCHEDULER_THREAD_POOL_H_

#include <functional>
#include <memory>

namespace flowstate {

class ThreadPool {
 public:
  // num_threads 0: the number of hardware threads.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> fn);
  int NumThreads() const;
  // True when called from one of this pool's threads.
  bool InPool() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_THREAD_POOL_H_
