#include "devices/device.h"

namespace flowstate {

TrackingAllocator::TrackingAllocator(std::string name, Allocator* base, int64_t bytes_limit)
    : name_(std::move(name)), base_(base), limit_(bytes_limit) {}

void* TrackingAllocator::Allocate(size_t bytes, size_t alignment) {
  int64_t now = in_use_.fetch_add(int64_t(bytes), std::memory_order_relaxed) + int64_t(bytes);
  if (limit_ > 0 && now > limit_) {
    in_use_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
    return nullptr;
  }
  void* p = base_->Allocate(bytes, alignment);
  if (p == nullptr) {
    in_use_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
    return nullptr;
  }
  count_.fetch_add(1, std::memory_order_relaxed);
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void TrackingAllocator::Deallocate(void* ptr, size_t bytes) {
  base_->Deallocate(ptr, bytes);
  in_use_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
}

AllocatorStats TrackingAllocator::Stats() const {
  AllocatorStats s;
  s.bytes_in_use = in_use_.load(std::memory_order_relaxed);
  s.peak_bytes_in_use = peak_.load(std::memory_order_relaxed);
  s.num_allocs = count_.load(std::memory_order_relaxed);
  s.bytes_limit = limit_;
  s.bytes_cached = base_->Stats().bytes_cached;
  return s;
}

void TrackingAllocator::ResetPeak() {
  peak_.store(in_use_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace flowstate
