#include "tests/devices/accel/accel_device.h"

#include <cstring>
#include <mutex>

#include "devices/device_factory.h"
#include "graph/mutex.h"

namespace flowstate::testing {

void* AccelMemory::Allocate(size_t bytes, size_t alignment) {
  void* p = HostAllocator()->Allocate(bytes, alignment);
  if (p == nullptr) return nullptr;
  MutexLock l(mu_);
  blocks_[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void AccelMemory::Deallocate(void* ptr, size_t bytes) {
  {
    MutexLock l(mu_);
    blocks_.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  HostAllocator()->Deallocate(ptr, bytes);
}

bool AccelMemory::Holds(const void* p) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  MutexLock l(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  return a >= it->first && a < it->first + std::max<size_t>(it->second, 1);
}

namespace {

void Scramble(const void* from, void* to, size_t bytes) {
  const auto* f = static_cast<const uint8_t*>(from);
  auto* t = static_cast<uint8_t*>(to);
  for (size_t i = 0; i < bytes; ++i) t[i] = f[i] ^ kScramble;
}

}  // namespace

void AccelDeviceContext::CopyHostToDevice(const Tensor& host, CopyDone done) {
  device_->h2d_.fetch_add(1);
  if (device_->skip_h2d_.load()) {
    done(Status(), host);
    return;
  }
  if (host.num_elements() > 0 && device_->Holds(host)) {
    done(Internal(device_->name() + ": CopyHostToDevice of a tensor already in device memory"),
         Tensor());
    return;
  }
  StatusOr<Tensor> t = Tensor::Allocate(device_->allocator(), host.dtype(), host.shape());
  if (!t.ok()) {
    done(t.status(), Tensor());
    return;
  }
  Scramble(host.raw_data(), t->raw_data(), host.TotalBytes());
  done(Status(), std::move(t).value());
}

void AccelDeviceContext::CopyDeviceToHost(const Tensor& on_device, CopyDone done) {
  device_->d2h_.fetch_add(1);
  if (device_->skip_d2h_.load()) {
    done(Status(), on_device);
    return;
  }
  if (on_device.num_elements() > 0 && !device_->Holds(on_device)) {
    done(Internal(device_->name() + ": CopyDeviceToHost of a tensor that is not in device memory"),
         Tensor());
    return;
  }
  StatusOr<Tensor> t =
      Tensor::Allocate(device_->host_allocator(), on_device.dtype(), on_device.shape());
  if (!t.ok()) {
    done(t.status(), Tensor());
    return;
  }
  Scramble(on_device.raw_data(), t->raw_data(), on_device.TotalBytes());
  done(Status(), std::move(t).value());
}

AccelDevice::AccelDevice(const DeviceName& name)
    : Device(name.ToString(), name),
      device_allocator_(name.ToString(), &memory_),
      host_allocator_(name.ToString() + "/host", HostAllocator()),
      context_(this) {}

void AccelDevice::ParallelFor(int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
  if (n > 0) fn(0, n);
}

bool AccelDevice::Holds(const Tensor& t) const {
  return t.num_elements() == 0 || memory_.Holds(t.raw_data());
}

void AccelDevice::ResetCounters() {
  h2d_.store(0);
  d2h_.store(0);
  host_inputs_.store(0);
}

std::vector<float> LoadFloats(const Tensor& on_device) {
  std::vector<float> v(size_t(on_device.num_elements()));
  Scramble(on_device.raw_data(), v.data(), on_device.TotalBytes());
  return v;
}

void StoreFloats(const std::vector<float>& values, Tensor* on_device) {
  Scramble(values.data(), on_device->raw_data(), values.size() * sizeof(float));
}

namespace {

class AccelFactory final : public DeviceFactory {
 public:
  int DefaultCount(const DevicePoolOptions&) const override { return 0; }
  Status CreateDevices(const DevicePoolOptions&, const DeviceName& base, int count,
                       std::vector<std::unique_ptr<Device>>* devices) override {
    for (int i = 0; i < count; ++i) {
      DeviceName n = base;
      n.id = i;
      devices->push_back(std::make_unique<AccelDevice>(n));
    }
    return Status();
  }
};

}  // namespace

void RegisterAccelDevice() {
  static std::once_flag once;
  std::call_once(once, [] {
    RegisterDeviceFactory("ACCEL", std::make_unique<AccelFactory>()).CheckOk();
    RegisterAccelKernels(KernelRegistry::Global());
  });
}

}  // namespace flowstate::testing
