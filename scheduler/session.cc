#include "scheduler/session.h"

#include <algorithm>
#include <limits>

#include "graph/subgraph.h"
#include "scheduler/call_frame.h"
#include "scheduler/local_worker.h"
#include "scheduler/placement.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/thread_pool.h"
#include "state/kernels.h"
#include "state/resource_mgr.h"

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

  ~Executable() {
    for (const Part& p : parts) p.worker->DeregisterGraph(p.graph);
  }
};

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
  LocalWorkerOptions w;
  w.devices = options.devices;
  w.resources = s->resources_.get();
  w.inter_op_pool = s->pool_;
  s->local_worker_ = std::make_unique<LocalWorker>(w);
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(graph));
  FS_RETURN_IF_ERROR(CheckStaticTensorBytes(g, options.max_shape_bytes));
  s->graph_def_ = graph;
  s->graph_ = std::make_shared<const Graph>(std::move(g));
  return s;
}

Status Session::Extend(const GraphDef& nodes) {
  {
    std::lock_guard<std::mutex> l(run_mu_);
    if (closed_) return FailedPrecondition("the session is closed");
  }
  std::lock_guard<std::mutex> l(graph_mu_);
  GraphDef combined = graph_def_;
  combined.nodes.insert(combined.nodes.end(), nodes.nodes.begin(), nodes.nodes.end());
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(combined));
  FS_RETURN_IF_ERROR(CheckStaticTensorBytes(g, options_.max_shape_bytes));
  graph_def_ = std::move(combined);
  graph_ = std::make_shared<const Graph>(std::move(g));
  return Status();
}

std::shared_ptr<const Graph> Session::graph() const {
  std::lock_guard<std::mutex> l(graph_mu_);
  return graph_;
}

int Session::num_cached_executables() const {
  std::shared_lock<std::shared_mutex> l(cache_mu_);
  return int(cache_.size());
}

StatusOr<std::shared_ptr<Session::Executable>> Session::BuildExecutable(
    const Graph& graph, const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches, const std::vector<std::string>& targets) {
  FS_ASSIGN_OR_RETURN(PrunedGraph pruned, PruneForSignature(graph, {feeds, fetches, targets}));
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(pruned.graph));
  FS_ASSIGN_OR_RETURN(std::vector<Device*> placement,
                      PlaceGraph(g, *options_.devices, default_device_));
  FS_ASSIGN_OR_RETURN(std::vector<GraphPartition> parts, PartitionGraph(g, placement));
  auto exe = std::make_shared<Executable>();
  exe->feed_types = std::move(pruned.feed_types);
  exe->feed_shapes = std::move(pruned.feed_shapes);
  exe->num_fetches = int(fetches.size());
  for (GraphPartition& p : parts) {
    Worker* worker = WorkerFor(p.device);
    FS_ASSIGN_OR_RETURN(RegisteredGraph * handle,
                        worker->RegisterGraph({p.device->name(), std::move(p.graph)}));
    exe->parts.push_back({worker, handle});
    if (std::find(exe->workers.begin(), exe->workers.end(), worker) == exe->workers.end()) {
      exe->workers.push_back(worker);
    }
  }
  return exe;
}

Worker* Session::WorkerFor(const Device* /*device*/) const {
  // Every device of a session is in this process so far.
  return local_worker_.get();
}

StatusOr<std::shared_ptr<Session::Executable>> Session::GetExecutable(
    const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, bool* cache_hit) {
  std::string key;
  for (const auto& f : feeds) (key += f) += '\x1f';
  key += '\x1e';
  for (const auto& f : fetches) (key += f) += '\x1f';
  key += '\x1e';
  for (const auto& t : targets) (key += t) += '\x1f';
  {
    std::shared_lock<std::shared_mutex> l(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      *cache_hit = true;
      return it->second;
    }
  }
  *cache_hit = false;
  FS_ASSIGN_OR_RETURN(std::shared_ptr<Executable> exe,
                      BuildExecutable(*graph(), feeds, fetches, targets));
  std::unique_lock<std::shared_mutex> l(cache_mu_);
  auto [it, inserted] = cache_.emplace(key, exe);
  return it->second;  // another thread may have won the race: use its
}

Status Session::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                    const std::vector<std::string>& fetches,
                    const std::vector<std::string>& targets, std::vector<Tensor>* outputs,
                    RunStats* stats) {
  {
    std::lock_guard<std::mutex> l(run_mu_);
    if (closed_) return FailedPrecondition("the session is closed");
    ++running_;
  }
  struct Leave {
    Session* s;
    ~Leave() {
      std::lock_guard<std::mutex> l(s->run_mu_);
      if (--s->running_ == 0) s->run_cv_.notify_all();
    }
  } leave{this};

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

  const int64_t step = step_ids_->Next();
  CallFrame frame(std::move(args), exe->num_fetches);
  RunGraphArgs a;
  a.step_id = step;
  a.call_frame = &frame;
  Status status;
  if (exe->parts.size() == 1) {
    const Executable::Part& part = exe->parts[0];
    status = part.worker->RunGraphSync(part.graph, a);
    part.worker->CleanupStep(step);
  } else {
    // Every partition at once; the first error aborts the step everywhere.
    std::mutex mu;
    std::condition_variable cv;
    int remaining = int(exe->parts.size());
    Status first_error;
    for (const Executable::Part& part : exe->parts) {
      part.worker->RunGraph(part.graph, a, [&](const Status& s) {
        bool first = false;
        if (!s.ok()) {
          std::lock_guard<std::mutex> l(mu);
          first = first_error.ok();
          if (first) first_error = s;
        }
        if (first) {
          for (Worker* w : exe->workers) w->AbortStep(step, s);
        }
        // Last: the waiter may return (and `mu` vanish) once remaining is 0.
        std::lock_guard<std::mutex> l(mu);
        if (--remaining == 0) cv.notify_one();
      });
    }
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return remaining == 0; });
    }
    for (Worker* w : exe->workers) w->CleanupStep(step);
    status = first_error;
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
  return local_worker_->ImportKernelStates(states);
}

Status Session::Close() {
  std::unique_lock<std::mutex> l(run_mu_);
  closed_ = true;
  run_cv_.wait(l, [&] { return running_ == 0; });
  l.unlock();
  {
    std::unique_lock<std::shared_mutex> c(cache_mu_);
    cache_.clear();
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
