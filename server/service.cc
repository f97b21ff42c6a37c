#include "server/service.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <random>

#include "api/json_codec.h"
#include "checkpoints/store.h"
#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "graph/op_def.h"
#include "scheduler/rendezvous.h"
#include "jobs/step_trace_view.h"
#include "scheduler/session.h"
#include "scheduler/step_trace.h"
#include "scheduler/thread_pool.h"
#include "state/tensor_store.h"
#include "graph/mutex.h"

namespace flowstate {

namespace {

// An attr value as JSON text, written the way a graph body writes it (the
// codec's form: "float32", [2, -1], "a string"), not DebugString's.
std::string AttrValueJson(const std::string& op, const std::string& attr, const AttrValue& v) {
  GraphDef g;
  NodeDef n;
  n.name = "n";
  n.op = op;
  n.attrs.emplace(attr, v);
  g.nodes.push_back(std::move(n));
  nlohmann::json doc = nlohmann::json::parse(api::GraphToJson(g), nullptr, false);
  if (doc.is_discarded()) return nlohmann::json(v.DebugString()).dump();
  return doc["nodes"][0]["attrs"][attr].dump();
}

}  // namespace

namespace {

DatasetUploadsOptions DatasetOptions(const ServiceOptions& o) {
  DatasetUploadsOptions d;
  d.data_root = o.data_root;
  d.max_dataset_bytes = o.max_dataset_bytes;
  d.max_datasets = o.max_datasets;
  return d;
}

}  // namespace

Service::Service(const ServiceOptions& options)
    : options_(options), datasets_(DatasetOptions(options)) {
  session_pool_ = std::make_unique<ThreadPool>(std::max(1, options.jobs.inter_op_threads));
  JobManagerOptions jo = options.jobs;
  jo.devices = options.devices;
  jo.data_root = options.data_root;
  jo.max_shape_bytes = options.max_shape_bytes;
  if (!jo.remote && options.cluster_view) jo.remote = options.cluster_view;
  ModelRegistryOptions mo;
  mo.store = options.jobs.store;
  mo.max_model_bytes = options.max_model_bytes;
  mo.max_models = options.max_models;
  StatusOr<std::unique_ptr<ModelRegistry>> models = ModelRegistry::Open(mo);
  if (models.ok()) {
    models_ = std::move(models).value();
    ModelRegistry* registry = models_.get();
    jo.read_model = [registry](const std::string& id) { return registry->Read(id); };
  } else {
    models_error_ = models.status();
    fprintf(stderr, "flowstate: uploaded models are unavailable: %s\n", models_error_.ToString().c_str());
  }
  jobs_ = std::make_unique<JobManager>(jo);
  if (options.jobs.store != nullptr) {
    // Not owned: the store outlives the service (an aliasing, owner-less
    // shared_ptr).
    tensor_store_ = checkpoints::NewTensorStore(
        std::shared_ptr<checkpoints::Store>(std::shared_ptr<void>(), options.jobs.store));
  }
}

Service::~Service() { Shutdown(); }

void Service::CloseSessions() {
  std::map<std::string, SessionEntry> sessions;
  {
    MutexLock l(mu_);
    shut_down_ = true;
    sessions.swap(sessions_);
  }
  for (auto& [id, e] : sessions) e.session->Close("the server is shutting down").CheckOk();
}

void Service::Shutdown() {
  CloseSessions();
  jobs_->Shutdown();
}

bool Service::Ready() const {
  MutexLock l(mu_);
  return !shut_down_;
}

StatusOr<std::string> Service::CreateSession(const GraphDef& graph) {
  {
    MutexLock l(mu_);
    if (shut_down_) return Unavailable("the server is shutting down");
    if (int(sessions_.size()) >= options_.max_sessions) {
      return ResourceExhausted("the server has its maximum of " +
                               std::to_string(options_.max_sessions) +
                               " open sessions (sessions.max_sessions); close one "
                               "(DELETE /v1/sessions/{id}) or retry later");
    }
  }
  SessionOptions so;
  so.devices = options_.devices;
  so.inter_op_pool = session_pool_.get();
  so.max_shape_bytes = options_.max_shape_bytes;
  if (options_.cluster_view) so.remote = options_.cluster_view();
  FS_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::Create(graph, so));
  // Save/Restore: every session shares the server's store (prefixes are
  // server-wide and survive restarts).
  if (tensor_store_ != nullptr) FS_RETURN_IF_ERROR(SetTensorStore(s->resource_manager(), tensor_store_));
  MutexLock l(mu_);
  // Unguessable ids: sessions hold a client's state.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)rng());
  std::string id = "sess-" + std::to_string(next_session_++) + "-" + buf;
  sessions_[id] = SessionEntry{std::shared_ptr<Session>(std::move(s)), std::chrono::steady_clock::now()};
  return id;
}

