// Worker: runs the registered partitions of a session's graphs. The master
// (Session) prunes, places and partitions a graph once per signature; it
// registers each partition with the worker of the task that owns the
// partition's device, and runs a step by calling RunGraph with one step id
// on every partition at once. The first error of a step aborts it on every
// worker (AbortStep); once every partition has finished the master calls
// CleanupStep on each worker of the step.
//
// LocalWorker (local_worker.h) is the in-process implementation. A worker
// in another task implements the same interface over RPC (distributed/): it
// ships the call frame's arguments and results and serves its partitions'
// _Recvs from its own RendezvousMgr, and neither the master nor the executor
// changes.
//
// Ownership: the worker owns everything it builds for a registered graph
// (executors, kernels, the states of stateful kernels); the master holds the
// RegisteredGraph handle, valid until it passes it to DeregisterGraph, and
// must deregister every graph before the worker is destroyed. Thread safety:
// every method may be called from many threads at once; any number of steps
// may run at once.
#ifndef FLOWSTATE_SCHEDULER_WORKER_H_
#define FLOWSTATE_SCHEDULER_WORKER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "graph/graph.h"
#include "graph/status.h"

namespace flowstate {

class CallFrame;
class CancellationManager;
class StepTraceCollector;

// One partition: every node of `graph` runs on `device` (a full device name
// of the worker's task).
struct RegisterGraphRequest {
  std::string device;
  GraphDef graph;
  // The master's session (a worker of another task keeps one session per
  // handle: its variables and kernels); ignored by LocalWorker.
  std::string session;
  // The incarnation of the device's task the partition was cut for (its
  // rendezvous keys carry it); a remote worker refuses the graph when it is
  // not its own (the task restarted). 0: not checked.
  uint64_t incarnation = 0;
};

// A registered partition, made by one worker and read only by it; opaque to
// the master.
class RegisteredGraph {
 public:
  virtual ~RegisteredGraph() = default;

 protected:
  RegisteredGraph() = default;
};

struct RunGraphArgs {
  // Unique among the steps that run at once on the worker (StepIdSource).
  int64_t step_id = 0;
  // The step's fed arguments and fetched results, by _Arg/_Retval index;
  // every partition of the step reads and writes its own indices of the
  // one frame (a remote worker ships them). Not owned; outlives the call.
  CallFrame* call_frame = nullptr;
  // The step's trace (scheduler/step_trace.h), or null. LocalWorker's
  // executors record into it; workers of other tasks do not trace yet.
  StepTraceCollector* trace = nullptr;
  // Runs the partition this many times one after another with the same
  // step id and call frame (RunOptions::iterations): the results are the
  // last run's; the first error ends the runs. REQUIRES: >= 1; > 1 only for
  // a partition that exchanges no tensors with others.
  int iterations = 1;
  // The master's cancellation of the step, or null. A local partition run
  // with RunGraphSync (no step entry, so AbortStep cannot reach it) uses
  // it as its kernels' cancellation manager; the master cancels it when it
  // aborts the step. Not owned; outlives the call.
  CancellationManager* cancellation = nullptr;
};

class Worker {
 public:
  using StatusCallback = std::function<void(const Status&)>;

  virtual ~Worker() = default;

  // Builds the partition's kernels and executor. Errors name the node;
  // INVALID_ARGUMENT when the worker has no such device.
  virtual StatusOr<RegisteredGraph*> RegisterGraph(RegisterGraphRequest request) = 0;
  // Frees what RegisterGraph built (stateful kernels keep their state for
  // the session). REQUIRES: no step is running the graph.
  virtual void DeregisterGraph(RegisteredGraph* graph) = 0;
  // Whether a step of the partition may wait or run unbounded
  // (Executor::may_wait): an asynchronous kernel or a loop. A worker that
  // cannot tell (another task's) says true.
  virtual bool MayWait(const RegisteredGraph* graph) const { return true; }

  // Runs one step of a registered partition; `done` is called exactly once,
  // on some thread, when every node of it has finished or the step was
  // aborted. After a step fails or is aborted on this worker, every
  // partition of it that fails reports the step's first error (not the
  // abort it caused in the others).
  virtual void RunGraph(RegisteredGraph* graph, const RunGraphArgs& args,
                        StatusCallback done) = 0;
  // RunGraph, then waits for `done`. The local worker runs a partition that
  // exchanges no tensors without allocating a step entry.
  virtual Status RunGraphSync(RegisteredGraph* graph, const RunGraphArgs& args);

  // Fails the step on this worker now: its pending and future _Recvs and
  // Sends, and its cancellable kernels, see `status`; the step's partitions
  // that fail report it. Idempotent; the first status counts. Other steps
  // are untouched.
  virtual void AbortStep(int64_t step_id, const Status& status) = 0;
  // Forgets the step (its rendezvous, its abort status). Call once the step
  // ended on every worker, after a step whose partitions ran with RunGraph;
  // a no-op for a step the worker does not hold.
  virtual void CleanupStep(int64_t step_id) = 0;

  // The states that stateful kernels keep outside the ResourceMgr, by node
  // name (Session::ExportKernelStates), and their restore (states of nodes
  // not built yet wait for their kernel).
  virtual StatusOr<std::map<std::string, std::string>> ExportKernelStates() = 0;
  virtual Status ImportKernelStates(const std::map<std::string, std::string>& states) = 0;
  // Drops the kernels of stateful nodes and their states (Session::Close).
  virtual void ClearKernelStates() = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_WORKER_H_
