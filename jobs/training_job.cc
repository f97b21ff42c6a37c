#include "jobs/training_job.h"
#include "jobs/replica.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "api/base64.h"
#include "api/json_codec.h"
#include "api/views_json.h"
#include "jobs/step_trace_view.h"
#include "graph/gradients.h"
#include "graph/graph.h"
#include "graph/initializers.h"
#include "graph/modes.h"
#include "graph/op_builders.h"
#include "graph/optimizers.h"
#include "graph/shared_tables.h"
#include "state/data_path.h"
#include "state/data_source.h"
#include "state/variable.h"
#include "scheduler/collective.h"
#include "scheduler/replica_comm.h"
#include "scheduler/cluster_view.h"
#include "scheduler/step_trace.h"

namespace flowstate {
namespace {

Status CheckPlaceholders(const Graph& g, const DataSpec& data, const std::string& path) {
  for (const auto& [name, file] : data.files) {
    const Node* n = g.FindNode(name);
    if (n == nullptr) {
      return InvalidArgument(path + ".files." + name + ": the graph has no node '" + name +
                             "' to feed this file to");
    }
    if (n->op() != "Placeholder") {
      return InvalidArgument(path + ".files." + name + ": node '" + name + "' is a " + n->op() +
                                 ", not a Placeholder",
                             name);
    }
  }
  return Status();
}

Status CheckDataAgainstGraph(const Graph& g, const Dataset& d, const std::string& path) {
  for (const auto& [name, t] : d.components()) {
    const Node* n = g.FindNode(name);
    if (n == nullptr) continue;  // checked before
    DataType want = n->output_type(0);
    const PartialShape& ps = n->output_shape(0);
    TensorShape example = *d.ExampleShape(name);
    std::vector<int64_t> batch{-1};
    for (int64_t dim : example.dims()) batch.push_back(dim);
    PartialShape as_fed(batch);
    if (t.dtype() != want || !ps.IsCompatibleWith(as_fed)) {
      return InvalidArgument(path + ".files." + name + ": the data is " +
                                 std::string(DataTypeName(t.dtype())) + " " + as_fed.ToString() +
                                 " (batch first) but placeholder '" + name + "' is " +
                                 std::string(DataTypeName(want)) + " " + ps.ToString(),
                             name);
    }
  }
  return Status();
}

}  // namespace

StatusOr<TrainingGraph> BuildTrainingGraph(const JobSpec& job) {
  if (job.replicas < 1) return InvalidArgument("replicas: must be >= 1");
  FS_ASSIGN_OR_RETURN(Graph forward, Graph::Create(job.graph));
  FS_RETURN_IF_ERROR(CheckPlaceholders(forward, job.input, "input"));
  if (job.eval) FS_RETURN_IF_ERROR(CheckPlaceholders(forward, *job.eval, "eval"));
  for (size_t i = 0; i < job.devices.size(); ++i) {
    StatusOr<DeviceName> d = DeviceName::Parse(job.devices[i]);
    if (!d.ok()) return InvalidArgument("devices[" + std::to_string(i) + "]: " + d.status().message());
  }

  TrainingGraphSpec spec;
  spec.graph = job.graph;
  spec.loss = job.loss;
  spec.optimizer = job.optimizer;
  spec.seed = job.seed;
  spec.replicas = job.replicas;
  spec.bucket_bytes = job.bucket_bytes;
  // Backup replicas across tasks reduce among a step's contributors only,
  // which gathers no rows: their sparse gradients are reduced densely.
  spec.sparse_allgather = !job.sparse_as_dense && job.backup_replicas == 0;
  if (job.eval) spec.metrics = job.eval->metrics;
  return BuildTrainingGraph(spec);
}

TrainingJob::TrainingJob(const JobSpec& spec, const TrainingJobOptions& options, TrainingGraph graph)
    : spec_(spec), options_(options), graph_(std::move(graph)) {}

SessionOptions TrainingJob::SessionOptionsOfJob() const {
  SessionOptions so;
  so.devices = options_.devices;
  so.inter_op_pool = options_.inter_op_pool;
  so.inter_op_threads = options_.inter_op_threads;
  so.max_shape_bytes = options_.max_shape_bytes;
  return so;
}

TrainingJob::~TrainingJob() {
  if (pipeline_) pipeline_->Cancel();
  bool lagging = false;
  for (const std::thread& t : laggards_) lagging = lagging || t.joinable();
  if (chunk_ != nullptr || lagging) {
    // Stopped within a chunk of steps (a shutdown), or with replicas still
    // catching up: the replicas on the tasks may wait in their collective
    // for replica 0; fail it everywhere.
    if (!replicas_.empty() && replicas_[0]->comm() != nullptr) {
      replicas_[0]->comm()->Abort(Cancelled("the job stopped within a chunk of steps"));
    }
    if (chunk_ != nullptr) {
      for (std::thread& t : chunk_->threads) {
        if (t.joinable()) t.join();
      }
    }
    for (std::thread& t : laggards_) {
      if (t.joinable()) t.join();
    }
  }
}

StatusOr<std::unique_ptr<TrainingJob>> TrainingJob::Create(const JobSpec& spec,
                                                           const TrainingJobOptions& options) {
  if (options.devices == nullptr) return InvalidArgument("TrainingJobOptions.devices is required");
  if (spec.model) {
    // An ONNX model: its graph, loss and starting values, then as any job.
    FS_ASSIGN_OR_RETURN(ResolvedModel m, ResolveOnnxModel(spec, options.data_root, options.read_model));
    ResolvedModel* resolved = &m;
    resolved->spec.model.reset();
    FS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingJob> job, Create(resolved->spec, options));
    job->spec_.model = spec.model;
    job->model_values_ = std::move(resolved->initial_values);
    job->onnx_source_ = std::move(resolved->source);
    return job;
  }
  FS_ASSIGN_OR_RETURN(TrainingGraph g, BuildTrainingGraph(spec));
  {
    FS_ASSIGN_OR_RETURN(Graph whole, Graph::Create(g.graph));
    Status big = CheckStaticTensorBytes(whole, options.max_shape_bytes);
    if (!big.ok()) return big.WithPrefix("graph");
  }
  for (size_t i = 0; i < spec.devices.size(); ++i) {
    FS_ASSIGN_OR_RETURN(DeviceName d, DeviceName::Parse(spec.devices[i]));
    bool remote = false;
    if (options.remote != nullptr && spec.replicas > 1) {
      uint64_t generation = 0;
      for (const auto& rd : options.remote->RemoteDevices(&generation)) {
        if (rd->parsed_name().Matches(d)) remote = true;
      }
      // A task of the cluster not heard from yet (its replica waits for it).
      for (const std::string& task : options.remote->Tasks()) {
        StatusOr<DeviceName> t = DeviceName::Parse(task);
        if (t.ok() && !d.job.empty() && d.job == t->job && d.task >= 0 && d.task == t->task &&
            d.type.empty()) {
          remote = true;
        }
      }
    }
    if (options.devices->Matching(d).empty() && !remote) {
      return InvalidArgument("devices[" + std::to_string(i) + "]: no device of this server matches '" +
                             spec.devices[i] + "'");
    }
  }
  // Every file must exist under the data root (its contents are checked
  // when the job starts).
  auto check_files = [&](const DataSpec& d, const std::string& path) -> Status {
    for (const auto& [name, file] : d.files) {
      StatusOr<std::string> r = ResolveDataPath(options.data_root, file);
      if (!r.ok()) {
        return Status(r.status().code(), path + ".files." + name + ": " + r.status().message());
      }
    }
    return Status();
  };
  FS_RETURN_IF_ERROR(check_files(spec.input, "input"));
  if (spec.eval) FS_RETURN_IF_ERROR(check_files(*spec.eval, "eval"));
  std::unique_ptr<TrainingJob> job(new TrainingJob(spec, options, std::move(g)));
  if (spec.shared_tables && job->graph_.partitioned.empty()) {
    return InvalidArgument("partitioned_tables: \"shared\" shares partitioned tables, and the "
                           "graph has none (set \"partitions\" on a Variable)");
  }
  if (spec.shared_tables && spec.replicas > 1) {
    if (!job->ReplicasAcrossTasks()) {
      return InvalidArgument("partitioned_tables: \"shared\" splits tables over the tasks of a "
                             "cluster, and these replicas all run in this process");
    }
    // Every replica's graph is checked now (a part read other than by a
    // lookup is refused, naming the node).
    FS_RETURN_IF_ERROR(ShareTables(job->graph_, 0, spec.replicas).status());
  }
  return job;
}

