// StepThreads: where a frontend runs the requests that may wait (session
// steps and predictions): a thread for each such request, so that steps
// blocked on a queue or running a long loop never delay another request.
// A fixed pool would not do: as many blocked dequeues as it has threads
// would leave the QueueClose or the next step that frees them queued
// behind them, for ever.
//
// Schedule() hands the function to an idle thread, or starts a new one
// while fewer than `max_threads` exist; at the cap it queues the function
// (steps are bounded by their deadlines, sessions.max_step_ms, so the
// queue drains). A thread idle for `idle_timeout` ends, except the
// `keep_idle` most recent. Stop() refuses new work, runs what is queued
// and joins every thread; it waits for running functions, so callers end
// them first (Service::CloseSessions aborts the steps).
//
// Thread-safe. The destructor calls Stop().
#ifndef FLOWSTATE_SERVER_STEP_THREADS_H_
#define FLOWSTATE_SERVER_STEP_THREADS_H_

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "graph/mutex.h"

namespace flowstate {

class StepThreads {
 public:
  struct Options {
    int max_threads = 1024;
    int keep_idle = 4;
    std::chrono::milliseconds idle_timeout{10000};
  };

  explicit StepThreads(const Options& options);
  ~StepThreads();
  StepThreads(const StepThreads&) = delete;
  StepThreads& operator=(const StepThreads&) = delete;

  // Runs `fn` on a thread of its own as soon as one is free or can be
  // started. False (and `fn` not run) after Stop().
  bool Schedule(std::function<void()> fn);
  // Refuses new work, runs what is queued, joins the threads. Idempotent.
  void Stop();

  // Threads that exist now, and those running a function.
  int num_threads() const;
  int num_busy() const;

 private:
  void Loop();

  const Options options_;
  mutable Mutex mu_;
  CondVar cv_;  // work queued, or stopping
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Every thread started and not joined yet, and those of them that have
  // left Loop() (idle past the timeout): joined by the next Schedule() or
  // Stop().
  std::map<std::thread::id, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_STEP_THREADS_H_
