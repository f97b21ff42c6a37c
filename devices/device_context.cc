#include "devices/device_context.h"

#include <utility>

#include "devices/device.h"

namespace flowstate {

HostDeviceContext* HostDeviceContext::Get() {
  static HostDeviceContext* c = new HostDeviceContext();
  return c;
}

void HostDeviceContext::CopyHostToDevice(const Tensor& host, CopyDone done) {
  done(Status(), host);
}

void HostDeviceContext::CopyDeviceToHost(const Tensor& on_device, CopyDone done) {
  done(Status(), on_device);
}

DeviceContext* Device::device_context() { return HostDeviceContext::Get(); }

void CopyTensorBetweenDevices(const Tensor& src, Device* from, Device* to,
                              DeviceContext::CopyDone done) {
  if (from == to) {
    done(Status(), src);
    return;
  }
  auto to_device = [to, done = std::move(done)](const Status& s, Tensor host) {
    if (!s.ok()) {
      done(s, Tensor());
    } else if (to->memory_type() == MemoryType::kHost) {
      done(Status(), std::move(host));
    } else {
      to->device_context()->CopyHostToDevice(host, done);
    }
  };
  if (from->memory_type() == MemoryType::kHost) {
    to_device(Status(), src);
  } else {
    from->device_context()->CopyDeviceToHost(src, std::move(to_device));
  }
}

}  // namespace flowstate
