// CpuDevice: a logical CPU device with its own intra-op thread pool (an
// Eigen non-blocking pool) and a tracking host allocator. A process may have
// several, e.g. to pin jobs to disjoint thread budgets or to test placement
// across devices. Thread-safe.
#ifndef FLOWSTATE_DEVICES_CPU_CPU_DEVICE_H_
#define FLOWSTATE_DEVICES_CPU_CPU_DEVICE_H_

#include <memory>

#include "devices/device.h"

namespace flowstate {

class CpuDevice final : public Device {
 public:
  // num_threads >= 1: with 1, ParallelFor runs inline. memory_limit 0: none.
  CpuDevice(DeviceName name, int num_threads, int64_t memory_limit);
  ~CpuDevice() override;

  Allocator* allocator() override { return &allocator_; }
  int num_threads() const override { return num_threads_; }
  void ParallelFor(int64_t n, int64_t cost_per_unit,
                   const std::function<void(int64_t, int64_t)>& fn) override;
  std::string Description() const override;

  struct Pool;  // the Eigen thread pool, hidden from this header
  Pool* pool() const { return pool_.get(); }

 private:
  int num_threads_;
  TrackingAllocator allocator_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_CPU_CPU_DEVICE_H_
