// Registers the kernels of state/ (Variable, Assign*, Scatter*,
// IsVariableInitialized, Save, Restore, _ReplicaInput, the queues and Queue* ops) with KernelRegistry::Global(). Idempotent and
// thread-safe; the runtime calls it before building kernels.
#ifndef FLOWSTATE_STATE_KERNELS_H_
#define FLOWSTATE_STATE_KERNELS_H_

namespace flowstate::state {

void RegisterKernels();

}  // namespace flowstate::state

#endif  // FLOWSTATE_STATE_KERNELS_H_
