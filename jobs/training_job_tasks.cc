// TrainingJob's replicas on other tasks of a cluster (training_job.h):
// sessions whose graphs run on the tasks, each with its own Gloo
// participant (_CreateReplicaComm) and its own input (_ReplicaInput under
// the task's data root), and the chunks of steps those tasks run on their
// own. The replicas' common step and checks are in training_job_replicas.cc.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <span>
#include <thread>

#include "jobs/training_job.h"
#include "jobs/replica.h"
#include "jobs/replica_placement.h"
#include "devices/device_name.h"
#include "api/views_json.h"
#include "jobs/step_trace_view.h"
#include "scheduler/cluster_view.h"
#include "scheduler/collective.h"
#include "scheduler/replica_comm.h"
#include "scheduler/step_trace.h"
#include "state/replica_input.h"
#include "state/variable.h"
#include "graph/mutex.h"


namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;

// The nodes of a remote replica's graph that report its all-reduce totals:
// one run after its step (fetched with it), one on its own (after a chunk).
constexpr const char* kRemoteStatsNode = "_replica_comm_stats";
constexpr const char* kRemoteTotalsNode = "_replica_comm_totals";
// About how long a chunk of steps that replicas on other tasks run on their
// own lasts: pause, cancel and rebuilds wait for its end.
constexpr double kChunkSeconds = 1.0;
constexpr int64_t kMaxChunkSteps = 1000;
// A remote replica's input, read on its task (state/replica_input.h), and
// the position of the step's first batch: fed (a step run from here), or
// the value of a variable on the task that a seek sets before a chunk of
// steps the task runs on its own.
constexpr const char* kReplicaInputNode = "_replica_input";
constexpr const char* kReplicaPositionNode = "_replica_input/position";
constexpr const char* kReplicaPositionVar = "_replica_input/position_var";
constexpr const char* kReplicaSeekValue = "_replica_input/seek_value";
constexpr const char* kReplicaSeek = "_replica_input/seek";

Tensor PositionTensor(const PipelinePosition& p) {
  return Tensor::FromVector<int64_t>({p.epoch, p.offset});
}

}  // namespace

bool TrainingJob::ReplicasAcrossTasks() const {
  return options_.remote != nullptr && flowstate::ReplicasAcrossTasks(spec_, *options_.devices);
}

std::string TrainingJob::ReplicaHost(int i) const {
  if (i == 0) return options_.remote->TaskHost(options_.remote->local_task());
  // The task its device names, this one included (replicas_per_task > 1).
  StatusOr<DeviceName> d = DeviceName::Parse(spec_.devices[i]);
  if (!d.ok() || d->job.empty() || d->task < 0) return "";
  return options_.remote->TaskHost("/job:" + d->job + "/task:" + std::to_string(d->task));
}

Status TrainingJob::CheckReplicasAcrossTasks() const {
  const int n = spec_.replicas;
  if (int(spec_.devices.size()) != n) {
    return InvalidArgument("devices: replicas on other tasks need one device per replica (" +
                           std::to_string(n) + "), got " + std::to_string(spec_.devices.size()));
  }
  {
    StatusOr<DeviceName> d0 = DeviceName::Parse(spec_.devices[0]);
    if (!d0.ok() || options_.devices->Matching(*d0).empty()) {
      return InvalidArgument("devices[0]: replica 0 must be on this task (it is fed, checkpointed "
                             "and serves predictions here)");
    }
  }
  if (options_.collective_store.empty()) {
    return FailedPrecondition("replicas on other tasks need a collective store (this task's "
                              "gRPC address)");
  }
  return Status();
}