StatusOr<std::shared_ptr<Session>> Service::FindSession(const std::string& id) {
  MutexLock l(mu_);
  if (shut_down_) return Unavailable("the server is shutting down");
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return NotFound("no session '" + id + "'");
  it->second.last_used = std::chrono::steady_clock::now();
  return it->second.session;
}

Status Service::ExtendSession(const std::string& id, const GraphDef& nodes) {
  FS_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(id));
  return s->Extend(nodes);
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> Service::RunSession(
    const std::string& id, const SessionRunRequest& req, StepTrace* trace) {
  FS_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(id));
  for (const auto& [name, t] : req.feeds) {
    if (int64_t(t.TotalBytes()) > options_.max_tensor_bytes) {
      return ResourceExhausted("feed '" + name + "' is " + std::to_string(t.TotalBytes()) +
                               " bytes, over the limit of " +
                               std::to_string(options_.max_tensor_bytes));
    }
  }
  std::vector<Tensor> out;
  std::unique_ptr<StepTraceCollector> collector;
  RunOptions options;
  // The client's deadline, within the server's bound.
  options.timeout = std::chrono::milliseconds(req.timeout_ms);
  const bool server_bound = options_.max_step.count() > 0 &&
                            (options.timeout.count() <= 0 || options_.max_step < options.timeout);
  if (server_bound) options.timeout = options_.max_step;
  if (req.trace && trace != nullptr) {
    collector = std::make_unique<StepTraceCollector>();
    options.trace = collector.get();
  }
  // A tagged step can be cancelled by its client (CancelSessionStep).
  CancellationManager cancel;
  const std::pair<std::string, std::string> tag_key{id, req.step_tag};
  if (!req.step_tag.empty()) {
    MutexLock l(mu_);
    if (!tagged_steps_.emplace(tag_key, &cancel).second) {
      return AlreadyExists("step_tag: a step tagged '" + req.step_tag + "' is running in session '" +
                           id + "'");
    }
    options.cancellation = &cancel;
  }
  struct Untag {
    Service* service;
    const std::pair<std::string, std::string>* key;
    ~Untag() {
      if (key->second.empty()) return;
      MutexLock l(service->mu_);
      service->tagged_steps_.erase(*key);
    }
  } untag{this, &tag_key};
  RunStats stats;
  Status run = s->Run(req.feeds, req.fetches, req.targets, &out, &stats, options);
  if (collector) *trace = MakeStepTrace(*collector, stats.step_id);
  if (server_bound && run.code() == Code::kDeadlineExceeded) {
    return Status(run.code(), run.message() + " (the server's sessions.max_step_ms)", run.node());
  }
  FS_RETURN_IF_ERROR(run);
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t i = 0; i < out.size(); ++i) named.emplace_back(req.fetches[i], std::move(out[i]));
  return named;
}

bool Service::SessionStepMayWait(const std::string& id, const std::vector<std::string>& feeds,
                                 const std::vector<std::string>& fetches,
                                 const std::vector<std::string>& targets) {
  StatusOr<std::shared_ptr<Session>> s = FindSession(id);
  return !s.ok() || (*s)->StepMayWait(feeds, fetches, targets);
}

StatusOr<bool> Service::CancelSessionStep(const std::string& id, const std::string& step_tag) {
  FS_RETURN_IF_ERROR(FindSession(id).status());
  MutexLock l(mu_);
  auto it = tagged_steps_.find({id, step_tag});
  if (it == tagged_steps_.end()) return false;
  it->second->StartCancel();
  return true;
}

