// How `flowstate serve` and `flowstate worker` become a task of a cluster:
// which spec (ResolveClusterSpec), and the distributed runtime around the
// gRPC server (ClusterRuntime: what goes on the server before it starts,
// what starts once it listens, the view GET /v1/cluster reports).
//
// Precedence, source by source (the first that has a cluster wins):
//   1. the configuration's `cluster` (file, FLOWSTATE_CLUSTER, --cluster),
//      with its `task` (file, FLOWSTATE_TASK_TYPE/_INDEX, --task);
//   2. TF_CONFIG;
//   3. MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (distributed/cluster_spec.h,
//      "MASTER_* rule": the other tasks' addresses come from task 0's
//      registry once the gRPC server listens).
// A `task` in the configuration also overrides the task of 2 and 3, its
// type and its index each when set (index -1: not set): one TF_CONFIG for
// all pods, each pod's index from its own environment (FLOWSTATE_TASK_INDEX).
// With the configuration's own cluster both are required. No cluster
// anywhere: a single process, job "localhost" (a `task` then is an error).
//
// ClusterRuntime is prepared and started by the command's main thread;
// spec() and View() may be called from any thread.
#ifndef FLOWSTATE_CLI_CLUSTER_SETUP_H_
#define FLOWSTATE_CLI_CLUSTER_SETUP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "api/views.h"
#include "config/config.h"
#include "distributed/cluster_spec.h"
#include "graph/mutex.h"
#include "graph/status.h"

namespace flowstate {

class Cluster;
class ClusterRegistry;
class CollectiveStoreService;
class DevicePool;
class ClusterView;
class WorkerService;
struct GrpcServerOptions;

// The cluster this process is a task of (empty: none), checked in full
// before anything starts; INVALID_ARGUMENT naming the field or variable
// ("cluster.worker[1]: duplicate address ...", "TF_CONFIG.task.index: ...",
// "RANK: ..."). `getenv` null: std::getenv.
StatusOr<ClusterSpec> ResolveClusterSpec(const config::ServerConfig& cfg,
                                         const char* (*getenv)(const char*) = nullptr);

class ClusterRuntime {
 public:
  // Before the gRPC server is built: puts the cluster's services on it (the
  // worker service, the collective store; `go`'s builder_hooks; task 0 of a MASTER_* cluster also serves the
  // registry and listens on MASTER_PORT, on cfg.grpc.address's host).
  // REQUIRES: !spec.empty().
  static StatusOr<std::unique_ptr<ClusterRuntime>> Prepare(const ClusterSpec& spec,
                                                           const config::ServerConfig& cfg,
                                                           GrpcServerOptions* go);
  ~ClusterRuntime();

  // Once the gRPC server listens on `grpc_port`: completes the spec (a
  // MASTER_* cluster waits, at most cluster_options.join_timeout_seconds,
  // for every rank to join task 0's registry) and starts the runtime over
  // this task's `devices`. DEADLINE_EXCEEDED naming the missing ranks;
  // CANCELLED soon after `cancel` (may be null) turns true.
  Status Start(int grpc_port, DevicePool* devices, const std::atomic<bool>* cancel = nullptr);

  // The complete spec after Start (before: as given); thread-safe.
  ClusterSpec spec() const;
  // The view of every task for ServiceOptions::cluster; thread-safe (the
  // gRPC server answers GetCluster while Start still waits for the others).
  ClusterInfo View() const;
  // The runtime's other tasks for sessions (ServiceOptions::cluster_view);
  // null until Start succeeded. Thread-safe.
  ClusterView* cluster_view() const;
  // Forgets a membership's keys in this task's collective store
  // (JobManagerOptions::drop_collective_prefix). Thread-safe.
  void DropCollectivePrefix(const std::string& prefix) const;

 private:
  ClusterRuntime() = default;
  mutable Mutex mu_;
  ClusterSpec spec_ ABSL_GUARDED_BY(mu_);
  config::ServerConfig cfg_;
  std::unique_ptr<ClusterRegistry> registry_;  // task 0 of a MASTER_* cluster
  // The worker service is on the gRPC server from Prepare (answering
  // UNAVAILABLE until attached); the cluster exists once Start succeeded.
  // Destroyed in reverse: the cluster outlives the worker service's use of
  // it only because the gRPC server is stopped before the runtime goes.
  std::unique_ptr<Cluster> cluster_;        // set once, by Start
  std::unique_ptr<WorkerService> worker_;
  std::unique_ptr<CollectiveStoreService> collective_store_;
  std::atomic<Cluster*> started_cluster_{nullptr};
};

}  // namespace flowstate

#endif  // FLOWSTATE_CLI_CLUSTER_SETUP_H_