StatusOr<DataSource> ToDataSource(const DataSpec& data, const std::string& path) {
  DataSource s;
  s.format = data.format;
  s.files = data.files;
  for (const auto& [name, c] : data.columns) {
    DataSource::Columns& to = s.columns[name];
    to.names = c.names;
    to.indices = c.indices;
    StatusOr<DataType> t = DataTypeFromString(c.dtype);
    if (!t.ok()) return InvalidArgument(path + ".columns." + name + ".dtype: " + t.status().message());
    to.dtype = *t;
  }
  s.header = data.header;
  s.delimiter = data.delimiter;
  s.max_examples = data.max_examples;
  return s;
}

StatusOr<Dataset> TrainingJob::Load(const DataSpec& data, const std::string& path) const {
  FS_ASSIGN_OR_RETURN(DataSource source, ToDataSource(data, path));
  StatusOr<Dataset> loaded = LoadDataSource(options_.data_root, source);
  if (!loaded.ok()) return loaded.status().WithPrefix(path + ".files");
  Dataset d = std::move(loaded).value();
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(spec_.graph));
  FS_RETURN_IF_ERROR(CheckDataAgainstGraph(g, d, path));
  return d;
}

Status TrainingJob::Start(bool load_data) {
  if (started_) return FailedPrecondition("the job has already started");
  if (spec_.replicas > 1 && load_data && ReplicasAcrossTasks()) {
    FS_RETURN_IF_ERROR(CheckReplicasAcrossTasks());
  }
  if (load_data) {
    FS_ASSIGN_OR_RETURN(train_data_, Load(spec_.input, "input"));
  }
  if (spec_.eval && load_data) {
    FS_ASSIGN_OR_RETURN(eval_data_, Load(*spec_.eval, "eval"));
  }
  SessionOptions so = SessionOptionsOfJob();
  so.default_device = spec_.devices.empty() ? "" : spec_.devices.front();
  shared_.reset();
  GraphDef eval_graph = graph_.eval_graph;
  if (spec_.shared_tables && spec_.replicas > 1 && load_data && ReplicasAcrossTasks()) {
    // Each replica's graph, with the parts it holds.
    SharedTables t;
    t.holders = SharedVariableHolders(graph_, spec_.replicas);
    for (int i = 0; i < spec_.replicas; ++i) {
      FS_ASSIGN_OR_RETURN(ReplicaTrainingGraph r, ShareTables(graph_, i, spec_.replicas));
      t.variables.push_back(std::move(r.variables));
      t.graphs.push_back(std::move(r.graph));
      t.num_buckets = r.num_buckets;
    }
    for (const std::string& v : graph_.variables) {
      if (!t.holders.count(v)) t.replicated.push_back(v);
    }
    shared_ = std::move(t);
    // Evaluation and predictions read the model's other parts here, copied
    // from their holders (SyncSharedParts).
    Replica::AddRestoreNodes(ModelPartsElsewhere(), &eval_graph);
  }
  {
    MutexLock l(sync_mu_);
    synced_step_ = -1;
  }
  FS_ASSIGN_OR_RETURN(train_session_,
                      Session::Create(shared_ ? shared_->graphs[0] : graph_.graph, so));
  so.resources = train_session_->shared_resources();
  FS_ASSIGN_OR_RETURN(eval_session_, Session::Create(eval_graph, so));
  InputPipelineOptions po;
  po.batch_size = spec_.input.batch_size;
  po.shuffle = spec_.input.shuffle;
  po.seed = spec_.seed;
  po.epochs = spec_.input.epochs;
  po.drop_remainder = spec_.input.drop_remainder;
  po.prefetch = spec_.input.prefetch;
  pipeline_options_ = po;
  if (load_data) {
    StatusOr<std::unique_ptr<InputPipeline>> p = InputPipeline::Create(train_data_, po);
    if (!p.ok()) return p.status().WithPrefix("input");
    pipeline_ = std::move(p).value();
  }
  std::vector<Tensor> out;
  FS_RETURN_IF_ERROR(train_session_->Run({}, {}, {graph_.init_op, graph_.optimizer_init}, &out));
  replicas_.clear();
  replicas_.push_back(Replica::InProcess(train_session_.get(), nullptr, nullptr));
  // Without data (serving predictions) replica 0 is all it takes.
  if (spec_.replicas > 1 && load_data) {
    FS_RETURN_IF_ERROR(ReplicasAcrossTasks() ? StartReplicasAcrossTasks() : StartReplicas());
  }
  // The ONNX file's values, then init_from's.
  auto assign = [&](const std::vector<std::pair<std::string, Tensor>>& values,
                    const std::string& what) -> Status {
    FS_RETURN_IF_ERROR(CheckInitialValues(graph_, values, what));
    using Named = std::vector<std::pair<std::string, Tensor>>;
    FS_ASSIGN_OR_RETURN(Named parts, SplitLogical(values, graph_.partitioned));
    std::map<std::string, const Tensor*> by_name;
    for (const auto& [name, t] : parts) by_name[name] = &t;
    for (int i = 0; i < int(replicas_.size()); ++i) {
      Status s = AssignReplicaVariables(i, HeldBy(i, graph_.model_variables), by_name);
      if (!s.ok()) return s.WithPrefix(what + ": replica " + std::to_string(i));
    }
    return Status();
  };
  if (model_values_ != nullptr && !model_values_->empty()) {
    FS_RETURN_IF_ERROR(assign(*model_values_, "model.onnx"));
  }
  if (!initial_values_.empty()) {
    FS_RETURN_IF_ERROR(assign(initial_values_, "init_from"));
    initial_values_.clear();
  }
  started_ = true;
  return Status();
}

