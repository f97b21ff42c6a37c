#include "devices/device_pool.h"

#include <algorithm>
#include <cctype>

#include "devices/device_factory.h"
#include "graph/mutex.h"

namespace flowstate {
namespace {

struct FactoryRegistry {
  Mutex mu;
  std::vector<std::pair<std::string, std::unique_ptr<DeviceFactory>>> factories ABSL_GUARDED_BY(mu);
};

FactoryRegistry* Factories() {
  // The CPU device's factory is installed on first use; calling into its
  // file from here (rather than from a static initializer there) keeps the
  // linker from dropping it out of the static library.
  static FactoryRegistry* r = [] {
    auto* reg = new FactoryRegistry();
    MutexLock l(reg->mu);
    reg->factories.emplace_back("CPU", internal::NewCpuDeviceFactory());
    return reg;
  }();
  return r;
}

bool ValidTypeName(const std::string& t) {
  if (t.empty() || !std::isupper(static_cast<unsigned char>(t[0]))) return false;
  for (char c : t) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!std::isupper(u) && !std::isdigit(u) && c != '_') return false;
  }
  return true;
}

}  // namespace

Status RegisterDeviceFactory(const std::string& type, std::unique_ptr<DeviceFactory> factory) {
  if (!ValidTypeName(type)) {
    return InvalidArgument("device type '" + type +
                           "' must be upper-case letters, digits and '_', starting with a letter");
  }
  FactoryRegistry* r = Factories();
  MutexLock l(r->mu);
  for (const auto& [t, f] : r->factories) {
    if (t == type) return AlreadyExists("a device factory for " + type + " is already registered");
  }
  if (factory == nullptr) return InvalidArgument("a null device factory for " + type);
  r->factories.emplace_back(type, std::move(factory));
  return Status();
}

DeviceFactory* FindDeviceFactory(const std::string& type) {
  FactoryRegistry* r = Factories();
  MutexLock l(r->mu);
  for (const auto& [t, f] : r->factories) {
    if (t == type) return f.get();
  }
  return nullptr;
}

std::vector<std::string> RegisteredDeviceTypes() {
  FactoryRegistry* r = Factories();
  MutexLock l(r->mu);
  std::vector<std::string> out;
  for (const auto& [t, f] : r->factories) {
    if (t == "CPU") out.insert(out.begin(), t);
    else out.push_back(t);
  }
  return out;
}

DevicePool::~DevicePool() = default;

StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(const DevicePoolOptions& o) {
  std::vector<std::string> types = RegisteredDeviceTypes();
  for (const auto& [type, count] : o.device_counts) {
    if (std::find(types.begin(), types.end(), type) == types.end()) {
      std::string known;
      for (const std::string& t : types) known += (known.empty() ? "" : ", ") + t;
      return InvalidArgument("device type '" + type + "' is not registered (registered: " +
                             known + ")");
    }
    if (count < 0) return InvalidArgument("device count for " + type + " must be >= 0");
  }
  std::unique_ptr<DevicePool> pool(new DevicePool());
  for (const std::string& type : types) {
    DeviceFactory* factory = FindDeviceFactory(type);
    auto it = o.device_counts.find(type);
    int count = it != o.device_counts.end() ? it->second : factory->DefaultCount(o);
    if (type == "CPU" && count < 1) return InvalidArgument("num_cpu_devices must be >= 1");
    if (count == 0) continue;
    DeviceName base;
    base.job = o.job;
    base.replica = 0;
    base.task = o.task;
    base.type = type;
    size_t before = pool->owned_.size();
    FS_RETURN_IF_ERROR(factory->CreateDevices(o, base, count, &pool->owned_));
    if (pool->owned_.size() != before + size_t(count)) {
      return Internal("the " + type + " device factory made " +
                      std::to_string(pool->owned_.size() - before) + " devices, not " +
                      std::to_string(count));
    }
  }
  for (const auto& d : pool->owned_) pool->devices_.push_back(d.get());
  return pool;
}

std::vector<std::string> DevicePool::device_types() const {
  std::vector<std::string> out;
  for (Device* d : devices_) {
    if (std::find(out.begin(), out.end(), d->type()) == out.end()) out.push_back(d->type());
  }
  return out;
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
