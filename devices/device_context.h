// DeviceContext: how tensors move between one device's memory and the host.
// The runtime copies only where an edge crosses memory: a _Send on an
// accelerator copies its tensor to the host (the rendezvous only ever holds
// host tensors), a _Recv on an accelerator copies it into the device, and the
// _CopyToDevice/_CopyToHost nodes the partitioner inserts convert between a
// kernel's device-memory and host-memory arguments on one device. CPU→CPU
// edges never touch a DeviceContext.
//
// A Device owns its context (Device::device_context()); one context serves
// every step on that device, so implementations are thread-safe. Copies are
// asynchronous, as a GPU stream's are: `done` runs exactly once, possibly on
// another thread and possibly before the call returns, with the new tensor
// or an error. A host-memory device's context (HostDeviceContext) hands back
// the same tensor: no bytes move.
#ifndef FLOWSTATE_DEVICES_DEVICE_CONTEXT_H_
#define FLOWSTATE_DEVICES_DEVICE_CONTEXT_H_

#include <functional>

#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

class Device;

class DeviceContext {
 public:
  // Receives the copy (uninitialized on error).
  using CopyDone = std::function<void(const Status&, Tensor)>;

  virtual ~DeviceContext() = default;

  // Copies `host` (in host memory) into a new tensor in the device's memory,
  // allocated from the device's allocator(). RESOURCE_EXHAUSTED when it
  // cannot be allocated.
  virtual void CopyHostToDevice(const Tensor& host, CopyDone done) = 0;
  // Copies `on_device` (in the device's memory) into a new host tensor,
  // allocated from the device's host_allocator().
  virtual void CopyDeviceToHost(const Tensor& on_device, CopyDone done) = 0;
};

// The context of host-memory devices: both copies return their argument
// (the buffer is shared). Stateless; one process-wide instance.
class HostDeviceContext final : public DeviceContext {
 public:
  static HostDeviceContext* Get();
  void CopyHostToDevice(const Tensor& host, CopyDone done) override;
  void CopyDeviceToHost(const Tensor& on_device, CopyDone done) override;
};

// Copies `src`, in `from`'s memory, into `to`'s memory: through the host
// when the devices differ and either has its own memory (device → host with
// from's context, host → device with to's), without copying when both are
// host-memory devices or `from == to`.
void CopyTensorBetweenDevices(const Tensor& src, Device* from, Device* to,
                              DeviceContext::CopyDone done);

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_DEVICE_CONTEXT_H_
