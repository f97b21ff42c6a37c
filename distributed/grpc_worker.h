// Private to distributed/: the client side of the worker service.
//
// GrpcRemoteWorker: scheduler's Worker (scheduler/worker.h) for one task of
// the cluster, on behalf of one master session, over a stub of that task.
// Every call has a deadline (control calls rpc_timeout_s, RunGraph
// step_timeout_s); a call that fails in transport (the task died, restarted
// or did not answer) gives UNAVAILABLE naming the task; the engine's errors
// of the task come back as the task reported them (prefixed with its name).
// RunGraph ships the call frame's arguments its partition reads (its _Arg
// indices) and writes back the results it produced. The destructor closes
// the session on the task (best effort, within rpc_timeout_s).
//
// DistributedRendezvous: one step's rendezvous on one task. Sends are kept
// here (a local table) and served to other tasks by the worker service's
// RecvTensor; a Recv whose key's source device is on another task pulls it
// with RecvTensor (async: no thread waits). StartAbort fails the pending
// pulls at once and cancels their calls.
//
// Thread-safe. Calls in flight keep what they need alive: destroying either
// object never waits for the network.
#ifndef FLOWSTATE_DISTRIBUTED_GRPC_WORKER_H_
#define FLOWSTATE_DISTRIBUTED_GRPC_WORKER_H_

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/generic/generic_stub.h>

#include "distributed/wire.h"
#include "scheduler/rendezvous.h"
#include "scheduler/worker.h"

namespace flowstate::distributed_internal {

// The stubs of one task: the Worker service's, and a generic one for the
// RecvTensor calls whose messages are encoded by hand (tensor_wire.h).
struct TaskStubs {
  std::shared_ptr<wpb::Worker::Stub> worker;
  std::shared_ptr<::grpc::GenericStub> generic;
};
using StubFor = std::function<TaskStubs(const std::string& task)>;

struct RemoteWorkerOptions {
  std::string task;  // "/job:worker/task:2"
  std::shared_ptr<wpb::Worker::Stub> stub;
  std::string session_handle;
  double rpc_timeout_s = 10;
  double step_timeout_s = 3600;
};

std::unique_ptr<Worker> NewGrpcRemoteWorker(RemoteWorkerOptions options);

// `self_task`: this task's name; `stub_for` gives the stub of another task
// (null: not in the cluster).
std::shared_ptr<Rendezvous> NewDistributedRendezvous(int64_t step_id, std::string self_task,
                                                     StubFor stub_for, double timeout_s);

}  // namespace flowstate::distributed_internal

#endif  // FLOWSTATE_DISTRIBUTED_GRPC_WORKER_H_
