// Registers the kernels of the runtime's ops (_Arg, _Retval, _Send, _Recv,
// _CopyToDevice, _CopyToHost, _HostConst, and the control-flow ops of
// control_flow_kernels.h) with KernelRegistry::Global(), for
// every registered device type (devices/device_factory.h); a type registered
// later gets them on the next call. Idempotent and thread-safe;
// Session::Create calls it.
#ifndef FLOWSTATE_SCHEDULER_RUNTIME_KERNELS_H_
#define FLOWSTATE_SCHEDULER_RUNTIME_KERNELS_H_

namespace flowstate::scheduler {

void RegisterRuntimeKernels();

}  // namespace flowstate::scheduler

#endif  // FLOWSTATE_SCHEDULER_RUNTIME_KERNELS_H_
