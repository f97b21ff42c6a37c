// Private to distributed/: the client side of the worker service.
//
// GrpcRemoteWorker: scheduler's Worker (scheduler/worker.h) for one task of
// the cluster, on behalf of one master session, over a stub of that task.
// Every call has a deadline (control calls rpc_timeout_s, RunGraph
// step_timeout_s); a call that fails in transport (the task died, restarted
// or did not answer) gives UNAVAILABLE naming the task; the engine's errors
// of the task come back as the task reported them (prefixed with its name).
// RunGraph ships the call frame's arguments its partition reads (its _Arg
// indices) and writes back the results it produced. CleanupStep is batched:
// the steps to forget ride on the next RunGraph to the task (or go as one
// CleanupStep call once kMaxDeferredCleanups wait), which saves a call per
// task per step; the destructor sends what is left and closes the session
// on the task (best effort, within rpc_timeout_s).
//
// DistributedRendezvous: one step's rendezvous on one task. Sends are kept
// here (a local table) and served to other tasks by the worker service's
// RecvTensor; a Recv whose key's source device is on another task pulls it
// with RecvTensor (async: no thread waits). StartAbort fails the pending
// pulls at once and cancels their calls.
//
// Thread-safe. Calls in flight keep what they need alive: destroying either
// object never waits for the network.
#ifndef FLOWSTATE_DISTRIBUTED_GRPC_WORKER_INTERNAL_H_
#define FLOWSTATE_DISTRIBUTED_GRPC_WORKER_INTERNAL_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "graph/mutex.h"
#include "scheduler/rendezvous.h"
#include "scheduler/thread_pool.h"
#include "scheduler/worker.h"

// gRPC's types are only declared here; grpc_worker.cc and cluster.cc include
// gRPC (which stays inside .cc files).
namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace flowstate::distributed_internal {

// The calls in flight to one task that wait for it (RegisterGraph,
// RunGraph, RecvTensorStream: they wait for a connection rather than fail
// on the first refused connect, so a task that is starting or reconnecting
// is not reported dead). What bounds them is the heartbeat: a round that
// began after a call started and finds the task unreachable cancels the
// call, which then fails UNAVAILABLE naming the task and why. Thread-safe.
class CallTracker {
 public:
  // Registers a call; returns its token (for Remove).
  uint64_t Add(::grpc::ClientContext* ctx);
  // Forgets it; the reason it was cancelled for ("" if it was not).
  std::string Remove(uint64_t token);
  // Where the calls started so far end (for CancelBefore).
  uint64_t Mark();
  // Cancels the calls registered before `mark`, for `reason`.
  void CancelBefore(uint64_t mark, const std::string& reason);

 private:
  Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, ::grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> cancelled_ ABSL_GUARDED_BY(mu_);
};

// The failure of a call tracked as `token`: UNAVAILABLE naming the task and,
// when the heartbeat cancelled it, why.
Status TrackedCallFailed(CallTracker* tracker, uint64_t token, const std::string& task,
                         std::string_view rpc, const ::grpc::Status& s);

// The connection to one task: its channel (the callers make the stubs they
// need on it: the Worker service's, or a generic one for the RecvTensor
// calls whose messages are encoded by hand, tensor_wire_internal.h) and the
// tracker of the calls that wait for it.
struct TaskConnection {
  std::shared_ptr<::grpc::Channel> channel;
  std::shared_ptr<CallTracker> tracker;
};
using ConnectionFor = std::function<TaskConnection(const std::string& task)>;

struct RemoteWorkerOptions {
  std::string task;  // "/job:worker/task:2"
  std::shared_ptr<::grpc::Channel> channel;
  std::shared_ptr<CallTracker> tracker;
  std::string session_handle;
  // This (the master's) task and incarnation, sent with RegisterGraph.
  std::string master_task;
  uint64_t master_incarnation = 0;
  double rpc_timeout_s = 10;
  double step_timeout_s = 3600;
};

std::unique_ptr<Worker> NewGrpcRemoteWorker(RemoteWorkerOptions options);

// `self_task`: this task's name; `connection_for` gives the connection to another task
// (null: not in the cluster).
// The allocator a tensor received for a device lands in (null: the host's).
using AllocatorFor = std::function<Allocator*(std::string_view device)>;
// A pulled tensor is handed to its _Recv on `delivery` (not owned; must
// outlive the rendezvous and the calls in flight), not on gRPC's thread: the
// executor may run the kernels the tensor makes ready on that thread, and
// gRPC's threads must stay free to answer heartbeats.
std::shared_ptr<Rendezvous> NewDistributedRendezvous(int64_t step_id, std::string self_task,
                                                     ConnectionFor connection_for, AllocatorFor allocator_for,
                                                     ThreadPool* delivery, double timeout_s);

}  // namespace flowstate::distributed_internal

#endif  // FLOWSTATE_DISTRIBUTED_GRPC_WORKER_INTERNAL_H_