StatusOr<std::string> TrainingJob::ExportOnnx() {
  if (onnx_source_ == nullptr) {
    return FailedPrecondition("the job was given as \"graph\", not as an ONNX model; only jobs of ONNX "
                              "models export as ONNX so far");
  }
  FS_ASSIGN_OR_RETURN(InitialValues values, ModelValues());
  return ExportTrainedModel(*onnx_source_, values);
}

std::unique_ptr<TrainingJob> TrainingJob::Unstarted() const {
  std::unique_ptr<TrainingJob> job(new TrainingJob(spec_, options_, graph_));
  job->model_values_ = model_values_;
  job->onnx_source_ = onnx_source_;
  return job;
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> TrainingJob::ModelValues() {
  if (!started_) return FailedPrecondition("the job has not started");
  FS_ASSIGN_OR_RETURN(auto out, ReadHeldVariables(graph_.model_variables));
  return AssembleLogical(std::move(out), graph_.partitioned);
}

StatusOr<std::shared_ptr<Variable>> TrainingJob::FindVariable(const std::string& name) const {
  return Replica::FindVariable(train_session_.get(), name);
}

StatusOr<JobSnapshot> TrainingJob::Snapshot() {
  if (!started_) return FailedPrecondition("the job has not started");
  JobSnapshot s;
  s.step = step_;
  if (pipeline_) s.position = pipeline_->position();
  s.seed = spec_.seed;
  // Shares the buffers; a variable copies its buffer before its next write.
  FS_ASSIGN_OR_RETURN(s.variables, ReadHeldVariables(graph_.variables));
  // Partitioned tables as one logical tensor each, so that the snapshot
  // restores with any partition count.
  FS_ASSIGN_OR_RETURN(s.variables, AssembleLogical(std::move(s.variables), graph_.partitioned));
  FS_ASSIGN_OR_RETURN(s.kernel_states, train_session_->ExportKernelStates());
  return s;
}

Status TrainingJob::Restore(const JobSnapshot& snapshot) {
  if (!started_) return FailedPrecondition("the job has not started");
  if (snapshot.seed != spec_.seed) {
    return FailedPrecondition("the checkpoint was taken with seed " + std::to_string(snapshot.seed) +
                              " but the job has seed " + std::to_string(spec_.seed));
  }
  StatusOr<std::vector<std::pair<std::string, Tensor>>> parts =
      SplitLogical(snapshot.variables, graph_.partitioned);
  if (!parts.ok()) return parts.status().WithPrefix("checkpoint");
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : *parts) by_name[name] = &t;
  std::vector<std::pair<std::shared_ptr<Variable>, const Tensor*>> assign;
  for (const std::string& v : graph_.variables) {
    auto it = by_name.find(v);
    if (it == by_name.end()) {
      const std::string name = LogicalName(v, graph_.partitioned);
      return InvalidArgument("the checkpoint has no value for variable '" + name + "'", name);
    }
    if (!Holds(0, v)) continue;  // its holder's (RestoreReplica)
    FS_ASSIGN_OR_RETURN(std::shared_ptr<Variable> var, FindVariable(v));
    const Tensor& t = *it->second;
    if (t.dtype() != var->dtype() || !var->declared_shape().IsCompatibleWith(t.shape())) {
      return InvalidArgument("variable '" + v + "' is " + std::string(DataTypeName(var->dtype())) +
                                 var->declared_shape().ToString() + " but the checkpoint holds " +
                                 std::string(DataTypeName(t.dtype())) + t.shape().ToString(),
                             v);
    }
    assign.emplace_back(std::move(var), &t);
  }
  std::unique_ptr<InputPipeline> pipeline;
  if (pipeline_) {
    StatusOr<std::unique_ptr<InputPipeline>> p =
        InputPipeline::Create(train_data_, pipeline_options_, snapshot.position);
    if (!p.ok()) return p.status().WithPrefix("checkpoint: input position");
    pipeline = std::move(p).value();
  }
  for (auto& [var, t] : assign) FS_RETURN_IF_ERROR(var->Assign(*t));
  // The random states of the initializers of a table taken with another
  // partition count ("init/<table>/part_<p>/...", or "init/<table>/..." of
  // a table partitioned here; they ran before the snapshot and never run
  // again) do not carry over; any other unknown node is an error.
  auto table_init = [&](const std::string& node) {
    if (!node.starts_with("init/")) return false;
    if (node.find("/part_") != std::string::npos) return true;
    for (const PartitionedVariable& t : graph_.partitioned) {
      if (node.starts_with("init/" + t.name + "/")) return true;
    }
    return false;
  };
  std::map<std::string, std::string> states = snapshot.kernel_states;
  for (auto it = states.begin(); it != states.end();) {
    const bool other_part_init =
        table_init(it->first) && train_session_->graph()->FindNode(it->first) == nullptr;
    it = other_part_init ? states.erase(it) : std::next(it);
  }
  FS_RETURN_IF_ERROR(train_session_->ImportKernelStates(states));
  for (int i = 1; i < int(replicas_.size()); ++i) {
    FS_RETURN_IF_ERROR(RestoreReplica(i, by_name, states));
  }
  if (pipeline) {
    pipeline_->Cancel();
    pipeline_ = std::move(pipeline);
  }
  step_ = snapshot.step;
  done_ = Finished();
  return Status();
}

