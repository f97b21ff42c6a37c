// TrainingJob's data-parallel replicas (training_job.h): N sessions in this
// process joined by an InProcessCollective through the _AllReduce nodes of
// the training graph, or N sessions whose graphs run on N tasks of a
// cluster, joined by a GlooCollective.
// Replicas on other tasks: training_job_tasks.cc.
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
#include "devices/device_name.h"
#include "api/views_json.h"
#include "jobs/step_trace_view.h"
#include "scheduler/cluster_view.h"
#include "scheduler/collective.h"
#include "scheduler/local_step_race.h"
#include "scheduler/replica_comm.h"
#include "scheduler/step_trace.h"
#include "state/replica_input.h"
#include "state/variable.h"
#include "graph/mutex.h"


namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace


Session* TrainingJob::replica_session(int i) {
  if (i == 0) return train_session_.get();
  if (i < 1 || size_t(i) >= replicas_.size()) return nullptr;
  return replicas_[i]->session();
}

std::vector<int64_t> TrainingJob::dropped_steps() const { return dropped_; }

Status TrainingJob::StartReplicas() {
  const int n = spec_.replicas;
  auto device = [&](int i) -> std::string {
    if (int(spec_.devices.size()) >= n) return spec_.devices[i];
    return spec_.devices.empty() ? "" : spec_.devices.front();
  };
  std::vector<std::unique_ptr<Session>> sessions(n);
  for (int i = 1; i < n; ++i) {
    SessionOptions so = SessionOptionsOfJob();
    so.default_device = device(i);
    StatusOr<std::unique_ptr<Session>> s = Session::Create(graph_.graph, so);
    if (!s.ok()) return s.status().WithPrefix("replica " + std::to_string(i));
    std::vector<Tensor> out;
    // The same seed: the same initial variables as replica 0.
    FS_RETURN_IF_ERROR((*s)->Run({}, {}, {graph_.init_op, graph_.optimizer_init}, &out));
    sessions[i] = std::move(s).value();
  }
  race_ended_ = 0;
  if (spec_.backup_replicas > 0) {
    race_ = std::make_shared<LocalStepRace>(n, n - spec_.backup_replicas);
    dropped_.assign(n, 0);
  }
  std::vector<std::unique_ptr<InProcessCollective>> group = InProcessCollective::Create(n);
  replicas_.clear();
  for (int i = 0; i < n; ++i) {
    ReplicaComm::Options o;
    o.collective = std::shared_ptr<Collective>(std::move(group[i]));
    o.num_buckets = int(graph_.allreduce.size());
    o.timeout = options_.allreduce_timeout;
    o.race = race_;
    auto comm = std::make_shared<ReplicaComm>(std::move(o));
    Session* session = i == 0 ? train_session_.get() : sessions[i].get();
    StatusOr<std::shared_ptr<ReplicaComm>> r =
        session->resource_manager()->LookupOrCreate<ReplicaComm>(
            kReplicaContainer, "replicas",
            [&]() -> StatusOr<std::shared_ptr<ReplicaComm>> { return comm; });
    if (!r.ok()) return r.status();
    replicas_.push_back(Replica::InProcess(session, std::move(sessions[i]), *r));
  }
  return Status();
}

