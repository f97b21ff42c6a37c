#include "scheduler/session.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>

#include "devices/op_kernel.h"
#include "graph/partitioned_variables.h"
#include "graph/subgraph.h"
#include "scheduler/call_frame.h"
#include "scheduler/local_worker.h"
#include "scheduler/placement.h"
#include "scheduler/cluster_view.h"
#include "scheduler/deadline_timer.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/thread_pool.h"
#include "state/kernels.h"
#include "state/resource_mgr.h"
#include "graph/mutex.h"

namespace flowstate {

// What the master keeps per signature: the feeds' checks and, per
// partition, the worker that holds it and its handle there.
struct Session::Executable {
  std::vector<DataType> feed_types;
  std::vector<PartialShape> feed_shapes;
  int num_fetches = 0;
  struct Part {
    Worker* worker;
    RegisteredGraph* graph;
  };
  std::vector<Part> parts;
  std::vector<Worker*> workers;  // distinct, in order of first part
  // With SessionOptions::remote: the generation it was built at, and
  // whether a partition runs on another task.
  uint64_t generation = 0;
  bool remote = false;
  // A step of it may wait or run unbounded (Worker::MayWait of a part).
  bool may_wait = false;

  ~Executable() {
    for (const Part& p : parts) p.worker->DeregisterGraph(p.graph);
  }
};

// One running step, as Close(), the deadline and the caller's cancellation
// see it: the step id and workers once it starts, why it was aborted, and
// the cancellation manager of a partition run synchronously. It lives on
// Run's stack (a step allocates nothing for it) in the session's list of
// running steps.
struct Session::StepControl {
  Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;           // step and workers are set
  bool finished ABSL_GUARDED_BY(mu) = false;          // no abort reaches the workers any more
  Status abort ABSL_GUARDED_BY(mu);                   // the first reason
  int64_t step ABSL_GUARDED_BY(mu) = 0;
  const std::vector<Worker*>* workers ABSL_GUARDED_BY(mu) = nullptr;  // the executable's
  CancellationManager sync_cancel;  // RunGraphArgs::cancellation of a RunGraphSync
  StepControl* prev = nullptr;  // guarded by Session::run_mu_: the running steps
  StepControl* next = nullptr;  // guarded by Session::run_mu_
};

// What the caller's cancellation callback reaches: the step while Run runs
// it, null after (the callback may run late, once Deregister failed).
struct Session::CallerCancel {
  Mutex mu;
  StepControl* step ABSL_GUARDED_BY(mu) = nullptr;
};

void Session::AbortRun(StepControl* c, const Status& status) {
  // Held while the workers are told, so that Run's `finished` (set before
  // CleanupStep) waits for it: no abort reaches a worker after the cleanup.
  MutexLock l(c->mu);
  if (c->finished || !c->abort.ok()) return;
  c->abort = status;
  if (!c->started) return;  // Run sees `abort` before it starts the step
  for (Worker* w : *c->workers) w->AbortStep(c->step, status);
  c->sync_cancel.StartCancel();
}

Status Session::Attribute(const Status& s, const Worker* worker) const {
  if (s.ok() || options_.remote == nullptr || worker != local_worker_.get()) return s;
  if (s.message().rfind("/job:", 0) == 0) return s;  // attributed where it happened
  return Status(s.code(), options_.remote->local_task() + ": " + s.message(), s.node());
}

Session::Session(const SessionOptions& options)
    : options_(options),
      step_ids_(options.step_ids != nullptr ? options.step_ids : &own_step_ids_) {}

Session::~Session() { Close().CheckOk(); }

StatusOr<std::unique_ptr<Session>> Session::Create(const GraphDef& graph,
                                                   const SessionOptions& options) {
  if (options.devices == nullptr) return InvalidArgument("SessionOptions.devices is required");
  scheduler::RegisterRuntimeKernels();
  state::RegisterKernels();
  std::unique_ptr<Session> s(new Session(options));
  if (options.default_device.empty()) {
    s->default_device_ = options.devices->default_device();
  } else {
    FS_ASSIGN_OR_RETURN(DeviceName spec, DeviceName::Parse(options.default_device));
    std::vector<Device*> m = options.devices->Matching(spec);
    if (m.empty()) {
      return InvalidArgument("default device '" + options.default_device +
                             "' matches no device of this server");
    }
    s->default_device_ = m.front();
  }
  s->resources_ = options.resources ? options.resources : std::make_shared<ResourceMgr>();
  if (options.inter_op_pool != nullptr) {
    s->pool_ = options.inter_op_pool;
  } else {
    s->owned_pool_ = std::make_unique<ThreadPool>(options.inter_op_threads);
    s->pool_ = s->owned_pool_.get();
  }
  if (options.remote != nullptr) {
    if (options.step_ids == nullptr) s->step_ids_ = options.remote->step_ids();
    std::random_device rd;
    char handle[40];
    std::snprintf(handle, sizeof(handle), "session-%08x%08x%08x", rd(), rd(), rd());
    s->session_handle_ = handle;
  }
  LocalWorkerOptions w;
  w.devices = options.devices;
  if (options.remote != nullptr) w.rendezvous_mgr = options.remote->rendezvous_mgr();
  w.resources = s->resources_.get();
  w.inter_op_pool = s->pool_;
  s->local_worker_ = std::make_unique<LocalWorker>(w);
  FS_ASSIGN_OR_RETURN(GraphDef expanded, ExpandPartitionedVariables(graph));
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(expanded));
  FS_RETURN_IF_ERROR(CheckStaticTensorBytes(g, options.max_shape_bytes));
  {
    MutexLock l(s->graph_mu_);
    s->graph_def_ = std::move(expanded);
    s->graph_ = std::make_shared<const Graph>(std::move(g));
  }
  return s;
}