Status TrainingJob::AddReplicaInput(int i, GraphDef* g) const {
  FS_ASSIGN_OR_RETURN(DataSource source, ToDataSource(spec_.input, "input"));
  FS_ASSIGN_OR_RETURN(DeviceName cpu, DeviceName::Parse(spec_.devices[i]));
  cpu.type = "CPU";
  cpu.id = 0;
  std::vector<std::string> names;
  std::vector<DataType> dtypes;
  std::vector<PartialShape> shapes;
  std::map<std::string, int> output;
  for (const auto& [name, t] : train_data_.components()) {
    output[name] = int(names.size());
    names.push_back(name);
    dtypes.push_back(t.dtype());
    shapes.push_back(PartialShape(std::vector<int64_t>(t.shape().dims().begin() + 1, t.shape().dims().end())));
  }
  output[graph_.replica_examples] = int(names.size());
  auto node = [&](const char* name, const char* op, std::vector<std::string> inputs) {
    NodeDef n;
    n.name = name;
    n.op = op;
    n.device = cpu.ToString();
    n.inputs = std::move(inputs);
    return n;
  };
  NodeDef var = node(kReplicaPositionVar, "Variable", {});
  var.attrs = {{"dtype", AttrValue(DataType::kInt64)}, {"shape", AttrValue(PartialShape({2}))}};
  NodeDef position = node(kReplicaPositionNode, "Identity", {kReplicaPositionVar});
  position.attrs = {{"T", AttrValue(DataType::kInt64)}};
  NodeDef seek_value = node(kReplicaSeekValue, "Placeholder", {});
  seek_value.attrs = {{"dtype", AttrValue(DataType::kInt64)}, {"shape", AttrValue(PartialShape({2}))}};
  NodeDef seek = node(kReplicaSeek, "Assign", {kReplicaPositionVar, kReplicaSeekValue});
  seek.attrs = {{"T", AttrValue(DataType::kInt64)}, {"validate_shape", AttrValue(true)}};
  NodeDef input;
  input.name = kReplicaInputNode;
  input.op = "_ReplicaInput";
  input.device = cpu.ToString();
  input.inputs = {position.name};
  input.attrs = {{"dtypes", AttrValue(dtypes)},
                 {"names", AttrValue(names)},
                 {"shapes", AttrValue(shapes)},
                 {"source", AttrValue(EncodeDataSource(source))},
                 {"num_examples", AttrValue(train_data_.num_examples())},
                 {"batch_size", AttrValue(pipeline_options_.batch_size)},
                 {"shuffle", AttrValue(pipeline_options_.shuffle)},
                 {"seed", AttrValue(int64_t(pipeline_options_.seed))},
                 {"epochs", AttrValue(pipeline_options_.epochs)},
                 {"drop_remainder", AttrValue(pipeline_options_.drop_remainder)},
                 {"replica", AttrValue(int64_t(i))},
                 {"num_replicas", AttrValue(int64_t(spec_.replicas))},
                 {"batches_per_step", AttrValue(int64_t(batches_per_step()))}};
  // The placeholders the master fed become the node's outputs.
  for (NodeDef& n : g->nodes) {
    auto it = output.find(n.name);
    if (it == output.end() || n.op != "Placeholder") continue;
    DataType t = it->second < int(dtypes.size()) ? dtypes[size_t(it->second)] : DataType::kFloat64;
    n.op = "Identity";
    n.inputs = {input.name + ":" + std::to_string(it->second)};
    n.attrs = {{"T", AttrValue(t)}};
  }
  for (NodeDef* n : {&var, &position, &seek_value, &seek, &input}) g->nodes.push_back(std::move(*n));
  return Status();
}