Status TrainingJob::RunReplica(int i, const Batch* batch, ReplicaStepStats* stats) {
  if (replicas_[i]->on_task()) return RunRemoteReplica(i, batch, stats);
  Session* session = replicas_[i]->session();
  ReplicaComm& comm = *replicas_[i]->comm();
  const auto start = Clock::now();
  const double wait0 = comm.wait_seconds();
  const int64_t bytes0 = comm.bytes();
  bool abandon = batch == nullptr;
  if (!abandon) {
    StatusOr<bool> late = TestStraggler(i, stats);
    if (!late.ok()) return late.status();
    abandon = *late;
  }
  std::vector<std::pair<std::string, Tensor>> feeds;
  if (!abandon) {
    for (const auto& [name, t] : batch->components) feeds.emplace_back(name, t);
    feeds.emplace_back(graph_.replica_examples, Tensor::Scalar<double>(double(batch->size)));
    stats->examples = batch->size;
  } else {
    // No data for this replica (or abandoned): join every bucket with zeros
    // and apply the others' average like everyone else. (Not with shared
    // tables: a replica answers the others' lookups of its parts, so it
    // always runs its graph; replica 0 always has a batch.)
    if (shared_) {
      return FailedPrecondition("replica " + std::to_string(i) +
                                " cannot skip a step: it holds parts of the shared tables");
    }
    std::vector<ReplicaComm::BucketLayout> plan;
    for (const AllReduceBucket& b : graph_.allreduce) {
      plan.emplace_back();
      plan.back().gather = b.gather;
      for (size_t j = 0; j < b.dtypes.size(); ++j) plan.back().tensors.emplace_back(b.dtypes[j], b.shapes[j]);
    }
    StatusOr<std::vector<std::vector<Tensor>>> reduced = comm.JoinWithZeros(plan);
    if (!reduced.ok()) return reduced.status();
    for (size_t b = 0; b < graph_.allreduce.size(); ++b) {
      for (size_t j = 0; j < (*reduced)[b].size(); ++j) {
        feeds.emplace_back(graph_.allreduce[b].node + ":" + std::to_string(j), (*reduced)[b][j]);
      }
    }
  }
  std::vector<Tensor> out;
  RunOptions run_options;
  run_options.trace = step_trace_;
  Status s = session->Run(feeds, {graph_.loss}, {graph_.train_op}, &out, nullptr, run_options);
  if (!s.ok() && !IsNanError(s)) {
    // Nobody may wait on this replica: fail the group's calls at once.
    comm.Abort(s);
  }
  if (s.ok()) stats->loss = out[0].ElementAsDouble(0);
  stats->step_seconds = Seconds(Clock::now() - start);
  stats->allreduce_seconds = comm.wait_seconds() - wait0;
  stats->allreduce_bytes = comm.bytes() - bytes0;
  return s.ok() ? Status() : s.WithPrefix("replica " + std::to_string(i));
}

StatusOr<bool> TrainingJob::TestStraggler(int i, ReplicaStepStats* stats) {
  if (i != options_.test_straggler.replica || options_.test_straggler.delay_ms <= 0) return false;
  // Its computation takes delay_ms longer, unless the step is decided
  // without it first (backup replicas): then it abandons it.
  auto delay = std::chrono::milliseconds(options_.test_straggler.delay_ms);
  if (race_ == nullptr) {
    std::this_thread::sleep_for(delay);
    return false;
  }
  StatusOr<bool> decided = race_->WaitDecidedWithout(race_step_, i, delay);
  if (!decided.ok()) {
    if (replicas_[0]->comm() != nullptr) replicas_[0]->comm()->Abort(decided.status());
    return decided.status().WithPrefix("replica " + std::to_string(i));
  }
  stats->dropped_steps = *decided ? 1 : 0;
  return *decided;
}