Status Session::Extend(const GraphDef& nodes) {
  {
    MutexLock l(run_mu_);
    if (closed_) return FailedPrecondition("the session is closed");
  }
  MutexLock l(graph_mu_);
  GraphDef combined = graph_def_;
  combined.nodes.insert(combined.nodes.end(), nodes.nodes.begin(), nodes.nodes.end());
  FS_ASSIGN_OR_RETURN(combined, ExpandPartitionedVariables(combined));
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(combined));
  FS_RETURN_IF_ERROR(CheckStaticTensorBytes(g, options_.max_shape_bytes));
  graph_def_ = std::move(combined);
  graph_ = std::make_shared<const Graph>(std::move(g));
  return Status();
}

std::shared_ptr<const Graph> Session::graph() const {
  MutexLock l(graph_mu_);
  return graph_;
}

int Session::num_cached_executables() const {
  ReaderMutexLock l(cache_mu_);
  return int(cache_.size());
}

StatusOr<std::shared_ptr<Session::Executable>> Session::BuildExecutable(
    const Graph& graph, const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches, const std::vector<std::string>& targets) {
  FS_ASSIGN_OR_RETURN(PrunedGraph pruned, PruneForSignature(graph, {feeds, fetches, targets}));
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(pruned.graph));
  ClusterView* remote = options_.remote;
  uint64_t generation = 0;  // of the remote devices placed on
  std::vector<std::shared_ptr<RemoteDevice>> remote_devices;  // alive while we build
  StatusOr<std::vector<Device*>> placed = [&]() -> StatusOr<std::vector<Device*>> {
    if (remote == nullptr) return PlaceGraph(g, *options_.devices, default_device_);
    remote_devices = remote->RemoteDevices(&generation);
    std::vector<Device*> all = options_.devices->devices();
    for (const auto& d : remote_devices) all.push_back(d.get());
    StatusOr<std::vector<Device*>> p = PlaceGraph(g, all, default_device_, "the cluster");
    std::vector<std::string> unreachable = remote->UnreachableTasks();
    if (!p.ok() && p.status().code() == Code::kInvalidArgument && !unreachable.empty()) {
      std::string names;
      for (const std::string& t : unreachable) names += (names.empty() ? "" : ", ") + t;
      return Status(p.status().code(),
                    p.status().message() + " (not reached yet, devices unknown: " + names + ")",
                    p.status().node());
    }
    return p;
  }();
  FS_ASSIGN_OR_RETURN(std::vector<Device*> placement, std::move(placed));
  if (remote != nullptr) {
    // Fed and fetched tensors of other tasks cross as _Send/_Recv pairs to
    // this task (RecvTensor streams them, any size, without copies), not in
    // the RunGraph messages: the call frame's _Args and _Retvals run here.
    for (int i = 0; i < g.num_nodes(); ++i) {
      const std::string& op = g.node(i).op();
      if ((op == "_Arg" || op == "_Retval") && dynamic_cast<RemoteDevice*>(placement[i])) {
        placement[i] = default_device_;
      }
    }
  }
  if (remote != nullptr) FS_RETURN_IF_ERROR(CheckRemoteState(placement));
  FS_ASSIGN_OR_RETURN(std::vector<GraphPartition> parts,
                      PartitionGraph(g, placement, remote ? remote->local_incarnation() : 0));
  auto exe = std::make_shared<Executable>();
  exe->generation = generation;
  exe->feed_types = std::move(pruned.feed_types);
  exe->feed_shapes = std::move(pruned.feed_shapes);
  exe->num_fetches = int(fetches.size());
  for (GraphPartition& p : parts) {
    StatusOr<Worker*> w = WorkerFor(p.device);
    if (!w.ok()) {
      if (remote != nullptr) remote->ReportUnavailable();
      return w.status();
    }
    Worker* worker = *w;
    RegisterGraphRequest request;
    request.device = p.device->name();
    request.graph = std::move(p.graph);
    request.session = session_handle_;
    if (const auto* rd = dynamic_cast<const RemoteDevice*>(p.device)) {
      request.incarnation = rd->incarnation();
      exe->remote = true;
    }
    StatusOr<RegisteredGraph*> registered = worker->RegisterGraph(std::move(request));
    if (!registered.ok()) {
      // A task that went away or restarted: ask every task again next time.
      const Code c = registered.status().code();
      if (remote != nullptr && (c == Code::kUnavailable || c == Code::kAborted)) {
        remote->ReportUnavailable();
      }
      return registered.status();
    }
    RegisteredGraph* handle = *registered;
    exe->parts.push_back({worker, handle});
    if (worker->MayWait(handle)) exe->may_wait = true;
    if (std::find(exe->workers.begin(), exe->workers.end(), worker) == exe->workers.end()) {
      exe->workers.push_back(worker);
    }
  }
  if (remote != nullptr) RecordRemoteState(g, placement);
  return exe;
}