Status CheckInitialValues(const TrainingGraph& graph,
                          const std::vector<std::pair<std::string, Tensor>>& values,
                          const std::string& what) {
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(graph.graph));
  // A partitioned table is checked as the logical tensor, then as its parts.
  StatusOr<std::vector<std::pair<std::string, Tensor>>> parts =
      SplitLogical(values, graph.partitioned);
  if (!parts.ok()) return parts.status().WithPrefix(what);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : *parts) by_name[name] = &t;
  for (const std::string& v : graph.model_variables) {
    const Node* n = g.FindNode(v);
    if (n == nullptr) continue;
    auto it = by_name.find(v);
    if (it == by_name.end()) {
      const std::string name = LogicalName(v, graph.partitioned);
      return InvalidArgument(what + ": the checkpoint has no variable '" + name + "'", name);
    }
    const Tensor& t = *it->second;
    DataType want = n->output_type(0);
    const PartialShape& shape = n->output_shape(0);
    if (t.dtype() != want || !shape.IsCompatibleWith(t.shape())) {
      return InvalidArgument(what + ": variable '" + v + "' is " + std::string(DataTypeName(want)) +
                                 shape.ToString() + " in this graph but " +
                                 std::string(DataTypeName(t.dtype())) + t.shape().ToString() +
                                 " in the checkpoint",
                             v);
    }
  }
  return Status();
}

