#include "server/step_threads.h"

#include <utility>

namespace flowstate {

StepThreads::StepThreads(const Options& options) : options_(options) {}

StepThreads::~StepThreads() { Stop(); }

bool StepThreads::Schedule(std::function<void()> fn) {
  std::vector<std::thread> ended;  // joined outside the lock
  {
    MutexLock l(mu_);
    if (stopped_) return false;
    for (std::thread::id id : finished_) {
      auto it = threads_.find(id);
      ended.push_back(std::move(it->second));
      threads_.erase(it);
    }
    finished_.clear();
    queue_.push_back(std::move(fn));
    if (idle_ >= int(queue_.size())) {
      cv_.NotifyOne();
    } else if (int(threads_.size()) < options_.max_threads) {
      std::thread t([this] { Loop(); });
      std::thread::id id = t.get_id();
      threads_.emplace(id, std::move(t));
    }
    // Else at the cap: the next thread that finishes takes it.
  }
  for (std::thread& t : ended) t.join();
  return true;
}

void StepThreads::Loop() {
  MutexLock l(mu_);
  for (;;) {
    if (!queue_.empty()) {
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      l.Unlock();
      fn();
      fn = nullptr;  // its captures go before the lock is taken again
      l.Lock();
      continue;
    }
    if (stopped_) return;
    ++idle_;
    const bool woken = cv_.WaitFor(mu_, options_.idle_timeout);
    --idle_;
    if (!woken && queue_.empty() && !stopped_ && idle_ >= options_.keep_idle) {
      // Idle past the timeout while enough others wait: this one ends.
      finished_.push_back(std::this_thread::get_id());
      return;
    }
  }
}

void StepThreads::Stop() {
  std::map<std::thread::id, std::thread> threads;
  {
    MutexLock l(mu_);
    if (stopped_ && threads_.empty()) return;
    stopped_ = true;
    cv_.NotifyAll();
    threads.swap(threads_);
    finished_.clear();
  }
  for (auto& [id, t] : threads) t.join();
}

int StepThreads::num_threads() const {
  MutexLock l(mu_);
  return int(threads_.size() - finished_.size());
}

int StepThreads::num_busy() const {
  MutexLock l(mu_);
  return int(threads_.size() - finished_.size()) - idle_;
}

}  // namespace flowstate
