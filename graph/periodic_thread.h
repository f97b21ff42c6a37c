// PeriodicThread: a thread that calls a function every interval until it is
// stopped -- the servers' background chores (reaping idle sessions,
// sweeping orphaned steps, heartbeats).
//
//   PeriodicThread sweeper(std::chrono::seconds(1), [this] { ReclaimOrphans(); });
//   ...
//   sweeper.Stop();  // wakes it at once and joins it (the destructor too)
//
// `fn` runs on the thread with no lock of this class held, first after one
// interval (or at once with run_first), then one interval after each call
// ended. Stop() waits for a call in progress to end; it must not be called
// from `fn`.
//
// Ownership: owns its thread. Thread safety: Stop may be called from any
// thread, any number of times.
#ifndef FLOWSTATE_GRAPH_PERIODIC_THREAD_H_
#define FLOWSTATE_GRAPH_PERIODIC_THREAD_H_

#include <chrono>
#include <functional>
#include <thread>

#include "graph/mutex.h"

namespace flowstate {

class PeriodicThread {
 public:
  PeriodicThread(std::chrono::microseconds interval, std::function<void()> fn,
                 bool run_first = false)
      : thread_([this, interval, fn = std::move(fn), run_first] { Run(interval, fn, run_first); }) {}
  ~PeriodicThread() { Stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  void Stop() {
    {
      MutexLock l(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    MutexLock l(join_mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run(std::chrono::microseconds interval, const std::function<void()>& fn, bool run_first) {
    if (run_first) fn();
    MutexLock l(mu_);
    for (;;) {
      const auto next = std::chrono::steady_clock::now() + interval;
      while (!stop_ && cv_.WaitUntil(mu_, next)) {
      }
      if (stop_) return;
      l.Unlock();
      fn();
      l.Lock();
    }
  }

  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Mutex join_mu_;  // one joiner at a time
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);  // last: it starts once the rest is built
};

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_PERIODIC_THREAD_H_
