#include "devices/cpu/cpu_device.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/ThreadPool>

#include <algorithm>
#include <thread>

#include "devices/device_factory.h"

namespace flowstate {

struct CpuDevice::Pool {
  explicit Pool(int n) : pool(n) {}
  Eigen::ThreadPool pool;
};

namespace {

int64_t CacheBound(int64_t memory_limit, int64_t cache_bytes) {
  if (cache_bytes >= 0) return cache_bytes;
  int64_t bound = CachingAllocator::kDefaultMaxCachedBytes;
  if (memory_limit > 0) bound = std::min(bound, memory_limit / 4);
  return bound;
}

}  // namespace

CpuDevice::CpuDevice(DeviceName name, int num_threads, int64_t memory_limit,
                     int64_t cache_bytes)
    : Device(name.ToString(), name),
      num_threads_(std::max(1, num_threads)),
      cache_(name.ToString() + "/cache", HostAllocator(), CacheBound(memory_limit, cache_bytes)),
      allocator_(name.ToString(), &cache_, memory_limit) {
  // The calling thread runs one shard itself, so the pool needs n - 1.
  if (num_threads_ > 1) pool_ = std::make_unique<Pool>(num_threads_ - 1);
}

CpuDevice::~CpuDevice() = default;

void CpuDevice::ParallelFor(int64_t n, int64_t cost_per_unit,
                            const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  // About 50k cycles of work per shard pays for the hand-off.
  constexpr int64_t kMinCostPerShard = 50000;
  int64_t total = n * std::max<int64_t>(cost_per_unit, 1);
  int64_t shards = std::min<int64_t>({int64_t(num_threads_), n, total / kMinCostPerShard});
  if (shards <= 1 || pool_ == nullptr) {
    fn(0, n);
    return;
  }
  int64_t block = (n + shards - 1) / shards;
  shards = (n + block - 1) / block;
  Eigen::Barrier barrier(static_cast<unsigned>(shards - 1));
  for (int64_t s = 1; s < shards; ++s) {
    int64_t b = s * block, e = std::min(n, b + block);
    pool_->pool.Schedule([&fn, &barrier, b, e] {
      fn(b, e);
      barrier.Notify();
    });
  }
  fn(0, std::min(n, block));
  barrier.Wait();
}

std::string CpuDevice::Description() const {
  return "CPU, " + std::to_string(num_threads_) + " intra-op thread(s)";
}

namespace {

// num_cpu_devices logical CPUs, each with intra_op_threads threads and the
// options' memory limit and cache bound.
class CpuDeviceFactory final : public DeviceFactory {
 public:
  int DefaultCount(const DevicePoolOptions& o) const override { return o.num_cpu_devices; }
  Status CreateDevices(const DevicePoolOptions& o, const DeviceName& base, int count,
                       std::vector<std::unique_ptr<Device>>* devices) override {
    if (o.intra_op_threads < 0) return InvalidArgument("intra_op_threads must be >= 0");
    int threads = o.intra_op_threads;
    if (threads == 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 0; i < count; ++i) {
      DeviceName n = base;
      n.id = i;
      devices->push_back(
          std::make_unique<CpuDevice>(n, threads, o.cpu_memory_limit_bytes, o.cpu_cache_bytes));
    }
    return Status();
  }
};

}  // namespace

std::unique_ptr<DeviceFactory> internal::NewCpuDeviceFactory() {
  return std::make_unique<CpuDeviceFactory>();
}

}  // namespace flowstate
