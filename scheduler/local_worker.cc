#include "scheduler/local_worker.h"

#include <algorithm>
#include <thread>

#include "graph/mutex.h"
#include "scheduler/wait.h"

namespace flowstate {

struct LocalWorker::Graph final : RegisteredGraph {
  std::unique_ptr<Executor> executor;
  bool exchanges_tensors = false;  // has a _Send or a _Recv
};

LocalWorker::LocalWorker(const LocalWorkerOptions& options) : options_(options) {
  if (options_.rendezvous_mgr != nullptr) {
    rendezvous_ = options_.rendezvous_mgr;
  } else {
    own_rendezvous_ = std::make_unique<RendezvousMgr>();
    rendezvous_ = own_rendezvous_.get();
  }
}

LocalWorker::~LocalWorker() = default;

StatusOr<RegisteredGraph*> LocalWorker::RegisterGraph(RegisterGraphRequest request) {
  Device* device = options_.devices->FindByName(request.device);
  if (device == nullptr) {
    return InvalidArgument("device '" + request.device + "' is not a device of this worker");
  }
  auto g = std::make_unique<Graph>();
  for (const NodeDef& n : request.graph.nodes) {
    if (n.op == "_Send" || n.op == "_Recv") g->exchanges_tensors = true;
  }
  FS_ASSIGN_OR_RETURN(flowstate::Graph graph, flowstate::Graph::Create(request.graph));
  Executor::Options o;
  o.device = device;
  o.resource_manager = options_.resources;
  o.kernel_cache = &kernel_cache_;
  FS_ASSIGN_OR_RETURN(g->executor, Executor::Create(std::move(graph), o));
  Graph* handle = g.get();
  MutexLock l(mu_);
  graphs_.emplace(handle, std::move(g));
  return handle;
}

void LocalWorker::DeregisterGraph(RegisteredGraph* graph) {
  std::unique_ptr<Graph> g;  // destroyed outside the lock
  MutexLock l(mu_);
  auto it = graphs_.find(static_cast<Graph*>(graph));
  if (it == graphs_.end()) return;
  g = std::move(it->second);
  graphs_.erase(it);
}

bool LocalWorker::MayWait(const RegisteredGraph* graph) const {
  return static_cast<const Graph*>(graph)->executor->may_wait();
}

void LocalWorker::RunGraph(RegisteredGraph* graph, const RunGraphArgs& args,
                           StatusCallback done) {
  if (args.iterations > 1) {
    if (static_cast<const Graph*>(graph)->exchanges_tensors) {
      done(InvalidArgument("iterations " + std::to_string(args.iterations) +
                           ": a partition that exchanges tensors with others runs once a step"));
      return;
    }
    // The runs one after another on a thread of their own (the pool's
    // threads run their nodes); each is a step of this worker, so that
    // AbortStep ends the current one and refuses the rest.
    std::thread([this, graph, args, done = std::move(done)] {
      RunGraphArgs once = args;
      once.iterations = 1;
      Status s;
      for (int k = 0; k < args.iterations && s.ok(); ++k) {
        s = RunAndWait([&](StatusCallback d) { RunGraph(graph, once, std::move(d)); });
      }
      done(s);
    }).detach();
    return;
  }
  const Graph* g = static_cast<const Graph*>(graph);
  const int64_t step_id = args.step_id;
  auto cancel = std::make_shared<CancellationManager>();
  std::shared_ptr<Rendezvous> rendezvous;
  bool aborted = false;
  {
    MutexLock l(mu_);
    auto [it, inserted] = steps_.try_emplace(step_id);
    if (inserted) num_steps_.fetch_add(1, std::memory_order_relaxed);
    Step& step = it->second;
    if (g->exchanges_tensors && step.rendezvous == nullptr) {
      step.rendezvous = rendezvous_->Find(step_id);
    }
    rendezvous = step.rendezvous;
    step.running.push_back(cancel);
    aborted = !step.first_error.ok();
  }
  // Aborted before it started: its kernels that wait see it at once.
  if (aborted) cancel->StartCancel();
  Executor::Args a;
  a.step_id = step_id;
  a.call_frame = args.call_frame;
  a.trace = args.trace;
  a.cancellation = cancel.get();
  a.rendezvous = rendezvous.get();
  a.pool = options_.inter_op_pool;
  // The partition's first error aborts the step's other partitions here
  // before they can fail with a consequence of it.
  a.on_error = [this, step_id](const Status& s) { AbortStep(step_id, s); };
  g->executor->RunAsync(a, [this, step_id, cancel, rendezvous,
                            done = std::move(done)](const Status& s) {
    Status result = s;
    {
      MutexLock l(mu_);
      auto it = steps_.find(step_id);
      if (it != steps_.end()) {
        auto& running = it->second.running;
        running.erase(std::find(running.begin(), running.end(), cancel));
        if (!s.ok() && !it->second.first_error.ok()) result = it->second.first_error;
      }
    }
    done(result);
  });
}

Status LocalWorker::RunGraphSync(RegisteredGraph* graph, const RunGraphArgs& args) {
  const Graph* g = static_cast<const Graph*>(graph);
  if (g->exchanges_tensors) return Worker::RunGraphSync(graph, args);
  CancellationManager own_cancel;
  Executor::Args a;
  a.step_id = args.step_id;
  a.call_frame = args.call_frame;
  a.trace = args.trace;
  a.cancellation = args.cancellation != nullptr ? args.cancellation : &own_cancel;
  a.pool = options_.inter_op_pool;
  Status s;
  for (int k = 0; k < std::max(1, args.iterations) && s.ok(); ++k) s = g->executor->Run(a);
  return s;
}

void LocalWorker::AbortStep(int64_t step_id, const Status& status) {
  const Status abort = status.ok() ? Cancelled("the step was aborted") : status;
  std::vector<std::shared_ptr<CancellationManager>> running;
  {
    MutexLock l(mu_);
    auto [it, inserted] = steps_.try_emplace(step_id);
    if (inserted) num_steps_.fetch_add(1, std::memory_order_relaxed);
    Step& step = it->second;
    if (!step.first_error.ok()) return;
    step.first_error = abort;
    running = step.running;
  }
  // Outside the lock: the callbacks may finish partitions, which take it.
  rendezvous_->AbortStep(step_id, abort);
  for (auto& c : running) c->StartCancel();
}

void LocalWorker::CleanupStep(int64_t step_id) {
  if (num_steps_.load(std::memory_order_relaxed) == 0) return;
  std::shared_ptr<Rendezvous> rendezvous;  // released outside the lock
  {
    MutexLock l(mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    rendezvous = std::move(it->second.rendezvous);
    steps_.erase(it);
    num_steps_.fetch_sub(1, std::memory_order_relaxed);
  }
  rendezvous_->Cleanup(step_id);
}

StatusOr<std::map<std::string, std::string>> LocalWorker::ExportKernelStates() {
  return kernel_cache_.SaveStates();
}

Status LocalWorker::ImportKernelStates(const std::map<std::string, std::string>& states) {
  return kernel_cache_.RestoreStates(states);
}

void LocalWorker::ClearKernelStates() { kernel_cache_.Clear(); }

int LocalWorker::num_steps() const {
  MutexLock l(mu_);
  return int(steps_.size());
}

}  // namespace flowstate