StatusOr<StepResult> TrainingJob::StepReplicas() {
  const int n = spec_.replicas;
  // Up to batches_per_step() batches of one epoch: replica i trains on the
  // i-th, and on the (i + n)-th, ... when the step has more than n.
  // A replica on another task reads its own: here only its examples count.
  FS_ASSIGN_OR_RETURN(std::vector<Batch> all, NextStepBatches(*pipeline_, batches_per_step()));
  step_position_ = PipelinePosition{all.front().epoch, all.front().offset};
  int64_t examples = 0;
  for (const Batch& b : all) examples += b.size;
  std::vector<Batch> batches;
  for (int i = 0; i < n && i < int(all.size()); ++i) {
    if (!replicas_[i]->on_task()) {
      batches.push_back(*ReplicaShare(all, i, n));
      continue;
    }
    Batch counted;
    counted.epoch = step_position_.epoch;
    counted.offset = step_position_.offset;
    for (size_t k = size_t(i); k < all.size(); k += size_t(n)) counted.size += all[k].size;
    batches.push_back(std::move(counted));
  }
  all.clear();
  race_step_ = replicas_[0]->comm()->steps_begun();
  // A traced step: every replica in this process records into one trace
  // (replicas on other tasks run their ops there, untraced).
  std::unique_ptr<StepTraceCollector> trace;
  if (std::binary_search(spec_.trace_steps.begin(), spec_.trace_steps.end(), step_ + 1)) {
    trace = std::make_unique<StepTraceCollector>();
  }
  step_trace_ = trace.get();
  std::vector<ReplicaStepStats> stats(n);
  std::vector<Status> status(n);
  // Replicas on other tasks run chunks of steps on their own (input there,
  // all-reduce as the only synchronisation; with backup replicas, the race
  // in the group's store too); this process steps replica 0 through the
  // chunk. With the test straggler (delayed from here), and for a traced
  // step, every replica's step is run from here.
  const bool chunked = replicas_.size() > 1 && replicas_[1]->on_task() &&
                       options_.test_straggler.delay_ms == 0 && !trace;
  // Backup replicas: the race's steps every replica is done with are ended
  // when a step runs from here, or a chunk ends.
  bool race_steps_done = !chunked;
  const auto start = Clock::now();
  if (chunked) {
    if (chunk_ == nullptr) StartChunk(ChunkSteps());
    for (int i = 1; i < n; ++i) {
      stats[i] = i < int(chunk_means_.size()) ? chunk_means_[i] : ReplicaStepStats();
      stats[i].examples = i < int(batches.size()) ? batches[i].size : 0;
    }
    status[0] = RunReplica(0, &batches[0], &stats[0]);
    if (!status[0].ok() || step_ + 1 == chunk_->end_step) {
      FinishChunk(&status, &stats);
      // The job's last step: no backup replica runs on past the job, and
      // the steps it was dropped from are all counted.
      if (status[0].ok() && FinishedAfter(step_ + 1)) {
        Status joined = JoinLaggards();
        if (!joined.ok()) status[0] = joined;
      }
      race_steps_done = true;
    }
    for (int i = 1; i < n; ++i) stats[i].loss = stats[0].loss;
  } else {
    // Replicas still in a chunk finish it first.
    Status joined = JoinLaggards();
    if (!joined.ok()) {
      done_ = true;
      return joined;
    }
    std::vector<std::thread> threads;
    for (int i = 1; i < n; ++i) {
      threads.emplace_back([&, i] {
        status[i] = RunReplica(i, i < int(batches.size()) ? &batches[i] : nullptr, &stats[i]);
      });
    }
    status[0] = RunReplica(0, &batches[0], &stats[0]);
    for (std::thread& t : threads) t.join();
  }
  // The chunk's size follows the step's time.
  const double took = Seconds(Clock::now() - start);
  step_seconds_ = step_seconds_ > 0 ? 0.8 * step_seconds_ + 0.2 * took : took;
  step_trace_ = nullptr;
  if (race_steps_done) {
    Status ended = EndRaceSteps(race_step_ + 1, &stats, /*one_step=*/!chunked);
    if (!ended.ok() && status[0].ok()) status[0] = ended;
    // And the replica checks that waited for a laggard.
    Status agree = CheckPendingReplicas();
    if (!agree.ok() && status[0].ok()) status[0] = agree;
  }

  StepResult r;
  if (trace) r.trace_json = StepTraceToChromeJson(MakeStepTrace(*trace, step_ + 1));
  // A NaN/Inf loss or gradient is seen by every replica alike (the checks
  // read the all-reduced tensors); any other error wins.
  // The cause first: a replica whose task is gone (UNAVAILABLE) rather
  // than the others, whose collective failed because of it.
  Status nan, failed;
  for (int i = 0; i < n; ++i) {
    if (status[i].ok()) continue;
    if (!IsNanError(status[i])) {
      if (failed.ok() || (status[i].code() == Code::kUnavailable &&
                          failed.code() != Code::kUnavailable)) {
        failed = status[i];
      }
      continue;
    }
    if (nan.ok()) nan = status[i];
  }
  if (!failed.ok()) {
    done_ = true;
    return failed;
  }
  if (!nan.ok()) {
    FS_RETURN_IF_ERROR(OnNanStep(nan, &r));
  } else {
    r.loss = stats[0].loss;  // every replica fetched the same all-reduced loss
  }
  r.step = ++step_;
  r.epoch = batches.front().epoch;
  r.examples = examples;
  r.epoch_end = pipeline_->position().epoch != batches.front().epoch;
  r.replicas = std::move(stats);
  if (spec_.check_replicas_every > 0 && step_ % spec_.check_replicas_every == 0) {
    Status agree = CheckReplicasAgree();
    if (!agree.ok()) {
      done_ = true;
      return agree;
    }
  }
  r.done = Finished();
  done_ = r.done;
  return r;
}

