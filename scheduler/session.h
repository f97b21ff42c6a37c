// Session: runs steps of one graph, the way clients of the paper's system
// do — Run(feeds, fetches, targets) executes only what the fetches and
// targets need given the feeds.
//
// A Session is the master of its steps. The first Run of a signature
// (feeds, fetches, targets) prunes, places and partitions the graph and
// registers each partition with the Worker of its device's task (worker.h:
// the session's LocalWorker, which builds the executors and owns the
// kernels, for this process's devices; in a cluster, SessionOptions::remote,
// a worker of another task over RPC for that task's devices); later Runs of
// the same signature reuse that executable. A
// step takes one id from the StepIdSource and runs on every partition at
// once; the first error aborts it on every worker. Create() and Extend()
// expand partitioned variables (graph/partitioned_variables.h): the graph
// a session runs holds their parts. Extend() adds nodes
// without invalidating cached executables. Variables and other state live
// in the session's ResourceMgr and are shared by all its steps.
//
// Thread safety: every method may be called from many threads at once; Runs
// execute concurrently (their updates to shared variables may interleave, as
// the paper allows). Close() waits for running steps and refuses new ones.
#ifndef FLOWSTATE_SCHEDULER_SESSION_H_
#define FLOWSTATE_SCHEDULER_SESSION_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "devices/device_pool.h"
#include "graph/attr_value.h"
#include "graph/graph.h"
#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "scheduler/step_id.h"

namespace flowstate {

class CancellationManager;
class LocalWorker;
class ClusterView;
class ResourceMgr;
class StepTraceCollector;
class ThreadPool;
class Worker;

struct SessionOptions {
  // The devices to run on; required, not owned, must outlive the session.
  DevicePool* devices = nullptr;
  // Where unplaced nodes go: a full or partial device spec; "" = the pool's
  // first CPU device.
  std::string default_device;
  // Shared state; when null the session owns a fresh ResourceMgr.
  std::shared_ptr<ResourceMgr> resources;
  // Inter-op pool for expensive ready nodes; when null the session owns one
  // of `inter_op_threads` threads (0: the hardware threads).
  ThreadPool* inter_op_pool = nullptr;
  int inter_op_threads = 0;
  // The most bytes one tensor whose shape is known before the graph runs
  // may have (CheckStaticTensorBytes, below): Create and Extend
  // refuse a graph over it. 0: no limit.
  int64_t max_shape_bytes = 0;
  // Where step ids come from; not owned, must outlive the session. Null:
  // the session's own LocalStepIdSource (1, 2, 3, ...). A master shares one
  // source among its sessions so that ids are unique across the cluster.
  StepIdSource* step_ids = nullptr;
  // The other tasks of a cluster (scheduler/cluster_view.h); not owned,
  // must outlive the session. When set, nodes may be placed on their
  // devices (unplaced nodes still go to default_device, of this task), this
  // task's partitions use its rendezvous manager, step ids come from it
  // unless step_ids is set, and executables are rebuilt when its generation
  // changes or after a step failed UNAVAILABLE. A task that restarted (a
  // new incarnation, seen by the heartbeat or in its answer to RunGraph,
  // whether or not a step failed in between) gets the partitions again —
  // unless the session kept state there (variables, queues), which the
  // restart lost: then every step that would run there fails ABORTED,
  // naming the task and the nodes, until the client recreates the session.
  // Null: this process only.
  ClusterView* remote = nullptr;
};

// What a caller asks of one Run beyond its feeds and fetches.
struct RunOptions {
  // Records every op of the step's partitions on this process's devices
  // (scheduler/step_trace.h); not owned, must outlive the Run. Null: not
  // traced (the default; costs one branch per op).
  StepTraceCollector* trace = nullptr;
  // Runs the step this many times back to back, as one call to the worker
  // that runs it (TensorFlow's iterations_per_loop): the same feeds each
  // time, the fetches of the last. A data-parallel replica on another task
  // runs its own steps so (jobs/training_job.h). The first error ends the
  // runs. INVALID_ARGUMENT when < 1, or > 1 for a step whose nodes are not
  // all on one device.
  int iterations = 1;
  // The step's deadline: a step still running this long after Run began is
  // aborted on every worker with DEADLINE_EXCEEDED; kernels that wait (a
  // queue's dequeue or enqueue, a Recv) end at once. 0: no deadline.
  std::chrono::milliseconds timeout{0};
  // The caller's handle on the step: StartCancel() aborts it with
  // CANCELLED, as the deadline does. Not owned; must outlive the Run.
  // Null: only the deadline and Close() end it early.
  CancellationManager* cancellation = nullptr;
};

struct RunStats {
  int64_t step_id = 0;
  bool cache_hit = false;  // the executable for the signature existed
  int num_partitions = 0;
};

// Refuses a graph that asks for a tensor over `max_bytes` before it runs:
// INVALID_ARGUMENT naming the first node (in topological order) with an
// output whose shape is fully known statically (a Variable's, a Fill's of a
// constant shape, ...) and whose size is over the limit, with the shape, the
// size and the limit; `setting` names where the limit is set. OK when
// max_bytes <= 0.
Status CheckStaticTensorBytes(const Graph& graph, int64_t max_bytes,
                              std::string_view setting = "limits.max_shape_bytes");

class Session {
 public:
  // Validates `graph` (errors name the node; max_shape_bytes). REQUIRES:
  // options.devices.
  static StatusOr<std::unique_ptr<Session>> Create(const GraphDef& graph,
                                                   const SessionOptions& options);
  ~Session();  // Close()s

