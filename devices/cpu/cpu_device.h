// CpuDevice: a logical CPU device with its own intra-op thread pool (an
// Eigen non-blocking pool) and a tracking host allocator with a buffer pool
// (CachingAllocator) between the two. A process may have
// several, e.g. to pin jobs to disjoint thread budgets or to test placement
// across devices. Thread-safe.
#ifndef FLOWSTATE_DEVICES_CPU_CPU_DEVICE_H_
#define FLOWSTATE_DEVICES_CPU_CPU_DEVICE_H_

#include <memory>

#include "devices/caching_allocator.h"
#include "devices/device.h"

namespace flowstate {

class CpuDevice final : public Device {
 public:
  // num_threads >= 1: with 1, ParallelFor runs inline. memory_limit 0: none.
  // cache_bytes bounds the freed blocks kept for reuse (0: none); < 0: the
  // default, CachingAllocator::kDefaultMaxCachedBytes, or a quarter of
  // memory_limit when that is smaller.
  CpuDevice(DeviceName name, int num_threads, int64_t memory_limit,
            int64_t cache_bytes = -1);
  ~CpuDevice() override;

  Allocator* allocator() override { return &allocator_; }
  CachingAllocator* cache() { return &cache_; }
  int num_threads() const override { return num_threads_; }
  void ParallelFor(int64_t n, int64_t cost_per_unit,
                   const std::function<void(int64_t, int64_t)>& fn) override;
  std::string Description() const override;

  struct Pool;  // the Eigen thread pool, hidden from this header
  Pool* pool() const { return pool_.get(); }

 private:
  int num_threads_;
  CachingAllocator cache_;  // before allocator_, which uses it
  TrackingAllocator allocator_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_CPU_CPU_DEVICE_H_
