// Device: one place kernels run — a logical CPU device with its own
// intra-op thread pool, or an accelerator with its own memory. A Device owns
// its allocator, which tracks the bytes in use and their peak (a CPU
// device's also caches freed blocks for reuse: devices/caching_allocator.h),
// and its DeviceContext, through which tensors move between its memory and
// the host (devices/device_context.h). Each device type registers a factory
// (devices/device_factory.h); the pool creates devices through them.
//
// Devices are created by a DevicePool and live as long as it. All methods
// are thread-safe: kernels of concurrent steps share a device.
#ifndef FLOWSTATE_DEVICES_DEVICE_H_
#define FLOWSTATE_DEVICES_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "devices/device_name.h"
#include "graph/allocator.h"

namespace flowstate {

class DeviceContext;  // devices/device_context.h

// Where the bytes of a tensor live. A host-memory device (CPU) has only
// kHost; an accelerator's kernels read and write kDevice memory, except the
// arguments they declare in host memory (KernelDef::HostMemory: shapes,
// axes, sizes).
enum class MemoryType : uint8_t { kDevice = 0, kHost = 1 };

// Wraps an allocator to count bytes in use, the peak and allocations, and to
// refuse allocations past an optional limit. bytes_in_use is what tensors
// hold (the bytes asked for); Stats() passes on the base's bytes_cached.
// Thread-safe.
class TrackingAllocator final : public Allocator {
 public:
  // `base` must outlive this. bytes_limit 0: no limit.
  TrackingAllocator(std::string name, Allocator* base, int64_t bytes_limit = 0);
  std::string_view Name() const override { return name_; }
  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* ptr, size_t bytes) override;
  AllocatorStats Stats() const override;
  void ResetPeak();

 private:
  std::string name_;
  Allocator* base_;
  int64_t limit_;
  std::atomic<int64_t> in_use_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> count_{0};
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // The full name, e.g. "/job:localhost/replica:0/task:0/device:CPU:0".
  const std::string& name() const { return name_; }
  const DeviceName& parsed_name() const { return parsed_; }
  // The registered device type: "CPU", "GPU", ...
  const std::string& type() const { return parsed_.type; }

  virtual Allocator* allocator() = 0;
  // kHost when this device's tensors live in host memory (the default, for
  // CPU devices); kDevice when they live in memory host code must not touch
  // (an accelerator's), so that crossing to another device type or to a
  // host-memory argument takes a copy through device_context().
  virtual MemoryType memory_type() const { return MemoryType::kHost; }
  // Where this device's kernels allocate the outputs they declare in host
  // memory. The default, right for host-memory devices: allocator().
  virtual Allocator* host_allocator() { return allocator(); }
  // Copies between this device's memory and the host; owned by the device,
  // never null. The default, right for host-memory devices, shares buffers
  // instead of copying (HostDeviceContext).
  virtual DeviceContext* device_context();
  // Threads available to one kernel (the intra-op pool's size).
  virtual int num_threads() const = 0;
  // Runs fn(begin, end) over disjoint ranges covering [0, n), in parallel on
  // the intra-op pool when the work (n * cost_per_unit, roughly in cycles)
  // is large enough to pay for it; returns when all ranges are done.
  virtual void ParallelFor(int64_t n, int64_t cost_per_unit,
                           const std::function<void(int64_t, int64_t)>& fn) = 0;
  // "CPU: 2 threads" etc., for GET /v1/devices.
  virtual std::string Description() const = 0;

 protected:
  Device(std::string name, DeviceName parsed) : name_(std::move(name)), parsed_(std::move(parsed)) {}

 private:
  std::string name_;
  DeviceName parsed_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_DEVICE_H_