std::string EncodeSnapshotMetadata(const JobSnapshot& s) {
  nlohmann::json j;
  j["format"] = "flowstate.job_snapshot.v1";
  j["step"] = s.step;
  j["epoch"] = s.position.epoch;
  j["offset"] = s.position.offset;
  j["seed"] = std::to_string(s.seed);  // uint64: as a string, JSON numbers lose bits
  nlohmann::json k = nlohmann::json::object();
  for (const auto& [node, state] : s.kernel_states) k[node] = api::Base64Encode(state);
  j["kernel_states"] = std::move(k);
  return j.dump();
}

Status DecodeSnapshotMetadata(std::string_view text, JobSnapshot* s) {
  // An imported checkpoint's metadata is client data like any request body.
  FS_RETURN_IF_ERROR(api::CheckJsonDepth(text, "checkpoint metadata"));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& why) {
    return InvalidArgument("checkpoint metadata: " + why);
  };
  if (!j.is_object() || j.value("format", "") != "flowstate.job_snapshot.v1") {
    return bad("not a flowstate job snapshot (format flowstate.job_snapshot.v1)");
  }
  for (const char* f : {"step", "epoch", "offset"}) {
    if (!j.contains(f) || !j[f].is_number_integer()) return bad(std::string(f) + " must be an integer");
  }
  if (!j.contains("seed") || !j["seed"].is_string()) return bad("seed must be a string");
  s->step = j["step"].get<int64_t>();
  s->position.epoch = j["epoch"].get<int64_t>();
  s->position.offset = j["offset"].get<int64_t>();
  try {
    s->seed = std::stoull(j["seed"].get<std::string>());
  } catch (...) {
    return bad("seed is not a number");
  }
  s->kernel_states.clear();
  if (j.contains("kernel_states")) {
    if (!j["kernel_states"].is_object()) return bad("kernel_states must be an object");
    for (const auto& [node, v] : j["kernel_states"].items()) {
      if (!v.is_string()) return bad("kernel_states." + node + " must be a string");
      std::string b64 = v.get<std::string>();
      StatusOr<size_t> n = api::Base64DecodedSize(b64);
      if (!n.ok()) return bad("kernel_states." + node + ": " + n.status().message());
      std::string bytes(*n, '\0');
      FS_RETURN_IF_ERROR(api::Base64Decode(b64, bytes.data(), bytes.size()));
      s->kernel_states[node] = std::move(bytes);
    }
  }
  return Status();
}

