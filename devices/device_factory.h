// Device factories: each device type registers one factory under its type
// name ("CPU", "GPU", ...), and DevicePool::Create builds its devices from
// whatever is registered — no #ifdef for device types. The CPU device's
// factory (devices/cpu/cpu_device.cc) is in the registry from its first use;
// other device types call RegisterDeviceFactory from their own registration
// function (a CUDA build's, or a test's), before the pools that should hold
// them are created.
//
// A factory makes the devices of one type for one pool:
// /job:J/replica:0/task:T/device:TYPE:0 .. TYPE:n-1. The registry owns the
// factories and keeps them for the life of the process; registration and
// lookups are thread-safe.
#ifndef FLOWSTATE_DEVICES_DEVICE_FACTORY_H_
#define FLOWSTATE_DEVICES_DEVICE_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/device_name.h"
#include "devices/device_pool.h"
#include "graph/status.h"

namespace flowstate {

class DeviceFactory {
 public:
  virtual ~DeviceFactory() = default;

  // How many devices a pool gets when DevicePoolOptions does not say (e.g.
  // the GPUs present; CPU: num_cpu_devices).
  virtual int DefaultCount(const DevicePoolOptions& options) const = 0;
  // Appends `count` devices to *devices, the i-th named `base` with id i
  // (base holds job, replica, task and type). An error leaves the pool
  // unmade.
  virtual Status CreateDevices(const DevicePoolOptions& options, const DeviceName& base,
                               int count, std::vector<std::unique_ptr<Device>>* devices) = 0;
};

// ALREADY_EXISTS when `type` has a factory; INVALID_ARGUMENT for a null
// factory or a type that is not an upper-case device-type name (letters,
// digits, '_', starting with a letter: device names upper-case their type).
Status RegisterDeviceFactory(const std::string& type, std::unique_ptr<DeviceFactory> factory);
// The factory for `type`, or nullptr.
DeviceFactory* FindDeviceFactory(const std::string& type);
// Every registered type: "CPU" first, then the others in registration order
// (the order of their devices in a pool).
std::vector<std::string> RegisteredDeviceTypes();

namespace internal {
// The CPU device's factory (cpu/cpu_device.cc); the registry installs it.
std::unique_ptr<DeviceFactory> NewCpuDeviceFactory();
}  // namespace internal

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_DEVICE_FACTORY_H_