Status TrainingJob::CheckReplicaInputs() {
  // Each task loads its copy of the data now (the first step's input), so
  // that a missing or different file fails the start naming the task.
  const int n = spec_.replicas;
  std::vector<Status> loaded(n);
  std::vector<std::thread> threads;
  const Tensor position = PositionTensor(pipeline_->position());
  for (int i = 1; i < n; ++i) {
    threads.emplace_back([&, i] {
      std::vector<Tensor> out;
      loaded[i] = replica_session(i)->Run({{kReplicaPositionNode, position}},
                                          {std::string(kReplicaInputNode) + ":" +
                                           std::to_string(train_data_.num_components())},
                                          {}, &out);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 1; i < n; ++i) {
    if (!loaded[i].ok()) {
      return loaded[i].WithPrefix("replica " + std::to_string(i) + " on " + spec_.devices[i]);
    }
  }
  return Status();
}

Status TrainingJob::StartReplicasAcrossTasks() {
  const int n = spec_.replicas;
  FS_RETURN_IF_ERROR(CheckReplicasAcrossTasks());
  ReplicaGroupSpec place;  // each replica's, but for its rank and host
  place.num_buckets = shared_ ? shared_->num_buckets : int(graph_.allreduce.size());
  place.allreduce_timeout = options_.allreduce_timeout;
  // Backup replicas: the first n - k to finish a step's backward pass
  // contribute, decided in the group's store (every rank's race meets there).
  place.contributors = spec_.backup_replicas > 0 ? n - spec_.backup_replicas : 0;
  const int contributors = place.contributors;
  CollectiveGroupSpec& group = place.group;
  group.kind = "gloo";
  group.store_address = options_.collective_store;
  // One prefix per membership: a job without one gets a fresh one of this
  // process's.
  static std::atomic<int64_t> memberships{0};
  group.prefix = !options_.collective_prefix.empty()
                     ? options_.collective_prefix
                     : "replicas/" + std::to_string(memberships.fetch_add(1)) + "/m0";
  group.size = n;
  group.timeout = std::chrono::milliseconds(30000);
  race_.reset();
  dropped_.clear();
  race_ended_ = 0;
  (void)JoinLaggards();  // a new membership: the old group's chunks are over
  progress_.reset();
  pending_checks_.clear();
  remote_totals_.assign(n, {0.0, 0.0});
  // Replicas 1..n-1: a session whose graph runs on task i, with a
  // _CreateReplicaComm node there (its worker session gets the participant).
  replicas_.resize(1);  // replica 0, on train_session_; the others below
  std::vector<std::string> create_nodes(n);
  for (int i = 1; i < n; ++i) {
    GraphDef g = shared_ ? shared_->graphs[size_t(i)] : graph_.graph;
    ReplicaGroupSpec mine = place;
    mine.group.rank = i;
    mine.group.host = ReplicaHost(i);
    NodeDef c = mine.ToNode("_replica_comm_" + std::to_string(i), spec_.devices[i]);
    create_nodes[i] = c.name;
    Replica::AddRestoreNodes(ReplicaVariables(i), &g);
    FS_RETURN_IF_ERROR(AddReplicaInput(i, &g));
    // The replica's all-reduce totals, fetched with each step (its wait
    // happens there, not here).
    NodeDef stats;
    stats.name = kRemoteStatsNode;
    stats.op = "_ReplicaCommStats";
    stats.device = spec_.devices[i];
    stats.attrs["group"] = AttrValue(place.comm);
    stats.inputs = {"^" + graph_.train_op};
    NodeDef totals = stats;
    totals.name = kRemoteTotalsNode;
    totals.inputs.clear();
    g.nodes.push_back(std::move(totals));
    // Every node of replica i on task i (a partial device, e.g.
    // "/device:CPU:1", on that task's device of that name).
    FS_ASSIGN_OR_RETURN(DeviceName task, DeviceName::Parse(spec_.devices[i]));
    for (NodeDef& node : g.nodes) {
      if (node.device.empty()) {
        node.device = spec_.devices[i];
        continue;
      }
      StatusOr<DeviceName> d = DeviceName::Parse(node.device);
      if (!d.ok()) return d.status().WithPrefix("node '" + node.name + "'");
      if (d->job.empty()) d->job = task.job;
      if (d->replica < 0) d->replica = task.replica;
      if (d->task < 0) d->task = task.task;
      node.device = d->ToString();
    }
    g.nodes.push_back(std::move(c));
    g.nodes.push_back(std::move(stats));
    SessionOptions so = SessionOptionsOfJob();
    so.remote = options_.remote;
    StatusOr<std::unique_ptr<Session>> s = Session::Create(g, so);
    if (!s.ok()) return s.status().WithPrefix("replica " + std::to_string(i));
    // A replica on this task (replicas_per_task > 1) reads its input
    // beneath this task's data root, from the session's own resources.
    (void)(*s)->resource_manager()->LookupOrCreate<TaskDataRoot>(
        kTaskContainer, kDataRootResource,
        [&]() -> StatusOr<std::shared_ptr<TaskDataRoot>> { return std::make_shared<TaskDataRoot>(options_.data_root); });
    std::vector<Tensor> out;
    Status init = (*s)->Run({}, {}, {graph_.init_op, graph_.optimizer_init}, &out);
    if (!init.ok()) return init.WithPrefix("replica " + std::to_string(i));
    replicas_.push_back(Replica::OnTask(std::move(s).value()));
  }
  FS_RETURN_IF_ERROR(CheckReplicaInputs());
  // Every rank joins at once: replica 0 here, the others on their tasks.
  std::vector<Status> joined(n);
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) {
    threads.emplace_back([&, i] {
      std::vector<Tensor> out;
      joined[i] = replicas_[i]->session()->Run({}, {}, {create_nodes[i]}, &out);
    });
  }
  std::shared_ptr<ReplicaComm> comm0;
  {
    CollectiveGroupSpec g0 = group;
    g0.rank = 0;
    g0.host = ReplicaHost(0);
    if (contributors > 0) {
      StatusOr<std::shared_ptr<StepRace>> race = CreateStepRace(g0, contributors);
      if (race.ok()) {
        race_ = std::move(race).value();
        dropped_.assign(n, 0);
      } else {
        joined[0] = race.status();
      }
    }
    StatusOr<std::unique_ptr<Collective>> c = CreateCollective(g0);
    if (c.ok() && joined[0].ok()) {
      ReplicaComm::Options o;
      o.collective = std::shared_ptr<Collective>(std::move(c).value());
      o.num_buckets = place.num_buckets;
      o.timeout = options_.allreduce_timeout;
      o.race = race_;
      comm0 = std::make_shared<ReplicaComm>(std::move(o));
    } else if (!c.ok()) {
      joined[0] = c.status();
    }
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    if (!joined[i].ok()) return joined[i].WithPrefix("replica " + std::to_string(i));
  }
  StatusOr<std::shared_ptr<ReplicaComm>> r =
      train_session_->resource_manager()->LookupOrCreate<ReplicaComm>(
          kReplicaContainer, place.comm,
          [&]() -> StatusOr<std::shared_ptr<ReplicaComm>> { return comm0; });
  if (!r.ok()) return r.status();
  // Only replica 0's participant is in this process.
  replicas_[0] = Replica::InProcess(train_session_.get(), nullptr, *r);
  return Status();
}

Status TrainingJob::RunRemoteReplica(int i, const Batch* batch, ReplicaStepStats* stats) {
  // A replica on another task: it reads its own examples there (its
  // _ReplicaInput, fed the position of the step's first batch). Without a
  // batch of its own (or abandoned) it computes on the step's first batch
  // with 0 examples: its all-reduce contribution is zeros and it applies
  // the others' average. `batch` only counts its examples here.
  const auto start = Clock::now();
  if (batch != nullptr) {
    // The test straggler abandons its batch when the step goes on without
    // it, and joins with 0 examples.
    StatusOr<bool> late = TestStraggler(i, stats);
    if (!late.ok()) return late.status();
    if (*late) batch = nullptr;
  }
  std::vector<std::pair<std::string, Tensor>> feeds;
  feeds.emplace_back(kReplicaPositionNode, PositionTensor(step_position_));
  if (batch == nullptr) feeds.emplace_back(graph_.replica_examples, Tensor::Scalar<double>(0.0));
  stats->examples = batch != nullptr ? batch->size : 0;
  std::vector<Tensor> out;
  RunOptions run_options;
  run_options.trace = step_trace_;  // records this task's part (none, or the fed inputs)
  Status s = replica_session(i)->Run(feeds, {graph_.loss, kRemoteStatsNode}, {graph_.train_op}, &out,
                                     nullptr, run_options);
  if (!s.ok() && !IsNanError(s) && replicas_[0]->comm() != nullptr) replicas_[0]->comm()->Abort(s);
  if (s.ok()) {
    stats->loss = out[0].ElementAsDouble(0);
    // The replica's totals since its group began: this step's share.
    const double wait = out[1].ElementAsDouble(0), bytes = out[1].ElementAsDouble(1);
    std::pair<double, double>& before = remote_totals_[i];
    stats->allreduce_seconds = wait - std::min(before.first, wait);
    stats->allreduce_bytes = int64_t(bytes - std::min(before.second, bytes));
    before = {wait, bytes};
  }
  stats->step_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return s.ok() ? Status() : s.WithPrefix("replica " + std::to_string(i));
}

int64_t TrainingJob::ChunkSteps() const {
  int64_t k = step_seconds_ > 0 ? int64_t(kChunkSeconds / step_seconds_) : 1;
  k = std::clamp<int64_t>(k, 1, kMaxChunkSteps);
  // Steps do not cross an epoch's end (evaluation, the epoch's last short
  // step): the batches of this epoch after the step's first, by steps.
  const int64_t b = spec_.input.batch_size, per_step = batches_per_step();
  const int64_t left = pipeline_->batches_per_epoch() - step_position_.offset / b;
  k = std::min(k, std::max<int64_t>(1, (left + per_step - 1) / per_step));
  if (spec_.max_steps) k = std::min(k, std::max<int64_t>(1, *spec_.max_steps - step_));
  if (spec_.check_replicas_every > 0) {
    k = std::min(k, spec_.check_replicas_every - step_ % spec_.check_replicas_every);
  }
  // A traced step runs alone (this step is not one: steps are 1-based).
  auto next = std::upper_bound(spec_.trace_steps.begin(), spec_.trace_steps.end(), step_ + 1);
  if (next != spec_.trace_steps.end()) k = std::min(k, *next - (step_ + 1));
  return std::max<int64_t>(k, 1);
}

void TrainingJob::StartChunk(int64_t steps) {
  const int n = spec_.replicas;
  if (progress_ == nullptr) {
    progress_ = std::make_shared<RemoteProgress>();
    MutexLock l(progress_->mu);
    progress_->done_through.assign(n, 0);
    progress_->outstanding.assign(n, 0);
    progress_->failed.assign(n, Status());
    progress_->sums.assign(n, {});
  }
  laggards_.resize(n);
  auto c = std::make_unique<RemoteChunk>();
  c->end_step = step_ + steps;
  c->steps = steps;
  c->first_race_step = race_step_;
  c->start = Clock::now();
  c->threads.resize(n);
  const Tensor position = PositionTensor(step_position_);
  const int64_t race_end = race_step_ + steps;
  // A chunk that ends at a replica check: each task's thread reads its
  // replica's variables then, so that a replica that ends it late is
  // checked at that step too (CheckReplicasAgree).
  const int64_t check_step = spec_.check_replicas_every > 0 &&
                                     c->end_step % spec_.check_replicas_every == 0
                                 ? c->end_step
                                 : -1;
  {
    MutexLock l(progress_->mu);
    for (int i = 1; i < n; ++i) ++progress_->outstanding[i];
  }
  for (int i = 1; i < n; ++i) {
    // A laggard's next chunk begins when its last one ends.
    std::thread before = std::move(laggards_[i]);
    c->threads[i] = std::thread([this, i, steps, position, race_end, check_step,
                                 progress = progress_, before = std::move(before)]() mutable {
      if (before.joinable()) before.join();
      // Where its input starts, then the steps: two messages a chunk.
      std::vector<Tensor> out;
      Session* session = replica_session(i);
      Status s = session->Run({{kReplicaSeekValue, position}}, {}, {kReplicaSeek}, &out);
      RunOptions o;
      o.iterations = int(steps);
      if (s.ok()) s = session->Run({}, {}, {graph_.train_op}, &out, nullptr, o);
      // Nobody may wait on this replica: replica 0's collective fails now.
      if (!s.ok() && !IsNanError(s) && replicas_[0]->comm() != nullptr) replicas_[0]->comm()->Abort(s);
      std::vector<uint64_t> sums;
      if (s.ok() && check_step >= 0) {
        std::vector<Tensor> values;
        s = session->Run({}, CheckedVariables(), {}, &values);
        for (const Tensor& t : values) sums.push_back(VariableChecksum(t));
      }
      MutexLock l(progress->mu);
      if (!sums.empty()) progress->sums[i][check_step] = std::move(sums);
      --progress->outstanding[i];
      if (s.ok() || IsNanError(s)) progress->done_through[i] = race_end;
      if (!s.ok() && progress->failed[i].ok()) {
        progress->failed[i] = s.WithPrefix("replica " + std::to_string(i));
      }
      progress->cv.NotifyAll();
    });
  }
  chunk_ = std::move(c);
}

void TrainingJob::FinishChunk(std::vector<Status>* status, std::vector<ReplicaStepStats>* stats) {
  std::unique_ptr<RemoteChunk> c = std::move(chunk_);
  const int n = spec_.replicas;
  // Backup replicas: up to backup_replicas of them may end this chunk later
  // (each at most kMaxLagChunks behind); the others end it with replica 0.
  std::vector<bool> ended(n, true);
  {
    MutexLock l(progress_->mu);
    auto lagging = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_->mu) {
      int behind = 0;
      bool too_far = false;
      for (int i = 1; i < n; ++i) {
        if (progress_->outstanding[i] == 0) continue;
        ++behind;
        too_far = too_far || progress_->outstanding[i] > kMaxLagChunks - 1 || !progress_->failed[i].ok();
      }
      return behind > spec_.backup_replicas || too_far;
    };
    while (lagging()) progress_->cv.Wait(progress_->mu);
    // The others' answers are on their way: a moment for them.
    auto all_in = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_->mu) {
      for (int i = 1; i < n; ++i) {
        if (progress_->outstanding[i] > 0) return false;
      }
      return true;
    };
    const auto moment = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (!all_in() && progress_->cv.WaitUntil(progress_->mu, moment)) {
    }
    for (int i = 1; i < n; ++i) {
      ended[i] = progress_->outstanding[i] == 0;
      (*status)[i] = progress_->failed[i];
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - c->start).count();
  chunk_means_.resize(n);
  for (int i = 1; i < n; ++i) {
    if (!ended[i]) {
      laggards_[i] = std::move(c->threads[i]);  // its next chunk joins it
      continue;
    }
    c->threads[i].join();
    if (!(*status)[i].ok()) continue;
    // Its all-reduce totals: this chunk's share, per step.
    std::vector<Tensor> out;
    Status s = replica_session(i)->Run({}, {kRemoteTotalsNode}, {}, &out);
    if (!s.ok()) {
      (*status)[i] = s.WithPrefix("replica " + std::to_string(i));
      continue;
    }
    const double wait = out[0].ElementAsDouble(0), bytes = out[0].ElementAsDouble(1);
    std::pair<double, double>& before = remote_totals_[i];
    ReplicaStepStats& m = chunk_means_[i];
    m.step_seconds = seconds / double(c->steps);
    m.allreduce_seconds = (wait - std::min(before.first, wait)) / double(c->steps);
    m.allreduce_bytes = int64_t((bytes - std::min(before.second, bytes)) / double(c->steps));
    before = {wait, bytes};
    (*stats)[i].step_seconds = m.step_seconds;
    (*stats)[i].allreduce_seconds = m.allreduce_seconds;
    (*stats)[i].allreduce_bytes = m.allreduce_bytes;
  }
}

