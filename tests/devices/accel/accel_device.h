// ACCEL: a test-only accelerator device type, so that CI proves without a
// GPU that placement, host↔device copies and host-memory arguments work
// across device types. Only test binaries link it; RegisterAccelDevice()
// registers its factory ("ACCEL", none by default: a pool gets devices with
// DevicePoolOptions::device_counts) and its kernels.
//
// Its memory is its own: blocks that AccelMemory records (so a test can ask
// whether a tensor is in it) and whose bytes are stored scrambled (XOR
// kScramble), as if host code could not read them. A missing copy is
// therefore caught both ways: an ACCEL kernel refuses an input that is not
// in ACCEL memory (and a host-memory input that is), and a CPU kernel that
// is handed ACCEL memory computes garbage, which the tests' values catch.
// Its DeviceContext copies explicitly and counts the copies.
//
// Thread-safe, like every Device.
#ifndef FLOWSTATE_TESTS_DEVICES_ACCEL_ACCEL_DEVICE_H_
#define FLOWSTATE_TESTS_DEVICES_ACCEL_ACCEL_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/device_context.h"
#include "devices/kernel_registry.h"
#include "graph/mutex.h"

namespace flowstate::testing {

inline constexpr uint8_t kScramble = 0xA5;

// The accelerator's memory: host heap blocks, recorded. Thread-safe.
class AccelMemory final : public Allocator {
 public:
  std::string_view Name() const override { return "accel_memory"; }
  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* ptr, size_t bytes) override;
  // True when `p` points into a live block.
  bool Holds(const void* p) const;

 private:
  mutable Mutex mu_;
  std::map<uintptr_t, size_t> blocks_ ABSL_GUARDED_BY(mu_);  // start -> bytes
};

class AccelDevice;

class AccelDeviceContext final : public DeviceContext {
 public:
  explicit AccelDeviceContext(AccelDevice* device) : device_(device) {}
  void CopyHostToDevice(const Tensor& host, CopyDone done) override;
  void CopyDeviceToHost(const Tensor& on_device, CopyDone done) override;

 private:
  AccelDevice* device_;
};

class AccelDevice final : public Device {
 public:
  explicit AccelDevice(const DeviceName& name);

  Allocator* allocator() override { return &device_allocator_; }
  Allocator* host_allocator() override { return &host_allocator_; }
  MemoryType memory_type() const override { return MemoryType::kDevice; }
  DeviceContext* device_context() override { return &context_; }
  int num_threads() const override { return 1; }
  void ParallelFor(int64_t n, int64_t cost_per_unit,
                   const std::function<void(int64_t, int64_t)>& fn) override;
  std::string Description() const override { return "ACCEL (test-only accelerator)"; }

  // True when `t`'s elements are in this device's memory (an empty tensor
  // counts as anywhere).
  bool Holds(const Tensor& t) const;

  // Copies made by the context since the last ResetCounters().
  int64_t host_to_device_copies() const { return h2d_.load(); }
  int64_t device_to_host_copies() const { return d2h_.load(); }
  // Host-memory inputs that ACCEL kernels found in host memory.
  int64_t host_memory_inputs() const { return host_inputs_.load(); }
  void ResetCounters();
  void CountHostMemoryInput() { host_inputs_.fetch_add(1); }

  // Fault injection: a skipped copy hands back its argument unchanged, as a
  // runtime that forgot the copy would (the copy is still counted).
  void set_skip_copies(bool host_to_device, bool device_to_host) {
    skip_h2d_.store(host_to_device);
    skip_d2h_.store(device_to_host);
  }

 private:
  friend class AccelDeviceContext;
  AccelMemory memory_;
  TrackingAllocator device_allocator_;
  TrackingAllocator host_allocator_;
  AccelDeviceContext context_;
  std::atomic<int64_t> h2d_{0}, d2h_{0}, host_inputs_{0};
  std::atomic<bool> skip_h2d_{false}, skip_d2h_{false};
};

// Device-side loads and stores of an ACCEL tensor's elements (unscrambled).
// REQUIRES: dtype float32.
std::vector<float> LoadFloats(const Tensor& on_device);
void StoreFloats(const std::vector<float>& values, Tensor* on_device);

// Registers the ACCEL device factory and kernels (Identity, Add, Mul,
// MatMul for float32; Reshape with its shape in host memory; Shape with its
// output in host memory). Idempotent; call before creating the pool.
void RegisterAccelDevice();

// internal: accel_kernels.cc
void RegisterAccelKernels(KernelRegistry* registry);

}  // namespace flowstate::testing

#endif  // FLOWSTATE_TESTS_DEVICES_ACCEL_ACCEL_DEVICE_H_
