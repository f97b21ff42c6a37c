#include "devices/device_pool.h"

#include <thread>

#include "devices/cpu/cpu_device.h"

namespace flowstate {

DevicePool::~DevicePool() = default;

StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(const DevicePoolOptions& o) {
  if (o.num_cpu_devices < 1) return InvalidArgument("num_cpu_devices must be >= 1");
  if (o.intra_op_threads < 0) return InvalidArgument("intra_op_threads must be >= 0");
  int threads = o.intra_op_threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  std::unique_ptr<DevicePool> pool(new DevicePool());
  for (int i = 0; i < o.num_cpu_devices; ++i) {
    DeviceName n;
    n.job = o.job;
    n.replica = 0;
    n.task = o.task;
    n.type = "CPU";
    n.id = i;
    pool->owned_.push_back(std::make_unique<CpuDevice>(n, threads, o.cpu_memory_limit_bytes,
                                                         o.cpu_cache_bytes));
    pool->devices_.push_back(pool->owned_.back().get());
  }
  return pool;
}

std::vector<Device*> DevicePool::Matching(const DeviceName& spec) const {
  std::vector<Device*> out;
  for (Device* d : devices_) {
    if (d->parsed_name().Matches(spec)) out.push_back(d);
  }
  return out;
}

Device* DevicePool::FindByName(std::string_view name) const {
  for (Device* d : devices_) {
    if (d->name() == name) return d;
  }
  return nullptr;
}

}  // namespace flowstate