Status TrainingJob::AssignReplicaVariables(int i, const std::vector<std::string>& variables,
                                           const std::map<std::string, const Tensor*>& values) {
  if (i < 0 || size_t(i) >= replicas_.size()) return InvalidArgument("no replica " + std::to_string(i));
  if (i > 0) FS_RETURN_IF_ERROR(JoinLaggards(i));
  return replicas_[i]->AssignVariables(variables, values);
}

Status TrainingJob::RestoreReplica(int i, const std::map<std::string, const Tensor*>& values,
                                   const std::map<std::string, std::string>& kernel_states) {
  Status s = AssignReplicaVariables(i, ReplicaVariables(i), values);
  // And the random streams of its kernels, wherever they run (replica 0's,
  // as every replica gets).
  if (s.ok()) s = replica_session(i)->ImportKernelStates(kernel_states);
  return s.ok() ? s : s.WithPrefix("restoring replica " + std::to_string(i));
}

uint64_t TrainingJob::VariableChecksum(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  int dtype = int(t.dtype());
  mix(&dtype, sizeof dtype);
  for (int64_t d : t.shape().dims()) mix(&d, sizeof d);
  mix(t.raw_data(), t.TotalBytes());
  return h;
}

Status TrainingJob::CompareChecksums(int64_t step, int i, const std::vector<uint64_t>& got,
                                     const std::vector<uint64_t>& expected) const {
  const std::vector<std::string>& names = CheckedVariables();
  for (size_t k = 0; k < names.size() && k < got.size() && k < expected.size(); ++k) {
    if (got[k] != expected[k]) {
      return Internal("replicas diverged: after step " + std::to_string(step) + " variable '" +
                          names[k] + "' of replica " + std::to_string(i) +
                          " differs from replica 0's (checksums " + std::to_string(got[k]) +
                          " and " + std::to_string(expected[k]) +
                          "); the job stops instead of training on different models",
                      names[k]);
    }
  }
  return Status();
}

Status TrainingJob::CheckReplicasAgree() {
  const int n = spec_.replicas;
  std::vector<uint64_t> expected;
  {
    FS_ASSIGN_OR_RETURN(std::vector<Tensor> values, ReadReplicaVariables(0));
    for (const Tensor& t : values) expected.push_back(VariableChecksum(t));
  }
  for (int i = 1; i < n; ++i) {
    if (progress_ != nullptr && replicas_[i]->on_task()) {
      // A replica on another task whose chunk ended at this step read its
      // own (or will: a laggard's are checked when they come).
      MutexLock l(progress_->mu);
      auto it = progress_->sums[i].find(step_);
      if (it != progress_->sums[i].end()) {
        std::vector<uint64_t> got = std::move(it->second);
        progress_->sums[i].erase(it);
        l.Unlock();
        FS_RETURN_IF_ERROR(CompareChecksums(step_, i, got, expected));
        continue;
      }
      if (progress_->outstanding[i] > 0) {
        pending_checks_.push_back(PendingCheck{step_, i, expected});
        continue;
      }
    }
    std::vector<uint64_t> got;
    FS_ASSIGN_OR_RETURN(std::vector<Tensor> values, ReadReplicaVariables(i));
    for (const Tensor& t : values) got.push_back(VariableChecksum(t));
    FS_RETURN_IF_ERROR(CompareChecksums(step_, i, got, expected));
  }
  return Status();
}

Status TrainingJob::CheckPendingReplicas() {
  if (progress_ == nullptr) return Status();
  for (auto p = pending_checks_.begin(); p != pending_checks_.end();) {
    std::vector<uint64_t> got;
    {
      MutexLock l(progress_->mu);
      auto it = progress_->sums[p->replica].find(p->step);
      if (it == progress_->sums[p->replica].end()) {
        ++p;
        continue;
      }
      got = std::move(it->second);
      progress_->sums[p->replica].erase(it);
    }
    FS_RETURN_IF_ERROR(CompareChecksums(p->step, p->replica, got, p->expected));
    p = pending_checks_.erase(p);
  }
  return Status();
}

StatusOr<std::vector<Tensor>> TrainingJob::ReadReplicaVariables(int i) {
  if (i < 0 || size_t(i) >= replicas_.size()) return InvalidArgument("no replica " + std::to_string(i));
  if (i > 0) FS_RETURN_IF_ERROR(JoinLaggards(i));
  return replicas_[i]->ReadVariables(CheckedVariables());
}