std::vector<std::string> TrainingJob::DeviceNames() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& spec) {
    StatusOr<DeviceName> d = DeviceName::Parse(spec);
    if (!d.ok()) return;  // checked by Create (devices) or the graph
    std::vector<Device*> m = options_.devices->Matching(*d);
    if (!m.empty() && std::find(out.begin(), out.end(), m.front()->name()) == out.end()) {
      out.push_back(m.front()->name());
    }
  };
  for (const std::string& spec : spec_.devices) add(spec);
  if (out.empty()) out.push_back(options_.devices->default_device()->name());
  // And the devices of this task that nodes of the graph ask for (a node
  // pinned to CPU:1, a table's parts placed by partition_devices).
  for (const NodeDef& n : graph_.graph.nodes) {
    if (!n.device.empty()) add(n.device);
  }
  return out;
}

int64_t TrainingJob::steps_per_epoch() const {
  int64_t batches = 0;
  if (pipeline_) {
    batches = pipeline_->batches_per_epoch();
  } else {
    int64_t n = train_data_.num_examples(), b = spec_.input.batch_size;
    batches = spec_.input.drop_remainder ? n / b : (n + b - 1) / b;
  }
  // Replicas: a step takes up to batches_per_step() batches of one epoch.
  return (batches + batches_per_step() - 1) / batches_per_step();
}