namespace {

// Whether `n` keeps the session's state in its task's resources across
// steps: a stateful op with a shared_name (Variable, the queues). Kernels
// that only keep a random stream, or state within a step, do not count.
bool KeepsSessionState(const Node& n) {
  return n.is_stateful() && n.op_def().FindAttr("shared_name") != nullptr;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Status Session::CheckRemoteState(const std::vector<Device*>& placement) {
  std::map<std::string, uint64_t> now;  // task -> the incarnation placed on
  for (const Device* d : placement) {
    if (const auto* rd = dynamic_cast<const RemoteDevice*>(d)) now.emplace(rd->task(), rd->incarnation());
  }
  MutexLock l(remote_mu_);
  for (const auto& [task, incarnation] : now) {
    auto it = remote_state_.find(task);
    if (it == remote_state_.end() || it->second.incarnation == incarnation) continue;
    const std::vector<std::string>& nodes = it->second.nodes;
    std::string names;
    for (size_t i = 0; i < nodes.size() && i < 5; ++i) names += (i ? ", '" : "'") + nodes[i] + "'";
    if (nodes.size() > 5) names += " and " + std::to_string(nodes.size() - 5) + " more";
    return Aborted(task + " restarted (incarnation " + Hex(incarnation) + ", was " +
                   Hex(it->second.incarnation) + "): the state this session kept there is lost (" +
                   names + "); recreate the session (and restore its variables, e.g. from a "
                   "checkpoint) to run on it again");
  }
  return Status();
}

void Session::RecordRemoteState(const Graph& g, const std::vector<Device*>& placement) {
  MutexLock l(remote_mu_);
  for (int i = 0; i < g.num_nodes(); ++i) {
    const auto* rd = dynamic_cast<const RemoteDevice*>(placement[i]);
    if (rd == nullptr || !KeepsSessionState(g.node(i))) continue;
    RemoteState& st = remote_state_[rd->task()];
    if (st.incarnation == 0) st.incarnation = rd->incarnation();
    if (st.incarnation != rd->incarnation()) continue;  // CheckRemoteState refused it first
    if (std::find(st.nodes.begin(), st.nodes.end(), g.node(i).name()) == st.nodes.end()) {
      st.nodes.push_back(g.node(i).name());
    }
  }
}

StatusOr<Worker*> Session::WorkerFor(const Device* device) {
  const auto* rd = dynamic_cast<const RemoteDevice*>(device);
  if (rd == nullptr) return local_worker_.get();
  if (options_.remote == nullptr) {
    return Internal("device '" + device->name() + "' is on another task, and the session has no cluster");
  }
  const std::string task = rd->task();
  MutexLock l(remote_mu_);
  auto it = remote_workers_.find(task);
  if (it != remote_workers_.end()) return it->second.get();
  FS_ASSIGN_OR_RETURN(std::unique_ptr<Worker> w, options_.remote->NewWorker(task, session_handle_));
  // Kernel states imported before this task ran anything: its kernels
  // take theirs as they are built.
  FS_RETURN_IF_ERROR(w->ImportKernelStates(remote_kernel_states_));
  Worker* raw = w.get();
  remote_workers_.emplace(task, std::move(w));
  return raw;
}

void Session::EvictRemoteExecutables() {
  std::vector<std::shared_ptr<Executable>> evicted;  // deregistered outside the lock
  WriterMutexLock l(cache_mu_);
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (it->second->remote) {
      evicted.push_back(std::move(it->second));
      it = cache_.erase(it);
    } else {
      ++it;
    }
  }
}

namespace {

// The cache key of a signature.
std::string SignatureKey(const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  std::string key;
  for (const auto& f : feeds) (key += f) += '\x1f';
  key += '\x1e';
  for (const auto& f : fetches) (key += f) += '\x1f';
  key += '\x1e';
  for (const auto& t : targets) (key += t) += '\x1f';
  return key;
}

}  // namespace

bool Session::StepMayWait(const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                          const std::vector<std::string>& targets) const {
  const std::string key = SignatureKey(feeds, fetches, targets);
  ReaderMutexLock l(cache_mu_);
  auto it = cache_.find(key);
  return it == cache_.end() || it->second->may_wait;
}

StatusOr<std::shared_ptr<Session::Executable>> Session::GetExecutable(
    const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, bool* cache_hit) {
  const std::string key = SignatureKey(feeds, fetches, targets);
  {
    ReaderMutexLock l(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() &&
        (options_.remote == nullptr || it->second->generation == options_.remote->generation())) {
      *cache_hit = true;
      return it->second;
    }
  }
  *cache_hit = false;
  FS_ASSIGN_OR_RETURN(std::shared_ptr<Executable> exe,
                      BuildExecutable(*graph(), feeds, fetches, targets));
  std::shared_ptr<Executable> replaced;  // released outside the lock
  WriterMutexLock l(cache_mu_);
  auto [it, inserted] = cache_.emplace(key, exe);
  if (!inserted && it->second->generation < exe->generation) {
    replaced = std::move(it->second);  // built at an older generation
    it->second = exe;
  }
  return it->second;  // another thread may have won the race: use its
}

Status Session::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                    const std::vector<std::string>& fetches,
                    const std::vector<std::string>& targets, std::vector<Tensor>* outputs,
                    RunStats* stats, const RunOptions& options) {
  StepControl control_storage;
  StepControl* const control = &control_storage;
  {
    MutexLock l(run_mu_);
    if (closed_) return FailedPrecondition("the session is closed");
    ++running_;
    control->next = steps_;
    if (steps_ != nullptr) steps_->prev = control;
    steps_ = control;
  }
  struct Leave {
    Session* s;
    StepControl* control;
    ~Leave() {
      MutexLock l(s->run_mu_);
      (control->prev != nullptr ? control->prev->next : s->steps_) = control->next;
      if (control->next != nullptr) control->next->prev = control->prev;
      if (--s->running_ == 0) s->run_cv_.NotifyAll();
    }
  } leave{this, control};
  // The caller's cancellation: its callback reaches the step through a
  // CallerCancel that Run empties before it returns.
  std::shared_ptr<CallerCancel> caller;
  CancellationManager::Token caller_token = CancellationManager::kInvalidToken;
  if (options.cancellation != nullptr) {
    caller = std::make_shared<CallerCancel>();
    {
      MutexLock l(caller->mu);
      caller->step = control;
    }
    caller_token = options.cancellation->Register([caller] {
      MutexLock l(caller->mu);
      if (caller->step != nullptr) {
        AbortRun(caller->step, Cancelled("the step was cancelled by its caller"));
      }
    });
    if (caller_token == CancellationManager::kInvalidToken) {
      return Cancelled("the step was cancelled by its caller");
    }
  }
  struct Deregister {
    CancellationManager* cancellation;
    CancellationManager::Token token;
    CallerCancel* caller;
    ~Deregister() {
      if (caller == nullptr) return;
      cancellation->Deregister(token);
      MutexLock l(caller->mu);  // waits for a callback running now
      caller->step = nullptr;
    }
  } deregister{options.cancellation, caller_token, caller.get()};
  const bool timed = options.timeout.count() > 0;
  const auto deadline =
      timed ? std::chrono::steady_clock::now() + options.timeout : std::chrono::steady_clock::time_point();
  const auto deadline_error = [&] {
    return DeadlineExceeded("the step ran past its deadline of " +
                            std::to_string(options.timeout.count()) + " ms");
  };
  // The deadline fires on the timer's thread: the step's own threads may
  // be busy with its nodes (this one runs a loop of cheap nodes inline and
  // would never come back to look at the clock). Cancelled before Run
  // returns, waiting for a callback under way: `control` lives on this stack.
  struct CancelTimer {
    uint64_t id = 0;
    ~CancelTimer() {
      if (id != 0) DeadlineTimer::Global().Cancel(id);
    }
  } timer;
  if (timed) {
    timer.id = DeadlineTimer::Global().Schedule(
        deadline, [control, error = deadline_error()] { AbortRun(control, error); });
  }

  std::vector<std::string> feed_names;
  feed_names.reserve(feeds.size());
  for (const auto& [name, t] : feeds) feed_names.push_back(name);
  bool hit = false;
  FS_ASSIGN_OR_RETURN(std::shared_ptr<Executable> exe,
                      GetExecutable(feed_names, fetches, targets, &hit));

  std::vector<Tensor> args;
  args.reserve(feeds.size());
  for (size_t i = 0; i < feeds.size(); ++i) {
    const Tensor& t = feeds[i].second;
    if (!t.IsInitialized()) {
      return InvalidArgument("feed '" + feeds[i].first + "' has no value", feeds[i].first);
    }
    if (t.dtype() != exe->feed_types[i]) {
      return InvalidArgument("feed '" + feeds[i].first + "' has dtype " +
                                 std::string(DataTypeName(t.dtype())) + " but the graph expects " +
                                 std::string(DataTypeName(exe->feed_types[i])),
                             ParseTensorId(feeds[i].first)->node);
    }
    if (!exe->feed_shapes[i].IsCompatibleWith(t.shape())) {
      return InvalidArgument("feed '" + feeds[i].first + "' has shape " + t.shape().ToString() +
                                 " but the graph expects " + exe->feed_shapes[i].ToString(),
                             ParseTensorId(feeds[i].first)->node);
    }
    args.push_back(t);
  }

  if (options.iterations < 1 || (options.iterations > 1 && exe->parts.size() != 1)) {
    return InvalidArgument("iterations " + std::to_string(options.iterations) +
                           (options.iterations < 1 ? ": must be >= 1"
                                                   : ": a step runs repeatedly only when all its nodes "
                                                     "are on one device (this one uses " +
                                                         std::to_string(exe->parts.size()) + ")"));
  }
  const int64_t step = step_ids_->Next();
  {
    MutexLock l(control->mu);
    if (!control->abort.ok()) return control->abort;  // Close() or a cancel came first
    control->started = true;
    control->step = step;
    control->workers = &exe->workers;
  }
  if (timed && std::chrono::steady_clock::now() >= deadline) return deadline_error();
  CallFrame frame(std::move(args), exe->num_fetches);
  RunGraphArgs a;
  a.step_id = step;
  a.call_frame = &frame;
  a.trace = options.trace;
  a.iterations = options.iterations;
  a.cancellation = &control->sync_cancel;
  // Marks the step finished (no abort reaches a worker after this) and
  // returns why it was aborted, if it was.
  auto finish = [&] {
    MutexLock l(control->mu);
    control->finished = true;
    return control->abort;
  };
  Status status;
  Status aborted;
  if (exe->parts.size() == 1) {
    // On this thread (the deadline and Close() reach it through
    // control->sync_cancel).
    const Executable::Part& part = exe->parts[0];
    status = part.worker->RunGraphSync(part.graph, a);
    if (!status.ok()) status = Attribute(status, part.worker);
    aborted = finish();
    part.worker->CleanupStep(step);
  } else {
    // Every partition at once; the first error aborts the step everywhere.
    Mutex mu;
    CondVar cv;
    int remaining = int(exe->parts.size());
    Status first_error;
    for (const Executable::Part& part : exe->parts) {
      part.worker->RunGraph(part.graph, a, [&, worker = part.worker](const Status& result) {
        const Status s = result.ok() ? result : Attribute(result, worker);
        bool first = false;
        if (!s.ok()) {
          MutexLock l(mu);
          first = first_error.ok();
          if (first) first_error = s;
        }
        if (first) {
          for (Worker* w : exe->workers) w->AbortStep(step, s);
        }
        // Last: the waiter may return (and `mu` vanish) once remaining is 0.
        MutexLock l(mu);
        if (--remaining == 0) cv.NotifyOne();
      });
    }
    {
      MutexLock l(mu);
      while (remaining != 0) cv.Wait(mu);
    }
    aborted = finish();
    for (Worker* w : exe->workers) w->CleanupStep(step);
    status = first_error;
  }
  if (!status.ok() && !aborted.ok() && status.message() != aborted.message()) {
    // What the abort made a kernel report ("a dequeue ... was cancelled")
    // is a consequence: the step's error is the reason, at that node.
    status = Status(aborted.code(), aborted.message() + " (" + status.message() + ")",
                    status.node());
  }
  if (!status.ok() && exe->remote && status.code() == Code::kUnavailable) {
    // A task went away: the next Run asks every task again and registers
    // anew (a restarted task lost its graphs).
    options_.remote->ReportUnavailable();
    EvictRemoteExecutables();
  }
  if (stats != nullptr) {
    stats->step_id = step;
    stats->cache_hit = hit;
    stats->num_partitions = int(exe->parts.size());
  }
  FS_RETURN_IF_ERROR(status);
  outputs->swap(frame.rets());
  for (size_t i = 0; i < outputs->size(); ++i) {
    if (!(*outputs)[i].IsInitialized()) {
      return Internal("fetch '" + fetches[i] + "' produced no value");
    }
  }
  return Status();
}

