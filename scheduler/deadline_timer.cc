#include "scheduler/deadline_timer.h"

namespace flowstate {

DeadlineTimer::DeadlineTimer() : thread_([this] { Loop(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    MutexLock l(mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  thread_.join();
}

DeadlineTimer& DeadlineTimer::Global() {
  static DeadlineTimer* timer = new DeadlineTimer();
  return *timer;
}

uint64_t DeadlineTimer::Schedule(Clock::time_point deadline, std::function<void()> fn) {
  MutexLock l(mu_);
  const uint64_t id = next_id_++;
  const bool earliest = order_.empty() || deadline < order_.begin()->first;
  order_.emplace(deadline, id);
  pending_.emplace(id, std::make_pair(deadline, std::move(fn)));
  if (earliest) cv_.NotifyOne();
  return id;
}

bool DeadlineTimer::Cancel(uint64_t id) {
  std::function<void()> dropped;  // destroyed outside the lock
  MutexLock l(mu_);
  auto it = pending_.find(id);
  if (it != pending_.end()) {
    order_.erase({it->second.first, id});
    dropped = std::move(it->second.second);
    pending_.erase(it);
    return true;
  }
  while (running_ == id) done_cv_.Wait(mu_);
  return false;
}

void DeadlineTimer::Loop() {
  MutexLock l(mu_);
  while (!stopping_) {
    if (order_.empty()) {
      cv_.Wait(mu_);
      continue;
    }
    const auto [deadline, id] = *order_.begin();
    if (Clock::now() < deadline) {
      cv_.WaitUntil(mu_, deadline);
      continue;
    }
    order_.erase(order_.begin());
    auto it = pending_.find(id);
    std::function<void()> fn = std::move(it->second.second);
    pending_.erase(it);
    running_ = id;
    l.Unlock();
    fn();
    fn = nullptr;
    l.Lock();
    running_ = 0;
    done_cv_.NotifyAll();
  }
}

}  // namespace flowstate