bool TrainingJob::FinishedAfter(int64_t steps) const {
  if (!pipeline_) return steps >= total_steps();
  // By the input's position, so that a job restored from a checkpoint of
  // another number of replicas (other steps per epoch) ends at the end of
  // its data.
  if (spec_.max_steps && steps >= *spec_.max_steps) return true;
  return spec_.input.epochs > 0 && pipeline_->position().epoch >= spec_.input.epochs;
}

StepResult TrainingJob::LastStep() const {
  StepResult r;
  r.step = step_;
  r.done = done_;
  if (pipeline_ && step_ > 0) {
    // The next batch at the start of an epoch: the last step ended the one before.
    const PipelinePosition p = pipeline_->position();
    r.epoch_end = p.offset == 0 && p.epoch > 0;
    r.epoch = r.epoch_end ? p.epoch - 1 : p.epoch;
  }
  return r;
}

int64_t TrainingJob::total_steps() const {
  int64_t total = steps_per_epoch() * spec_.input.epochs;
  if (pipeline_ && spec_.input.epochs > 0) {
    // From the input's position: the steps done plus those its data has
    // left (a job restored from a checkpoint of another number of replicas
    // took another number of steps to get there).
    const PipelinePosition p = pipeline_->position();
    const int64_t n = batches_per_step(), b = spec_.input.batch_size;
    const int64_t left_in_epoch =
        p.epoch >= spec_.input.epochs
            ? 0
            : (std::max<int64_t>(0, pipeline_->batches_per_epoch() - p.offset / b) + n - 1) / n;
    const int64_t later_epochs = std::max<int64_t>(0, spec_.input.epochs - p.epoch - 1);
    total = step_ + left_in_epoch + later_epochs * steps_per_epoch();
  }
  if (spec_.max_steps) total = std::min(total, *spec_.max_steps);
  return total;
}

Status TrainingJob::OnNanStep(const Status& nan, StepResult* r) {
  std::string what = nan.message();
  if (size_t k = what.find("(CheckNumerics): "); k != std::string::npos) what = what.substr(k + 17);
  what = "step " + std::to_string(step_ + 1) + ": " + what;
  if (spec_.on_nan == OnNan::kFail) {
    ++step_;
    done_ = true;
    return InvalidArgument(what + "; no update was applied and the job fails (on_nan \"fail\"; "
                                  "\"skip_step\" skips such steps)",
                           nan.node());
  }
  r->skipped = true;
  r->nan_message = what + "; the step was skipped";
  r->loss = std::nan("");
  return Status();
}