  // Adds nodes. The whole resulting graph is validated; on error nothing
  // changes.
  Status Extend(const GraphDef& nodes);

  // Feeds are (tensor name, value); fetches are tensor names ("x", "x:1");
  // targets are node names run for their effects. On success `outputs` holds
  // one tensor per fetch, in order. Errors: a fetch, feed or target naming no
  // node (NOT_FOUND); a feed of the wrong dtype or a shape its placeholder
  // does not allow, a needed placeholder not fed (INVALID_ARGUMENT naming
  // it); any kernel's error, naming its node.
  Status Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
             const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
             std::vector<Tensor>* outputs, RunStats* stats = nullptr,
             const RunOptions& options = RunOptions());

  // Whether a Run of this signature may wait or run unbounded: its
  // executable is not built yet (nothing is known of it), runs on another
  // task, or holds an asynchronous kernel (a queue, a Recv, a collective)
  // or a loop (Executor::may_wait). False: the step's length follows its
  // inputs. Feeds by name, as Run takes them. Cheap (one cache look-up).
  bool StepMayWait(const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets) const;

  // Aborts the running steps (CANCELLED with `reason`: a step waiting on a
  // queue ends at once, a loop at its next iteration) and waits for them;
  // afterwards Run and Extend fail with FAILED_PRECONDITION. Idempotent.
  Status Close(const std::string& reason = "the session was closed");

  // The current graph (resolved). Never null.
  std::shared_ptr<const Graph> graph() const;
  ResourceMgr* resource_manager() const { return resources_.get(); }
  const std::shared_ptr<ResourceMgr>& shared_resources() const { return resources_; }
  // Executables cached so far.
  int num_cached_executables() const;

  // The states stateful kernels keep outside the ResourceMgr (the random
  // streams of RandomUniform, Dropout, ...; OpKernel::SaveState), by node
  // name — with the variables, what a checkpoint needs to resume the same
  // run. Only kernels built so far (or imported) have a state. Call between
  // steps.
  StatusOr<std::map<std::string, std::string>> ExportKernelStates() const;
  // Restores them, into kernels built now or later, on this task and on
  // every task of the cluster the session runs partitions on (the
  // ImportKernelStates call of distributed/'s workers). INVALID_ARGUMENT
  // naming the node when it is not a stateful node of the graph or its
  // kernel refuses the state. Call before steps run (a fresh session) or
  // between steps.
  Status ImportKernelStates(const std::map<std::string, std::string>& states);

