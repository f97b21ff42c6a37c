// Where a data-parallel job's replicas run: the one rule that both the job
// manager (memberships, placement views, rebuilds) and the training job
// (which replicas it reaches through the cluster) apply. Replica i runs on
// this task when its device (spec.devices[i], or none) is one of this
// task's devices; otherwise on the task its device names. Pure functions.
#ifndef FLOWSTATE_JOBS_REPLICA_PLACEMENT_H_
#define FLOWSTATE_JOBS_REPLICA_PLACEMENT_H_

#include <string>

#include "api/job_spec.h"
#include "devices/device_pool.h"

namespace flowstate {

// The task replica i runs on ("/job:worker/task:2"), or "" when it runs on
// this task (its device is one of `local`'s, or it names none) or its
// device names no task.
std::string ReplicaTaskOf(const JobSpec& spec, int i, const DevicePool& local);

// Whether some replica of `spec` runs on another task.
bool ReplicasAcrossTasks(const JobSpec& spec, const DevicePool& local);

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_REPLICA_PLACEMENT_H_
