#include "scheduler/thread_pool.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/ThreadPool>

#include <algorithm>
#include <thread>

namespace flowstate {

struct ThreadPool::Impl {
  explicit Impl(int n) : pool(n) {}
  Eigen::ThreadPool pool;
};

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  impl_ = std::make_unique<Impl>(num_threads);
}

ThreadPool::~ThreadPool() = default;

void ThreadPool::Schedule(std::function<void()> fn) { impl_->pool.Schedule(std::move(fn)); }

int ThreadPool::NumThreads() const { return impl_->pool.NumThreads(); }

bool ThreadPool::InPool() const { return impl_->pool.CurrentThreadId() >= 0; }

}  // namespace flowstate