const std::vector<std::string>& TrainingJob::ReplicaVariables(int i) const {
  return shared_ && size_t(i) < shared_->variables.size() ? shared_->variables[size_t(i)]
                                                          : graph_.variables;
}

const std::vector<std::string>& TrainingJob::CheckedVariables() const {
  return shared_ ? shared_->replicated : graph_.variables;
}

bool TrainingJob::Holds(int i, const std::string& v) const {
  if (!shared_) return true;
  auto it = shared_->holders.find(v);
  return it == shared_->holders.end() || it->second == i;
}

std::vector<std::string> TrainingJob::HeldBy(int i, const std::vector<std::string>& names) const {
  std::vector<std::string> out;
  for (const std::string& v : names) {
    if (Holds(i, v)) out.push_back(v);
  }
  return out;
}

std::vector<std::string> TrainingJob::ModelPartsElsewhere() const {
  std::vector<std::string> out;
  for (const std::string& v : graph_.model_variables) {
    if (!Holds(0, v)) out.push_back(v);
  }
  return out;
}

Status TrainingJob::StopChunkForRead() {
  if (!shared_ || chunk_ == nullptr) return Status();
  // The replicas on the tasks wait in their next step's first lookup (or
  // finish this step's updates first): failing the group ends their chunk
  // with every part at this step's end. The job cannot step on: it is
  // rebuilt (from the checkpoint this read is for).
  replicas_[0]->comm()->Abort(Cancelled("the replicas' chunk of steps was stopped after step " +
                                        std::to_string(step_) +
                                        " to read the shared tables' parts"));
  for (std::thread& t : chunk_->threads) {
    if (t.joinable()) t.join();
  }
  chunk_.reset();
  stopped_for_read_ = true;
  return Status();
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> TrainingJob::ReadHeldVariables(
    const std::vector<std::string>& names, bool stop_chunk) {
  // One read per holder (a Run on its task), then the values in order.
  // (Parts held elsewhere exist only with shared tables, which have no
  // backup replicas, so no replica lags behind a chunk.)
  std::map<std::string, Tensor> values;
  for (int i = 0; i < int(replicas_.size()) && (i == 0 || shared_); ++i) {
    const std::vector<std::string> held = HeldBy(i, names);
    if (held.empty()) continue;
    if (i > 0 && stop_chunk) FS_RETURN_IF_ERROR(StopChunkForRead());
    StatusOr<std::vector<Tensor>> got = replicas_[i]->ReadVariables(held);
    if (!got.ok()) return got.status().WithPrefix("reading replica " + std::to_string(i) + "'s variables");
    for (size_t k = 0; k < held.size(); ++k) values[held[k]] = std::move((*got)[k]);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(names.size());
  for (const std::string& v : names) {
    auto it = values.find(v);
    if (it == values.end()) return NotFound("no replica holds variable '" + v + "'", v);
    out.emplace_back(v, std::move(it->second));
  }
  return out;
}

Status TrainingJob::SyncSharedParts(int64_t step) {
  if (!shared_) return Status();
  MutexLock l(sync_mu_);
  if (synced_step_ == step) return Status();
  // The model's parts held elsewhere that the evaluation graph reads (it
  // has a restore node for each).
  std::vector<std::string> parts;
  for (const std::string& v : ModelPartsElsewhere()) {
    if (eval_session_->graph()->FindNode("_restore/" + v) != nullptr) parts.push_back(v);
  }
  // From Predict, beside a step: the parts as they are (mid-chunk, some
  // may be a step ahead of others).
  FS_ASSIGN_OR_RETURN(auto values, ReadHeldVariables(parts, /*stop_chunk=*/step != 0));
  std::vector<std::pair<std::string, Tensor>> feeds;
  std::vector<std::string> targets;
  for (auto& [v, t] : values) {
    feeds.emplace_back("_restore/" + v, std::move(t));
    targets.push_back("_restore/" + v + "/assign");
  }
  std::vector<Tensor> out;
  Status s = eval_session_->Run(feeds, {}, targets, &out);
  if (!s.ok()) return s.WithPrefix("copying the shared tables' parts for evaluation");
  synced_step_ = step;
  return Status();
}

}  // namespace flowstate