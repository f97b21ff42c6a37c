// The kernels of the control-flow ops (graph/op_defs/control_flow_defs.cc):
// Switch, Merge, Enter, Exit, NextIteration, LoopCond and IdentityN. They
// only forward tensors (Switch leaves its untaken output empty, which the
// executor reads as dead); what the ops mean — frames, iterations, dead
// tensors — is the executor's (scheduler/executor.h). StackPush and StackPop
// keep tensors in the step's CallFrame (scheduler/call_frame.h). Registered
// for device type `type` by RegisterRuntimeKernels, once per type; each
// kernel is stateless and thread-safe.
#ifndef FLOWSTATE_SCHEDULER_CONTROL_FLOW_KERNELS_H_
#define FLOWSTATE_SCHEDULER_CONTROL_FLOW_KERNELS_H_

#include <string>

namespace flowstate::scheduler {

void RegisterControlFlowKernels(const std::string& type);

}  // namespace flowstate::scheduler

#endif  // FLOWSTATE_SCHEDULER_CONTROL_FLOW_KERNELS_H_
