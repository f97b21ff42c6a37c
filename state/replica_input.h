// The task side of a data-parallel replica's input (jobs/training_job.h,
// "Replicas across tasks"): each task reads its own copy of the job's
// training data under its own data root and cuts its replica's examples
// out of the job's seeded global order itself, so that the master sends no
// tensors per step — only the position of the step's first batch.
//
// TaskDataRoot: the data root of the task a session's kernels run on. The
// worker service (distributed/worker_service.h) puts one into each worker
// session's ResourceMgr (container kTaskContainer, name kDataRootResource);
// a session without one has no data root and its _ReplicaInput fails
// FAILED_PRECONDITION. Immutable.
//
// The _ReplicaInput kernel (the op is in graph/op_defs/runtime_defs.cc) keeps a
// ReplicaInputState per node in its session's ResourceMgr: the dataset,
// loaded on first use and checked against the master's copy (each
// component's dtype and per-example shape, and the number of examples: a
// different copy would silently train on other rows), and an InputPipeline
// positioned after the last step it served. A run at another position (the
// first one, or after a restore) starts a pipeline there, and the later
// iterations of one run (Session RunOptions::iterations: the same step id,
// fed the same position) go on where the last one left off, so that a
// replica's task runs many steps from one message; the order is a
// function of (seed, epoch) alone, so replica r of N gets exactly the rows
// the master would have sent it (NextStepBatches and ReplicaShare of
// state/input_pipeline.h, the functions the master uses for its own).
// Errors name the task's data root and the file. Thread-safe (a mutex per
// state).
#ifndef FLOWSTATE_STATE_REPLICA_INPUT_H_
#define FLOWSTATE_STATE_REPLICA_INPUT_H_

#include <string>

#include "state/resource_mgr.h"

namespace flowstate {

inline constexpr const char* kTaskContainer = "_task";
inline constexpr const char* kDataRootResource = "data_root";

class TaskDataRoot final : public ResourceBase {
 public:
  explicit TaskDataRoot(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }
  std::string DebugString() const override { return "TaskDataRoot " + root_; }

 private:
  const std::string root_;
};

// What a replica's input asks before each step when the job has backup
// replicas: whether the replica is behind (its next step has gone on
// without it already; scheduler/replica_comm.h, ReplicaComm::Behind). Then
// _ReplicaInput gives the step one example of the replica's batch instead of
// the batch, so that the replica catches up (its gradients do not count;
// it applies the contributors' result); the batch's rows are dropped, as a
// dropped replica's are. The replica's collective puts one into its
// session's ResourceMgr (container kTaskContainer, name kReplicaPaceResource);
// without one a replica is never behind. Thread-safe implementations.
inline constexpr const char* kReplicaPaceResource = "replica_pace";

class ReplicaPace : public ResourceBase {
 public:
  virtual StatusOr<bool> Behind() = 0;
};

namespace state {
// Called by RegisterKernels() (state/kernels.h).
void RegisterReplicaInputKernels();
}  // namespace state

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_REPLICA_INPUT_H_
