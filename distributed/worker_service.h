// WorkerService: the server side of api/worker.proto's Worker service for
// one task — what the masters of a cluster ask of this task.
//
// Per master session (session_handle) it keeps a worker session: a
// ResourceMgr of its own (the session's variables placed on this task live
// there across steps, beside the task's data root, state/replica_input.h) and a LocalWorker over this task's DevicePool, whose
// steps meet in the task's RendezvousMgr (Cluster::rendezvous_mgr()). The
// RPCs: RegisterGraph (refused, ABORTED, when the master cut the partition
// for another incarnation of this task; the answer names this task's
// incarnation), DeregisterGraph, RunGraph (the call frame's arguments in,
// its results out, by index; every answer carries this task's
// incarnation), RecvTensor (a
// tensor a _Send of this task produced; answered when it is sent or the step
// is aborted, holding no thread while it waits), AbortStep, CleanupStep,
// CloseSession, GetStatus (task, incarnation, devices: the heartbeat) and
// ImportKernelStates (a checkpoint's random streams for a session's kernels
// here).
// DeregisterGraph and RunGraph name the incarnation the graph was
// registered on: another incarnation (the task restarted since) drops
// nothing and runs nothing — RunGraph answers UNAVAILABLE that the task
// restarted, so that the master registers again — even where a graph of
// its own has the same handle.
// The engine's errors travel in the responses, prefixed with this task's
// name; a non-OK gRPC status means the call did not reach a working task.
//
// It is served either on a server of the caller's (RegisterOn, e.g. beside
// the public API on `flowstate serve`'s gRPC port) or on its own (Start).
// Until Attach()ed to its task's Cluster every call fails UNAVAILABLE (so a
// server can pick its port before the cluster's addresses are known).
//
// Thread-safe. Shutdown() (also run by the destructor) fails the running
// steps and answers every pending call UNAVAILABLE, stops the own server and
// waits (bounded) for the partitions to end; a server of the caller's must
// be shut down by the caller before the service is destroyed. The Cluster
// must outlive the service.
#ifndef FLOWSTATE_DISTRIBUTED_WORKER_SERVICE_H_
#define FLOWSTATE_DISTRIBUTED_WORKER_SERVICE_H_

#include <memory>
#include <string>

#include "graph/status.h"

namespace grpc {
class ServerBuilder;
}

namespace flowstate {

class Cluster;

struct WorkerServiceOptions {
  // Inter-op threads shared by the worker sessions; 0: hardware threads.
  int inter_op_threads = 0;
  // A worker session (a master session's variables and kernels on this
  // task) is dropped once its master task restarted, or has been
  // unreachable for this long; <= 0: never (only CloseSession drops it).
  // Checked about once a second, from the cluster's heartbeats.
  double orphan_session_seconds = 60;
  // This task's data root: the replicas of a data-parallel job that run
  // here read their input beneath it (state/replica_input.h); "": none
  // (such a replica fails naming this task).
  std::string data_root;
};

class WorkerService {
 public:
  explicit WorkerService(Cluster* cluster = nullptr, const WorkerServiceOptions& options = {});
  ~WorkerService();
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  // Sets the cluster once (a later call is ignored).
  void Attach(Cluster* cluster);
  // Adds the service to `builder` and sets what it needs server-wide:
  // keepalive pings from clients (every heartbeat interval, also between
  // calls). Tensors cross in 4 MiB chunks (RecvTensorStream) and RunGraph
  // carries none in a cluster session, so the server's message limit only
  // bounds a partition's graph (its constants): leave the host's limit.
  void RegisterOn(::grpc::ServerBuilder* builder);
  // Serves on its own server at host:port (0: a free port; message limits
  // raised to 2 GiB); returns the port.
  StatusOr<int> Start(const std::string& host, int port);
  // See above. Idempotent.
  void Shutdown();

  // Worker sessions held now (for tests).
  int num_sessions() const;
  // Drops the sessions of masters that went away now (see
  // orphan_session_seconds); returns how many. Also done in the background.
  int ReclaimOrphanSessions();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_WORKER_SERVICE_H_
