// Registers the kernels of _Arg, _Retval, _Send and _Recv (and, through
// state::RegisterKernels, those of state/) with KernelRegistry::Global().
// Idempotent and thread-safe; Session::Create calls it.
#ifndef FLOWSTATE_SCHEDULER_RUNTIME_KERNELS_H_
#define FLOWSTATE_SCHEDULER_RUNTIME_KERNELS_H_

namespace flowstate::scheduler {

void RegisterRuntimeKernels();

}  // namespace flowstate::scheduler

#endif  // FLOWSTATE_SCHEDULER_RUNTIME_KERNELS_H_