StatusOr<std::map<std::string, std::string>> Session::ExportKernelStates() const {
  return local_worker_->ExportKernelStates();
}

Status Session::ImportKernelStates(const std::map<std::string, std::string>& states) {
  std::shared_ptr<const Graph> g = graph();
  for (const auto& [node, state] : states) {
    const Node* n = g->FindNode(node);
    if (n == nullptr) {
      return InvalidArgument("kernel state for node '" + node + "', which is not in the graph", node);
    }
    if (!n->is_stateful()) {
      return InvalidArgument("kernel state for node '" + node + "', a " + n->op() +
                                 ", which keeps no state",
                             node);
    }
  }
  FS_RETURN_IF_ERROR(local_worker_->ImportKernelStates(states));
  if (options_.remote == nullptr || states.empty()) return Status();
  // Every task's worker gets them (a node's kernel is built by the task it
  // is placed on; the others never use the state), and so will workers of
  // tasks this session has not used yet.
  MutexLock l(remote_mu_);
  for (const auto& [node, state] : states) remote_kernel_states_[node] = state;
  for (auto& [task, w] : remote_workers_) FS_RETURN_IF_ERROR(w->ImportKernelStates(states));
  return Status();
}

Status Session::Close(const std::string& reason) {
  MutexLock l(run_mu_);
  closed_ = true;
  // Steps that wait (on a queue, a Recv) would never end by themselves.
  // Told with run_mu_ held, which keeps them listed (they leave under it);
  // nothing an abort sets off takes run_mu_.
  for (StepControl* c = steps_; c != nullptr; c = c->next) AbortRun(c, Cancelled(reason));
  while (running_ != 0) run_cv_.Wait(run_mu_);
  l.Unlock();
  {
    WriterMutexLock c(cache_mu_);
    cache_.clear();
  }
  {
    // After the executables, which deregister from them; each closes its
    // task's session (variables there go).
    MutexLock r(remote_mu_);
    remote_workers_.clear();
  }
  if (local_worker_) local_worker_->ClearKernelStates();
  return Status();
}