Status TrainingJob::JoinLaggards(int replica) {
  for (size_t i = 0; i < laggards_.size(); ++i) {
    if ((replica < 0 || int(i) == replica) && laggards_[i].joinable()) laggards_[i].join();
  }
  if (progress_ == nullptr) return Status();
  MutexLock l(progress_->mu);
  for (const Status& s : progress_->failed) {
    if (!s.ok()) return s;
  }
  return Status();
}

Status TrainingJob::EndRaceSteps(int64_t through, std::vector<ReplicaStepStats>* stats,
                                 bool one_step) {
  if (progress_ != nullptr) {
    // Not past a replica still in an earlier chunk.
    MutexLock l(progress_->mu);
    for (int i = 1; i < spec_.replicas; ++i) {
      if (progress_->outstanding[i] > 0) through = std::min(through, progress_->done_through[i]);
    }
  }
  if (race_ == nullptr || through <= race_ended_) return Status();
  const std::vector<int64_t> before = dropped_;
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> dropped, race_->Dropped());
  for (; race_ended_ < through; ++race_ended_) FS_RETURN_IF_ERROR(race_->End(race_ended_));
  dropped_ = std::move(dropped);
  for (int i = 0; i < spec_.replicas && i < int(before.size()); ++i) {
    (*stats)[i].dropped_steps = dropped_[i] - before[i];
    // A step run from here: a dropped replica's examples did not count.
    if ((*stats)[i].dropped_steps > 0 && one_step) (*stats)[i].examples = 0;
  }
  return Status();
}

}  // namespace flowstate
