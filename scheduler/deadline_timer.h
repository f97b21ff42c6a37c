// DeadlineTimer: runs a callback when a deadline passes, on one thread of
// its own, so that a step's deadline fires whatever the step's threads are
// doing -- the thread that started a step may be running its nodes itself
// (a loop of cheap nodes runs inline on it, and would never get back to
// wait for the deadline).
//
// Schedule() returns an id; Cancel(id) removes the callback before it runs,
// or, when it is running at that moment, waits for it to finish, so that
// after Cancel() the callback never runs again and what it captured may be
// destroyed. Callbacks must be short and must not call Cancel().
//
// Thread-safe. Global() is one process-wide timer, never destroyed.
#ifndef FLOWSTATE_SCHEDULER_DEADLINE_TIMER_H_
#define FLOWSTATE_SCHEDULER_DEADLINE_TIMER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "graph/mutex.h"

namespace flowstate {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;

  DeadlineTimer();
  ~DeadlineTimer();  // callbacks not run yet never run
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  static DeadlineTimer& Global();

  // Runs `fn` on the timer's thread once `deadline` has passed (at once
  // when it has already). Never returns 0.
  uint64_t Schedule(Clock::time_point deadline, std::function<void()> fn);
  // True when `fn` was removed before it ran; false when it ran (or is
  // running: Cancel waits for it to finish).
  bool Cancel(uint64_t id);

 private:
  void Loop();

  Mutex mu_;
  CondVar cv_;       // an earlier deadline, or stopping
  CondVar done_cv_;  // a callback finished
  std::set<std::pair<Clock::time_point, uint64_t>> order_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::pair<Clock::time_point, std::function<void()>>> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t running_ ABSL_GUARDED_BY(mu_) = 0;  // the id whose callback runs now; 0: none
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_DEADLINE_TIMER_H_