Status CheckStaticTensorBytes(const Graph& graph, int64_t max_bytes, std::string_view setting) {
  if (max_bytes <= 0) return Status();
  for (int id : graph.topo_order()) {
    const Node& n = graph.node(id);
    for (int i = 0; i < n.num_outputs(); ++i) {
      const PartialShape& shape = n.output_shape(i);
      if (!shape.IsFullyDefined()) continue;
      // The size in bytes, saturating instead of overflowing.
      const int64_t elem = int64_t(DataTypeSize(n.output_type(i)));
      int64_t bytes = elem;
      bool over = false;
      for (int64_t d : shape.dims()) {
        if (d == 0) {
          bytes = 0;
          over = false;
          break;
        }
        if (over || bytes > std::numeric_limits<int64_t>::max() / d) {
          over = true;
        } else {
          bytes *= d;
        }
      }
      if (!over && bytes <= max_bytes) continue;
      return InvalidArgument("node '" + n.name() + "' (" + n.op() + "): its output " + std::to_string(i) +
                                 " is " + std::string(DataTypeName(n.output_type(i))) + shape.ToString() +
                                 ", " + (over ? "more than 2^63" : std::to_string(bytes)) +
                                 " bytes, over the limit of " + std::to_string(max_bytes) +
                                 " bytes for one tensor (" + std::string(setting) + ")",
                             n.name());
    }
  }
  return Status();
}

}  // namespace flowstate