 private:
  struct Executable;
  struct StepControl;
  struct CallerCancel;
  Session(const SessionOptions& options);
  // Aborts a running step on its workers with `status` (the first reason
  // counts; a finished step is left alone).
  static void AbortRun(StepControl* step, const Status& status);
  StatusOr<std::shared_ptr<Executable>> GetExecutable(const std::vector<std::string>& feeds,
                                                      const std::vector<std::string>& fetches,
                                                      const std::vector<std::string>& targets,
                                                      bool* cache_hit);
  StatusOr<std::shared_ptr<Executable>> BuildExecutable(const Graph& graph,
                                                        const std::vector<std::string>& feeds,
                                                        const std::vector<std::string>& fetches,
                                                        const std::vector<std::string>& targets);
  // The worker of the task that owns `device`: the LocalWorker for this
  // pool's devices, else the session's worker of the device's task.
  StatusOr<Worker*> WorkerFor(const Device* device);
  // Drops the cached executables that run on another task (after a step
  // failed UNAVAILABLE), so that the next Run places and registers again.
  void EvictRemoteExecutables();
  // ABORTED when a task that `placement` puts nodes on restarted since this
  // session kept state there (remote_state_): the message names the task
  // and the lost nodes and tells the client to recreate the session.
  Status CheckRemoteState(const std::vector<Device*>& placement);
  // Records the state-keeping nodes of `g` placed on other tasks, on the
  // incarnation they were registered on.
  void RecordRemoteState(const Graph& g, const std::vector<Device*>& placement);
  // In a cluster, an error of this task's partitions is prefixed with this
  // task's name, as other tasks' errors are with theirs; errors already
  // prefixed ("/job:...") are left alone.
  Status Attribute(const Status& s, const Worker* worker) const;

  SessionOptions options_;
  Device* default_device_ = nullptr;
  std::shared_ptr<ResourceMgr> resources_;
  std::unique_ptr<ThreadPool> owned_pool_;
  ThreadPool* pool_ = nullptr;
  // Runs the partitions of every device here; outlives the cached
  // executables, which deregister their partitions from it.
  std::unique_ptr<LocalWorker> local_worker_;
  // With options_.remote: this session's handle in the cluster and its
  // workers of other tasks, by task name; created on first use, kept until
  // Close (after the executables that use them).
  std::string session_handle_;
  Mutex remote_mu_;
  std::map<std::string, std::unique_ptr<Worker>> remote_workers_ ABSL_GUARDED_BY(remote_mu_);
  // Imported kernel states, for the workers of tasks created later.
  std::map<std::string, std::string> remote_kernel_states_ ABSL_GUARDED_BY(remote_mu_);
  // Per task ("/job:worker/task:2"): the incarnation on which this session
  // registered nodes that keep its state in that task's resources
  // (variables, queues: the ops with a shared_name), and their names. A
  // task that restarted since (another incarnation) lost that state:
  // BuildExecutable fails ABORTED, asking for a new session, instead of
  // registering there again.
  struct RemoteState {
    uint64_t incarnation = 0;
    std::vector<std::string> nodes;
  };
  std::map<std::string, RemoteState> remote_state_ ABSL_GUARDED_BY(remote_mu_);

  mutable Mutex graph_mu_;
  GraphDef graph_def_ ABSL_GUARDED_BY(graph_mu_);
  std::shared_ptr<const Graph> graph_ ABSL_GUARDED_BY(graph_mu_);

  mutable SharedMutex cache_mu_;
  std::unordered_map<std::string, std::shared_ptr<Executable>> cache_ ABSL_GUARDED_BY(cache_mu_);

  LocalStepIdSource own_step_ids_;
  StepIdSource* step_ids_ = nullptr;  // options_.step_ids or &own_step_ids_
  Mutex run_mu_;
  CondVar run_cv_;
  int running_ ABSL_GUARDED_BY(run_mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(run_mu_) = false;
  // The running steps (a list through their StepControls, which live on
  // Run's stack), for Close() to abort.
  StepControl* steps_ ABSL_GUARDED_BY(run_mu_) = nullptr;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_SESSION_H_