StatusOr<StepResult> TrainingJob::Step() {
  if (!started_) return FailedPrecondition("the job has not started");
  if (done_) return FailedPrecondition("the job has finished");
  if (!pipeline_) return FailedPrecondition("the job was started without its data");
  if (stopped_for_read_) {
    return Cancelled("the replicas' chunk was stopped after step " + std::to_string(step_) +
                     " to read the shared tables; the replicas are started again");
  }
  if (spec_.replicas > 1) return StepReplicas();
  // The global batch of a job with replicas run with one: one step on the
  // step's batches together.
  FS_ASSIGN_OR_RETURN(std::vector<Batch> step, NextStepBatches(*pipeline_, batches_per_step()));
  Batch b = ConcatBatches(step);
  step.clear();
  std::vector<std::pair<std::string, Tensor>> feeds;
  feeds.reserve(b.components.size());
  for (auto& [name, t] : b.components) feeds.emplace_back(name, std::move(t));
  std::vector<Tensor> out;
  // A traced step (JobSpec::trace_steps, ascending): its ops are recorded.
  std::unique_ptr<StepTraceCollector> trace;
  if (std::binary_search(spec_.trace_steps.begin(), spec_.trace_steps.end(), step_ + 1)) {
    trace = std::make_unique<StepTraceCollector>();
  }
  RunOptions run_options;
  run_options.trace = trace.get();
  Status run = train_session_->Run(feeds, {graph_.loss}, {graph_.train_op}, &out, nullptr, run_options);
  StepResult r;
  if (trace) r.trace_json = StepTraceToChromeJson(MakeStepTrace(*trace, step_ + 1));
  if (!run.ok()) {
    if (std::find(graph_.numerics_checks.begin(), graph_.numerics_checks.end(), run.node()) ==
        graph_.numerics_checks.end()) {
      return run;
    }
    // A NaN/Inf loss or gradient: the batch is used, no update applied.
    FS_RETURN_IF_ERROR(OnNanStep(run, &r));
    out.assign(1, Tensor::Scalar<double>(std::nan("")));
  }
  r.step = ++step_;
  r.epoch = b.epoch;
  r.loss = out[0].ElementAsDouble(0);
  r.examples = b.size;
  r.epoch_end = pipeline_->position().epoch != b.epoch;
  r.done = Finished();
  done_ = r.done;
  return r;
}

bool TrainingJob::IsNanError(const Status& s) const {
  return !s.ok() && s.code() == Code::kInvalidArgument &&
         std::find(graph_.numerics_checks.begin(), graph_.numerics_checks.end(), s.node()) !=
             graph_.numerics_checks.end();
}

StatusOr<std::map<std::string, double>> TrainingJob::Evaluate() {
  if (!started_) return FailedPrecondition("the job has not started");
  if (!spec_.eval) return FailedPrecondition("the job has no eval section");
  FS_RETURN_IF_ERROR(SyncSharedParts(step_));
  InputPipelineOptions po;
  po.batch_size = spec_.eval->batch_size;
  po.shuffle = false;
  po.epochs = 1;
  po.prefetch = 2;
  FS_ASSIGN_OR_RETURN(std::unique_ptr<InputPipeline> p, InputPipeline::Create(eval_data_, po));
  const std::vector<std::string>& metrics = spec_.eval->metrics;
  std::vector<double> sums(metrics.size(), 0.0);
  int64_t seen = 0;
  for (;;) {
    StatusOr<Batch> b = p->Next();
    if (!b.ok()) {
      if (b.status().code() == Code::kOutOfRange) break;
      return b.status();
    }
    std::vector<std::pair<std::string, Tensor>> feeds;
    for (auto& [name, t] : b->components) feeds.emplace_back(name, std::move(t));
    std::vector<Tensor> out;
    FS_RETURN_IF_ERROR(eval_session_->Run(feeds, metrics, {}, &out));
    for (size_t i = 0; i < metrics.size(); ++i) sums[i] += out[i].ElementAsDouble(0) * double(b->size);
    seen += b->size;
  }
  std::map<std::string, double> result;
  for (size_t i = 0; i < metrics.size(); ++i) result[metrics[i]] = seen ? sums[i] / double(seen) : 0.0;
  return result;
}

bool TrainingJob::PredictMayWait(const std::vector<std::string>& inputs,
                                 const std::vector<std::string>& fetches) const {
  if (!started_) return true;
  return eval_session_->StepMayWait(inputs, fetches, {});
}

Status TrainingJob::Predict(const std::vector<std::pair<std::string, Tensor>>& inputs,
                            const std::vector<std::string>& fetches, std::vector<Tensor>* outputs,
                            std::chrono::milliseconds timeout) {
  if (!started_) return FailedPrecondition("the job has not started");
  if (shared_) {
    // The parts held elsewhere as of the last evaluation, or copied now
    // for the first prediction (this may run beside a step).
    MutexLock l(sync_mu_);
    if (synced_step_ < 0) {
      l.Unlock();
      FS_RETURN_IF_ERROR(SyncSharedParts(0));
    }
  }
  RunOptions options;
  options.timeout = timeout;
  return eval_session_->Run(inputs, fetches, {}, outputs, nullptr, options);
}

}  // namespace flowstate