Status Service::CloseSession(const std::string& id) {
  std::shared_ptr<Session> s;
  {
    MutexLock l(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return NotFound("no session '" + id + "'");
    s = it->second.session;
    sessions_.erase(it);
  }
  return s->Close();
}

int Service::Reap() {
  std::vector<std::shared_ptr<Session>> idle;
  {
    MutexLock l(mu_);
    auto now = std::chrono::steady_clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (now - it->second.last_used > options_.session_idle_timeout) {
        idle.push_back(it->second.session);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : idle) s->Close().CheckOk();
  return int(idle.size());
}

StatusOr<JobInfo> Service::SubmitJob(const std::string& job_json) { return jobs_->Submit(job_json); }
StatusOr<JobInfo> Service::GetJob(const std::string& id) const { return jobs_->Get(id); }
std::vector<JobInfo> Service::ListJobs() const { return jobs_->List(); }
Status Service::CancelJob(const std::string& id) { return jobs_->Cancel(id); }
Status Service::PauseJob(const std::string& id) { return jobs_->Pause(id); }
Status Service::ResumeJob(const std::string& id) { return jobs_->Resume(id); }
Status Service::DeleteJob(const std::string& id) { return jobs_->Delete(id); }

Status Service::Predict(const std::string& id,
                        const std::vector<std::pair<std::string, Tensor>>& inputs,
                        const std::vector<std::string>& fetches, std::vector<Tensor>* outputs,
                        std::chrono::milliseconds timeout) {
  const bool server_bound = options_.max_step.count() > 0 &&
                            (timeout.count() <= 0 || options_.max_step < timeout);
  if (server_bound) timeout = options_.max_step;
  Status s = jobs_->Predict(id, inputs, fetches, outputs, timeout);
  if (s.code() == Code::kDeadlineExceeded && server_bound) {
    return Status(s.code(), s.message() + " (the server's sessions.max_step_ms)", s.node());
  }
  return s;
}

bool Service::PredictMayWait(const std::string& id, const std::vector<std::string>& inputs,
                             const std::vector<std::string>& fetches) const {
  return jobs_->PredictMayWait(id, inputs, fetches);
}

std::optional<DataType> Service::SessionFeedDtype(const std::string& id, const std::string& name) {
  StatusOr<std::shared_ptr<Session>> s = FindSession(id);
  if (!s.ok()) return std::nullopt;
  std::shared_ptr<const Graph> g = (*s)->graph();
  return g == nullptr ? std::nullopt : PlaceholderDtype(*g, name);
}

std::optional<DataType> Service::JobInputDtype(const std::string& id, const std::string& name) const {
  return jobs_->InputDtype(id, name);
}

StatusOr<JobHistory> Service::JobHistoryOf(const std::string& id) const { return jobs_->History(id); }
StatusOr<std::string> Service::JobDocument(const std::string& id) const { return jobs_->Document(id); }

StatusOr<std::vector<int64_t>> Service::JobTracedSteps(const std::string& id) const {
  return jobs_->TracedSteps(id);
}

StatusOr<std::string> Service::JobTrace(const std::string& id, int64_t step) const {
  return jobs_->Trace(id, step);
}

StatusOr<CheckpointRequestResult> Service::CheckpointJob(const std::string& id) {
  return jobs_->Checkpoint(id);
}

StatusOr<std::vector<JobCheckpointInfo>> Service::ListCheckpoints(const std::string& id) {
  return jobs_->ListCheckpoints(id);
}

Status Service::ExportCheckpoint(const std::string& id, int64_t step, const std::string& path,
                                 checkpoints::ExportFormat format,
                                 std::vector<std::string>* converted) {
  return jobs_->ExportCheckpoint(id, step, path, format, converted);
}

StatusOr<std::pair<std::string, int64_t>> Service::ImportCheckpoint(const std::string& path) {
  return jobs_->ImportCheckpoint(path);
}

StatusOr<std::unique_ptr<JobEventStream>> Service::WatchJob(const std::string& id, bool history) {
  // Takes a slot first, so that concurrent callers cannot pass the limit.
  const int limit = std::max(0, options_.max_event_streams);
  if (open_streams_->fetch_add(1) >= limit) {
    open_streams_->fetch_sub(1);
    return ResourceExhausted("the server has its maximum of " + std::to_string(limit) +
                             " open event streams (limits.max_event_streams); close one or retry "
                             "later");
  }
  StatusOr<std::unique_ptr<JobEventStream>> stream = jobs_->Watch(id, history);
  if (!stream.ok()) {
    open_streams_->fetch_sub(1);
    return stream.status();
  }
  // The job's stream, giving its slot back when destroyed.
  struct Counted final : JobEventStream {
    std::unique_ptr<JobEventStream> s;
    std::shared_ptr<std::atomic<int>> open;
    std::optional<JobEvent> Next(std::chrono::milliseconds t) override { return s->Next(t); }
    bool timed_out() const override { return s->timed_out(); }
    void Close() override { s->Close(); }
    void SetWaker(std::function<void()> wake) override { s->SetWaker(std::move(wake)); }
    ~Counted() override {
      s.reset();
      open->fetch_sub(1);
    }
  };
  auto counted = std::make_unique<Counted>();
  counted->s = std::move(stream).value();
  counted->open = open_streams_;
  return std::unique_ptr<JobEventStream>(std::move(counted));
}

int Service::num_sessions() const {
  MutexLock l(mu_);
  return int(sessions_.size());
}

std::vector<OpInfo> Service::ListOps() const {
  std::vector<OpInfo> out;
  KernelRegistry* kernels = KernelRegistry::Global();
  for (const OpDef* op : OpRegistry::Global()->ListOps()) {
    if (op->is_internal()) continue;
    OpInfo info;
    info.name = op->name;
    info.doc = op->doc;
    info.stateful = op->is_stateful;
    auto arg = [](const ArgDef& a) {
      std::string t = a.type_attr.empty() ? std::string(DataTypeName(a.type)) : a.type_attr;
      if (!a.number_attr.empty()) t = a.number_attr + " * " + t;
      if (a.is_ref) t = "Ref(" + t + ")";
      return OpInfo::Arg{a.name, t};
    };
    for (const ArgDef& a : op->inputs) info.inputs.push_back(arg(a));
    for (const ArgDef& a : op->outputs) info.outputs.push_back(arg(a));
    for (const AttrDef& a : op->attrs) {
      OpInfo::Attr at;
      at.name = a.name;
      at.kind = std::string(AttrKindName(a.kind));
      if (a.default_value) at.default_value = AttrValueJson(op->name, a.name, *a.default_value);
      for (DataType t : a.allowed_types) at.allowed.emplace_back(DataTypeName(t));
      info.attrs.push_back(at);
    }
    info.devices = kernels->DeviceTypesFor(op->name);
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<DeviceInfo> Service::ListDevices() const {
  if (!options_.cluster) return ListLocalDevices();
  std::vector<DeviceInfo> out;
  for (TaskInfo& t : GetCluster().tasks) {
    for (DeviceInfo& d : t.devices) out.push_back(std::move(d));
  }
  return out;
}

ClusterInfo Service::GetCluster() const {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ClusterInfo c;
  if (options_.cluster) c = options_.cluster();
  TaskInfo* self = nullptr;
  for (TaskInfo& t : c.tasks) {
    if (t.is_self) self = &t;
  }
  for (TaskInfo& t : c.tasks) {
    if (self == nullptr && t.job == options_.task_job && t.index == options_.task_index) self = &t;
  }
  if (self == nullptr) {
    c.tasks.emplace_back();
    self = &c.tasks.back();
    self->job = options_.task_job;
    self->index = options_.task_index;
    self->address = options_.task_address;
  }
  self->is_self = true;
  self->state = TaskState::kUp;
  self->error.clear();
  self->incarnation = ProcessIncarnation();
  self->last_heartbeat = now;
  self->devices = ListLocalDevices();
  return c;
}

std::vector<DeviceInfo> Service::ListLocalDevices() const {
  std::vector<DeviceInfo> out;
  std::map<std::string, std::vector<std::string>> running = jobs_->RunningJobsByDevice();
  for (Device* d : options_.devices->devices()) {
    DeviceInfo i;
    i.name = d->name();
    i.type = d->type();
    i.description = d->Description();
    AllocatorStats s = d->allocator()->Stats();
    i.bytes_in_use = s.bytes_in_use;
    i.peak_bytes_in_use = s.peak_bytes_in_use;
    i.bytes_limit = s.bytes_limit;
    i.bytes_cached = s.bytes_cached;
    if (auto r = running.find(d->name()); r != running.end()) {
      i.jobs = r->second;
      i.running_jobs = int(r->second.size());
    }
    out.push_back(i);
  }
  return out;
}

StatusOr<ModelInfo> Service::UploadModel(const std::string& bytes, const std::string& name) {
  if (models_ == nullptr) return Unavailable("uploaded models are unavailable: " + models_error_.ToString());
  return models_->Upload(bytes, name);
}

StatusOr<ModelInfo> Service::GetModel(const std::string& id) const {
  if (models_ == nullptr) return Unavailable("uploaded models are unavailable: " + models_error_.ToString());
  return models_->Get(id);
}

StatusOr<std::vector<ModelInfo>> Service::ListModels() const {
  if (models_ == nullptr) return Unavailable("uploaded models are unavailable: " + models_error_.ToString());
  return models_->List();
}

Status Service::DeleteModel(const std::string& id) {
  if (models_ == nullptr) return Unavailable("uploaded models are unavailable: " + models_error_.ToString());
  FS_RETURN_IF_ERROR(models_->Get(id).status());
  std::string job = jobs_->JobNamingModel(id);
  if (!job.empty()) {
    return FailedPrecondition("model '" + id + "' is used by job '" + job + "'; delete the job first");
  }
  return models_->Delete(id);
}

}  // namespace flowstate
