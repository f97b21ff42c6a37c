// DevicePool: the devices of this process, created once from options and
// shared by every session and job: the CPU devices first, then those of
// every other registered device type (devices/device_factory.h), in
// registration order. Owns its devices; immutable after Create(), so
// thread-safe.
#ifndef FLOWSTATE_DEVICES_DEVICE_POOL_H_
#define FLOWSTATE_DEVICES_DEVICE_POOL_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "devices/device.h"
#include "graph/status.h"

namespace flowstate {

struct DevicePoolOptions {
  // Logical CPU devices, named /job:<job>/replica:0/task:<task>/device:CPU:<i>.
  int num_cpu_devices = 1;
  // Intra-op threads per CPU device; 0: the number of hardware threads.
  int intra_op_threads = 0;
  // Per CPU device; 0: no limit.
  int64_t cpu_memory_limit_bytes = 0;
  // Per CPU device: the most bytes of freed blocks kept for reuse
  // (devices/caching_allocator.h); 0: none; < 0: 256 MiB, or a quarter of
  // cpu_memory_limit_bytes when that is smaller.
  int64_t cpu_cache_bytes = -1;
  std::string job = "localhost";
  int task = 0;
  // Devices per registered type, e.g. {"GPU", 2}; a type left out gets its
  // factory's default (CPU: num_cpu_devices; a test-only type: none). A
  // "CPU" entry overrides num_cpu_devices. INVALID_ARGUMENT for a type that
  // is not registered.
  std::map<std::string, int> device_counts;
};

class DevicePool {
 public:
  static StatusOr<std::unique_ptr<DevicePool>> Create(const DevicePoolOptions& options);
  ~DevicePool();

  const std::vector<Device*>& devices() const { return devices_; }
  // The device types present, in pool order ("CPU" first).
  std::vector<std::string> device_types() const;
  // The first CPU device.
  Device* default_device() const { return devices_.front(); }
  // Devices matching a full or partial spec, in pool order.
  std::vector<Device*> Matching(const DeviceName& spec) const;
  // The device with this exact full name, or nullptr.
  Device* FindByName(std::string_view name) const;

 private:
  DevicePool() = default;
  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<Device*> devices_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_DEVICE_POOL_H_
