// Cluster: this task's view of the cluster it belongs to (a ClusterSpec,
// distributed/cluster_spec.h) — the other tasks' state, incarnation and
// devices, learnt by heartbeats (the Worker service's GetStatus, every
// heartbeat_interval_s, each answered within heartbeat_deadline_s or the
// task is UNREACHABLE), and the ClusterView a Session needs to place
// nodes on them and run steps across them (scheduler/cluster_view.h):
// their devices, a GrpcRemoteWorker per (session, task), this task's
// RendezvousMgr (whose rendezvous pull tensors of other tasks with
// RecvTensor) and cluster-unique step ids (random start, then counting).
//
// This task's devices are `devices`, named /job:<self.job>/replica:0/
// task:<self.index>/... (DevicePoolOptions job and task). A task whose
// incarnation or devices change (it restarted) bumps the generation, so that
// sessions rebuild their executables; a step that failed UNAVAILABLE makes
// the next placement ask every task again first.
//
// Thread-safe. The DevicePool must outlive the cluster; the cluster must
// outlive the sessions and the WorkerService that use it. The destructor
// stops the heartbeats.
#ifndef FLOWSTATE_DISTRIBUTED_CLUSTER_H_
#define FLOWSTATE_DISTRIBUTED_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/device_pool.h"
#include "distributed/cluster_spec.h"
#include "graph/status.h"
#include "scheduler/cluster_view.h"

namespace flowstate {

struct ClusterOptions {
  ClusterSpec spec;               // required: spec.self is this task
  DevicePool* devices = nullptr;  // required: this task's devices
  // This task's incarnation; 0: the process's (ProcessIncarnation()). A test
  // that restarts a task in one process gives the new one another.
  uint64_t incarnation = 0;
  double heartbeat_interval_s = 1.0;  // <= 0: no heartbeat thread
  double heartbeat_deadline_s = 2.0;
  // Deadlines: control calls (RegisterGraph, AbortStep, ...) and steps
  // (RunGraph, RecvTensor).
  double rpc_timeout_s = 10.0;
  double step_timeout_s = 3600.0;
  // Process-wide (glibc malloc): blocks up to 32 MiB come from the heap and
  // up to 1 GiB of freed heap is kept, so that gRPC's read buffers (up to
  // 4 MiB each) are reused instead of mapped and faulted in afresh for every
  // read — 10x the RecvTensor throughput of large tensors on loopback. The
  // process keeps more freed memory resident. False: leave malloc alone.
  bool tune_malloc = true;
};

// One device of a task, as its GetStatus reported it.
struct ClusterDeviceInfo {
  std::string name;
  std::string type;
  std::string description;
  bool host_memory = true;
  int64_t memory_limit_bytes = 0;  // 0: no limit
  int64_t bytes_in_use = 0;
};

// One task, for GET /v1/cluster.
struct ClusterTaskInfo {
  enum class State { kUp, kUnreachable };
  TaskId task;
  std::string name;  // "/job:worker/task:1"
  std::string address;
  bool is_self = false;
  State state = State::kUnreachable;
  uint64_t incarnation = 0;  // 0: never heard from
  // Seconds since its last answered heartbeat; < 0: never (this task: 0).
  double seconds_since_heartbeat = -1;
  std::string last_error;  // why the last heartbeat failed
  std::vector<ClusterDeviceInfo> devices;
};

const char* ClusterTaskStateName(ClusterTaskInfo::State s);  // "UP", "UNREACHABLE"

class Cluster final : public ClusterView {
 public:
  // INVALID_ARGUMENT when the spec is empty, spec.self is not in it, or a
  // device of `devices` is not named for spec.self. Starts the heartbeats
  // (the first round runs in the background).
  static StatusOr<std::unique_ptr<Cluster>> Create(const ClusterOptions& options);
  ~Cluster() override;

  const ClusterSpec& spec() const;
  DevicePool* devices() const;
  // Every task (this one included), ordered as ClusterSpec::tasks().
  std::vector<ClusterTaskInfo> Snapshot() const;
  // One round of heartbeats now, waiting for it (at most the deadline).
  void HeartbeatNow();

  // ClusterView.
  std::string local_task() const override;
  std::vector<std::string> Tasks() const override;
  std::string TaskHost(const std::string& task) const override;
  uint64_t local_incarnation() const override;
  std::vector<std::shared_ptr<RemoteDevice>> RemoteDevices(uint64_t* generation) override;
  std::vector<std::string> UnreachableTasks() const override;
  bool TaskUp(const std::string& task, uint64_t* incarnation, std::string* why) const override;
  uint64_t generation() const override;
  StatusOr<std::unique_ptr<Worker>> NewWorker(const std::string& task,
                                              const std::string& session_handle) override;
  RendezvousMgr* rendezvous_mgr() override;
  StepIdSource* step_ids() override;
  void ReportUnavailable() override;

 private:
  class Impl;
  explicit Cluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_CLUSTER_H_
