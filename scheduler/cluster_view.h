// ClusterView: the master's view of the cluster -- what a Session needs to
// know about the other tasks of a cluster to be their master: their devices
// (for placement), a Worker for each of them (worker.h; over RPC,
// distributed/), the rendezvous manager
// and step ids this task shares with them, and a generation number that
// changes whenever the set of tasks or one's incarnation changes. A session
// without one (SessionOptions::remote null) runs in this process only.
//
// RemoteDevice: a device of another task as placement and partitioning see
// it — its name, type, memory type and its task's incarnation (rendezvous
// keys carry it). Nothing runs on it here: it has no allocator and no
// threads. The incarnation lives on RemoteDevice, not on Device, so that the
// core Device interface (and every kernel built against it) is unchanged;
// this task's devices take ClusterView::local_incarnation().
//
// Implementations (distributed/cluster.h) are thread-safe and outlive the
// sessions that use them. RemoteDevice is immutable.
#ifndef FLOWSTATE_SCHEDULER_CLUSTER_VIEW_H_
#define FLOWSTATE_SCHEDULER_CLUSTER_VIEW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/device.h"
#include "graph/status.h"

namespace flowstate {

class RendezvousMgr;
class StepIdSource;
class Worker;

class RemoteDevice final : public Device {
 public:
  RemoteDevice(std::string name, DeviceName parsed, MemoryType memory, uint64_t incarnation,
               std::string description)
      : Device(std::move(name), std::move(parsed)),
        memory_(memory),
        incarnation_(incarnation),
        description_(std::move(description)) {}

  // The incarnation of the task the device belongs to.
  uint64_t incarnation() const { return incarnation_; }
  // "/job:worker/task:2": the task's name (every device of it has it as
  // prefix, without the replica).
  std::string task() const {
    return "/job:" + parsed_name().job + "/task:" + std::to_string(parsed_name().task);
  }

  Allocator* allocator() override { return nullptr; }
  MemoryType memory_type() const override { return memory_; }
  int num_threads() const override { return 1; }
  void ParallelFor(int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& fn) override {
    if (n > 0) fn(0, n);
  }
  std::string Description() const override { return description_; }

 private:
  MemoryType memory_;
  uint64_t incarnation_;
  std::string description_;
};

class ClusterView {
 public:
  virtual ~ClusterView() = default;

  // This task's name, "/job:worker/task:0".
  virtual std::string local_task() const = 0;
  // Every task of the cluster, this one included, in the cluster spec's
  // order ("/job:worker/task:0", "/job:worker/task:1", ...), whether it
  // answers or not: where a job's replicas go by default. Default: none
  // known (replicas stay in this process).
  virtual std::vector<std::string> Tasks() const { return {}; }
  // The host of `task`'s address in the cluster ("10.0.0.2" of
  // "10.0.0.2:2222", "::1" of "[::1]:2222"), for the listeners other tasks
  // must reach, such as a replica's all-reduce transport; "" when unknown
  // (then those listen on loopback only).
  virtual std::string TaskHost(const std::string& task) const { return ""; }
  // The incarnation of this task's devices.
  virtual uint64_t local_incarnation() const = 0;
  // The devices of the other tasks, as last heard (a task that went away
  // keeps its last devices, so that placement still names it; the call to
  // it then fails UNAVAILABLE). A task marked stale (ReportUnavailable) is
  // asked again first, within the heartbeat deadline. *generation: the
  // generation these devices belong to.
  virtual std::vector<std::shared_ptr<RemoteDevice>> RemoteDevices(uint64_t* generation) = 0;
  // Tasks never heard from, for error messages ("/job:worker/task:3").
  virtual std::vector<std::string> UnreachableTasks() const = 0;
  // Whether `task` ("/job:worker/task:2") answered its last heartbeat; when
  // not, *why (may be null) says what failed. `incarnation` (may be null):
  // the task's as last heard (0: never). A task never probed counts as
  // down. Default (no heartbeats): up.
  virtual bool TaskUp(const std::string& task, uint64_t* incarnation, std::string* why) const {
    return true;
  }
  // Changes when a task's incarnation or devices change; executables built
  // at another generation are rebuilt.
  virtual uint64_t generation() const = 0;
  // A new Worker for `task` ("/job:worker/task:2") on behalf of one master
  // session (`session_handle`, unique in the cluster). The caller owns it;
  // the implementation must outlive it.
  virtual StatusOr<std::unique_ptr<Worker>> NewWorker(const std::string& task,
                                                      const std::string& session_handle) = 0;
  // The rendezvous manager of this task (its worker service serves the
  // _Sends of this task's partitions from it; its rendezvous pull the
  // tensors of other tasks) and the cluster-unique step ids.
  virtual RendezvousMgr* rendezvous_mgr() = 0;
  virtual StepIdSource* step_ids() = 0;
  // A step failed UNAVAILABLE: every task is asked again before the next
  // placement (a restarted task has a new incarnation).
  virtual void ReportUnavailable() = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_CLUSTER_VIEW_H_
