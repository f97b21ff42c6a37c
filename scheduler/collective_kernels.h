// The kernels of data-parallel training (replica_comm.h says how they work
// together): _AllReduce (weights a bucket by the replica's examples and
// hands it to the replica's ReplicaComm), _CreateReplicaComm (joins a task's
// replica to its group: the participant of a replica on another task) and
// _ReplicaCommStats (a replica's all-reduce totals). Registration only.
#ifndef FLOWSTATE_SCHEDULER_COLLECTIVE_KERNELS_H_
#define FLOWSTATE_SCHEDULER_COLLECTIVE_KERNELS_H_

#include <string>

namespace flowstate {

namespace scheduler {
// Registers the _AllReduce kernel for every registered device type (host
// memory tensors). Called by RegisterRuntimeKernels.
void RegisterCollectiveKernels(const std::string& device_type);
}  // namespace scheduler

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_COLLECTIVE_KERNELS_H_
