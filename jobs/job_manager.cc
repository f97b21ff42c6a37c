// JobManager's scheduling half (job_manager.h): submission, admission and
// the workers' step-level round robin, job states and events, predict and
// watch. Checkpoints, persistence and recovery: job_manager_durability.cc.
#include "jobs/job_manager.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "scheduler/thread_pool.h"
#include "jobs/fault_points.h"
#include "jobs/job_manager_internal.h"
#include "graph/mutex.h"

namespace flowstate {

using namespace job_manager_internal;  // NOLINT: the two halves of one class
using Json = nlohmann::json;
using checkpoints::Store;

JobManager::JobManager(const JobManagerOptions& options) : options_(options) {
  options_.max_running = std::max(1, options_.max_running);
  options_.workers = std::max(1, options_.workers);
  inter_op_pool_ = std::make_unique<ThreadPool>(std::max(1, options_.inter_op_threads));
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  writer_ = std::thread([this] { WriterLoop(); });
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  {
    MutexLock l(mu_);
    if (stopping_) return;
    stopping_ = true;
    work_cv_.NotifyAll();
  }
  for (auto& t : workers_) t.join();
  {
    MutexLock l(mu_);
    // Every started, unfinished job gets a checkpoint of where it stopped.
    for (const std::string& id : order_) {
      std::shared_ptr<Job> job = jobs_.at(id);
      if (job->started && !IsTerminal(job->info.state) && job->info.step != job->snapshot_step) {
        SnapshotLocked(job.get(), job, "shutdown");
      }
    }
    writer_stopping_ = true;
    writer_cv_.NotifyAll();
  }
  writer_.join();  // after the queued writes
  MutexLock l(mu_);
  for (const auto& [id, job] : jobs_) {
    if (!IsTerminal(job->info.state)) PersistLocked(*job, true);
  }
}

JobInfo JobManager::InfoLocked(const Job& j) const {
  JobInfo i = j.info;
  i.name = j.spec.name;
  i.epochs = j.spec.input.epochs;
  i.examples_per_sec = j.train_seconds > 0 ? double(j.examples) / j.train_seconds : 0;
  i.eta_seconds = -1;
  i.replicas = j.spec.replicas;
  i.replicas_alive = i.state != JobState::kRunning || j.runner == nullptr ? 0
                     : j.membership.wait_until       ? j.membership.alive_while_waiting
                     : j.membership.replicas.empty() ? j.spec.replicas
                                                     : int(j.membership.replicas.size());
  i.placement.clear();
  if (j.spec.replicas > 1) {
    const bool running = i.state == JobState::kRunning && j.runner != nullptr && !j.membership.wait_until;
    const std::vector<int>& m = j.membership.replicas;
    for (int r = 0; r < j.spec.replicas; ++r) {
      JobInfo::Replica p;
      p.device = r < int(j.spec.devices.size())   ? j.spec.devices[r]
                 : j.spec.devices.empty()         ? ""
                                                  : j.spec.devices.front();
      p.alive = running && (m.empty() || std::count(m.begin(), m.end(), r) > 0);
      i.placement.push_back(std::move(p));
    }
  }
  if (!IsTerminal(i.state) && i.step > 0 && i.total_steps >= i.step && j.train_seconds > 0) {
    i.eta_seconds = j.train_seconds / double(i.step) * double(i.total_steps - i.step);
  }
  return i;
}

void JobManager::RememberLocked(Job* job, const JobEvent& e) {
  if (e.kind == JobEvent::Kind::kStep) return;
  job->history.push_back(e);
  while (int(job->history.size()) > std::max(1, options_.max_history_events)) job->history.pop_front();
}

void JobManager::FaultPointLocked(const Job& job, std::string_view point) const {
  if (options_.fault_point) options_.fault_point(point, job.info.step);
}

void JobManager::PublishLocked(Job* job, JobEvent::Kind kind, const std::string& message) {
  JobEvent e;
  e.kind = kind;
  e.info = InfoLocked(*job);
  e.time = Now();
  e.message = message;
  RememberLocked(job, e);
  bool terminal = IsTerminal(job->info.state) && kind == JobEvent::Kind::kState;
  auto& subs = job->subscribers;
  for (auto it = subs.begin(); it != subs.end();) {
    std::shared_ptr<Stream> s = it->lock();
    if (!s || s->closed()) {
      it = subs.erase(it);
      continue;
    }
    s->Push(e, terminal);
    ++it;
  }
}

void JobManager::TransitionLocked(Job* job, JobAction action, const std::string& error) {
  const JobState from = job->info.state;
  const std::optional<JobState> to = JobStateMachine::Next(from, action);
  if (!to) return;
  const JobState s = *to;
  job->info.state = s;
  if (s != JobState::kRunning) job->requested.reset();
  if (!error.empty()) job->info.error = error;
  if (s == JobState::kRunning && job->info.started == 0) job->info.started = Now();
  if (IsTerminal(s)) job->info.finished = Now();
  if (from == JobState::kRunning) {
    if (job->holds_slot) {
      job->holds_slot = false;
      for (int d : job->devices) --devices_[d].holding;
    }
    ready_.erase(std::remove(ready_.begin(), ready_.end(), job->info.id), ready_.end());
  }
  if (IsTerminal(s) && job->runner && job->runner->pipeline()) job->runner->pipeline()->Cancel();
  PublishLocked(job, JobEvent::Kind::kState);
  PersistLocked(*job, true);
  if (options_.observer) options_.observer->OnStateChange(InfoLocked(*job), from);
  if (IsTerminal(s)) {
    ReleaseLocked(job);
    EnforceRetentionLocked();
  }
  AdmitLocked();
}

std::vector<int> JobManager::DeviceSlotsLocked(const Job& job) {
  std::vector<std::string> names;
  if (job.runner) names = job.runner->DeviceNames();
  if (names.empty()) names.push_back(options_.devices->default_device()->name());
  std::vector<int> out;
  for (const std::string& n : names) {
    auto it = std::find_if(devices_.begin(), devices_.end(),
                           [&](const DeviceLoad& d) { return d.name == n; });
    if (it == devices_.end()) it = devices_.insert(devices_.end(), DeviceLoad{n});
    out.push_back(int(it - devices_.begin()));
  }
  return out;
}

// One pass over the queue in submission order: a job is admitted when each
// of its devices holds fewer than max_running jobs and no earlier queued job
// waits for it (FIFO per device); a job that must wait reserves its devices
// for the rest of the pass.
void JobManager::AdmitLocked() {
  if (admitting_) return;  // TransitionLocked(kAdmit) below calls back
  admitting_ = true;
  for (DeviceLoad& d : devices_) d.reserved = false;
  for (auto it = queued_.begin(); it != queued_.end();) {
    auto jt = jobs_.find(*it);
    if (jt == jobs_.end() || jt->second->info.state != JobState::kQueued) {
      it = queued_.erase(it);
      continue;
    }
    Job* job = jt->second.get();
    if (job->devices.empty()) job->devices = DeviceSlotsLocked(*job);
    bool fits = true;
    for (int d : job->devices) {
      fits = fits && !devices_[d].reserved && devices_[d].holding < options_.max_running;
    }
    if (!fits) {
      for (int d : job->devices) devices_[d].reserved = true;
      ++it;
      continue;
    }
    std::string id = *it;
    it = queued_.erase(it);
    job->holds_slot = true;
    for (int d : job->devices) ++devices_[d].holding;
    ready_.push_back(id);
    TransitionLocked(job, JobAction::kAdmit);
    work_cv_.NotifyOne();
  }
  admitting_ = false;
}

std::deque<std::string>::iterator JobManager::PickReadyLocked() {
  if (slices_in_flight_ == 0) return ready_.begin();  // every device is idle
  for (auto it = ready_.begin(); it != ready_.end(); ++it) {
    const Job& j = *jobs_.at(*it);
    bool idle = true;
    for (int d : j.devices) idle = idle && devices_[d].stepping == 0;
    if (idle) return it;
  }
  return ready_.begin();  // all busy: plain round robin
}

StatusOr<JobInfo> JobManager::Submit(const std::string& job_json) {
  FS_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(job_json));
  FS_RETURN_IF_ERROR(PlaceReplicas(&spec));
  FS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingJob> runner, TrainingJob::Create(spec, RunnerOptions()));
  bool init_values_set = false;
  if (spec.init_from) {
    const InitFromSpec& f = *spec.init_from;
    if (options_.store == nullptr) {
      return FailedPrecondition("init_from: this server keeps no checkpoints (it runs without a data directory)");
    }
    StatusOr<checkpoints::Snapshot> from = options_.store->ReadCheckpoint(f.job, f.step);
    if (!from.ok()) {
      if (from.status().code() == Code::kNotFound) {
        return InvalidArgument("init_from: job '" + f.job + "' has no checkpoint at step " +
                               std::to_string(f.step));
      }
      return from.status().WithPrefix("init_from");
    }
    std::vector<std::pair<std::string, Tensor>> values = ToNamed(std::move(from->tensors));
    FS_RETURN_IF_ERROR(CheckInitialValues(runner->graph(), values, "init_from"));
    runner->SetInitialValues(std::move(values));
    init_values_set = true;
  }
  MutexLock l(mu_);
  if (stopping_) return Unavailable("the server is shutting down");
  auto job = std::make_shared<Job>();
  job->info.id = "job-" + std::to_string(next_id_++);
  job->spec = runner->spec();  // with the graph an ONNX model became
  job->spec_json = job_json;
  job->runner = std::move(runner);
  job->info.created = Now();
  job->init_values_set = init_values_set;
  if (options_.store != nullptr) {
    Status st = options_.store->PutRecord(Store::Kind::kGraphs, job->info.id, job_json);
    if (!st.ok()) return Unavailable("the job could not be stored: " + st.ToString());
    PersistLocked(*job, true);
  }
  jobs_[job->info.id] = job;
  order_.push_back(job->info.id);
  queued_.push_back(job->info.id);
  if (options_.observer) options_.observer->OnStateChange(InfoLocked(*job), JobState::kQueued);
  JobInfo info = InfoLocked(*job);
  AdmitLocked();
  return info;
}

std::string JobManager::JobNamingModel(const std::string& model_id) const {
  MutexLock l(mu_);
  for (const std::string& id : order_) {
    const Job& j = *jobs_.at(id);
    if (j.spec.model && j.spec.model->onnx == model_id) return id;
  }
  return "";
}

StatusOr<JobInfo> JobManager::Get(const std::string& id) const {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  return InfoLocked(*it->second);
}

std::vector<JobInfo> JobManager::List() const {
  MutexLock l(mu_);
  std::vector<JobInfo> out;
  for (const std::string& id : order_) out.push_back(InfoLocked(*jobs_.at(id)));
  return out;
}

std::map<std::string, std::vector<std::string>> JobManager::RunningJobsByDevice() const {
  MutexLock l(mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (const std::string& id : order_) {
    const Job& j = *jobs_.at(id);
    if (j.info.state != JobState::kRunning || j.runner == nullptr) continue;
    for (const std::string& d : j.runner->DeviceNames()) out[d].push_back(id);
  }
  return out;
}

int JobManager::queue_depth() const {
  MutexLock l(mu_);
  int n = 0;
  for (const auto& [id, j] : jobs_) n += j->info.state == JobState::kQueued;
  return n;
}

std::map<JobState, int> JobManager::CountByState() const {
  MutexLock l(mu_);
  std::map<JobState, int> out;
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kPaused,
                     JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    out[s] = 0;
  }
  for (const auto& [id, j] : jobs_) out[j->info.state]++;
  return out;
}

Status JobManager::Cancel(const std::string& id) {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  Job* job = it->second.get();
  FS_RETURN_IF_ERROR(JobStateMachine::Check(job->info.state, JobAction::kCancel, id));
  if (job->busy || job->mid_chunk) {  // applied when its current step (chunk) ends
    job->requested = JobStateMachine::Merge(job->requested, JobAction::kCancel);
    PersistLocked(*job, true);  // kept if the server dies before the step ends
    return Status();
  }
  queued_.erase(std::remove(queued_.begin(), queued_.end(), id), queued_.end());
  if (job->started && job->info.step != job->snapshot_step) SnapshotLocked(job, it->second, "cancel");
  TransitionLocked(job, JobAction::kCancel);
  return Status();
}

Status JobManager::Pause(const std::string& id) {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  Job* job = it->second.get();
  FS_RETURN_IF_ERROR(JobStateMachine::Check(job->info.state, JobAction::kPause, id));
  if (job->busy || job->mid_chunk) {  // applied when its current step (chunk) ends
    job->requested = JobStateMachine::Merge(job->requested, JobAction::kPause);
    PersistLocked(*job, true);  // kept if the server dies before the step ends
    return Status();
  }
  queued_.erase(std::remove(queued_.begin(), queued_.end(), id), queued_.end());
  if (job->started && job->info.step != job->snapshot_step) SnapshotLocked(job, it->second, "pause");
  TransitionLocked(job, JobAction::kPause);
  return Status();
}

Status JobManager::Resume(const std::string& id) {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  Job* job = it->second.get();
  if (job->requested == JobAction::kPause) {  // paused but its step has not ended yet
    job->requested.reset();
    PersistLocked(*job, true);
    return Status();
  }
  FS_RETURN_IF_ERROR(JobStateMachine::Check(job->info.state, JobAction::kResume, id));
  queued_.push_back(id);
  TransitionLocked(job, JobAction::kResume);
  return Status();
}

std::optional<DataType> JobManager::InputDtype(const std::string& id,
                                              const std::string& name) const {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return PlaceholderDtype(it->second->spec.graph, name);
}

StatusOr<std::shared_ptr<TrainingJob>> JobManager::TrainedRunner(const std::string& id) {
  std::shared_ptr<Job> job;
  std::shared_ptr<TrainingJob> runner;
  bool lazy_start = false;
  {
    MutexLock l(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job '" + id + "'");
    job = it->second;
    runner = job->runner;
    // A finished job (released, or reloaded after a restart) predicts with
    // the variables of its final checkpoint or the model values it kept,
    // loaded on first use.
    lazy_start = !job->started && !job->inference_ready && IsTerminal(job->info.state) &&
                 runner != nullptr &&
                 ((options_.store != nullptr && job->restore_on_start) || !job->final_values.empty());
    if (!job->started && !job->inference_ready && !lazy_start) {
      return FailedPrecondition("job '" + id + "' has no trained variables yet (it is " +
                                std::string(JobStateName(job->info.state)) + ")");
    }
  }
  if (lazy_start) FS_RETURN_IF_ERROR(LoadFinished(job, runner));
  return runner;
}

Status JobManager::Predict(const std::string& id,
                           const std::vector<std::pair<std::string, Tensor>>& inputs,
                           const std::vector<std::string>& fetches, std::vector<Tensor>* outputs,
                           std::chrono::milliseconds timeout) {
  FS_ASSIGN_OR_RETURN(std::shared_ptr<TrainingJob> runner, TrainedRunner(id));
  return runner->Predict(inputs, fetches, outputs, timeout);
}

StatusOr<std::string> JobManager::ExportOnnx(const std::string& id) {
  FS_ASSIGN_OR_RETURN(std::shared_ptr<TrainingJob> runner, TrainedRunner(id));
  StatusOr<std::string> bytes = runner->ExportOnnx();
  if (!bytes.ok()) return bytes.status().WithPrefix("job '" + id + "'");
  return bytes;
}

bool JobManager::PredictMayWait(const std::string& id, const std::vector<std::string>& inputs,
                                const std::vector<std::string>& fetches) const {
  std::shared_ptr<TrainingJob> runner;
  {
    MutexLock l(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !it->second->started) return true;
    runner = it->second->runner;
  }
  return runner == nullptr || runner->PredictMayWait(inputs, fetches);
}

Status JobManager::LoadFinished(const std::shared_ptr<Job>& job, const std::shared_ptr<TrainingJob>& runner) {
  MutexLock s(job->start_mu);
  std::vector<std::pair<std::string, Tensor>> values;
  {
    MutexLock l(mu_);
    // Its final checkpoint may still be being written (a cancel's).
    while (job->pending_writes != 0) checkpoint_cv_.Wait(mu_);
    if (job->inference_ready) return Status();
    if (!job->restore_on_start) values = job->final_values;
  }
  const bool kept = !values.empty();
  if (kept) runner->SetInitialValues(std::move(values));
  int64_t restored = -1;
  Status st = StartRunner(job.get(), /*load_data=*/false, &restored);
  if (!st.ok()) return st.WithPrefix("job '" + job->info.id + "': loading its variables");
  if (restored < 0 && !kept) {
    return FailedPrecondition("job '" + job->info.id + "' has no checkpoint to predict with");
  }
  MutexLock l(mu_);
  job->inference_ready = true;
  return Status();
}

StatusOr<std::unique_ptr<JobEventStream>> JobManager::Watch(const std::string& id, bool history) {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  Job* job = it->second.get();
  auto stream = std::make_shared<Stream>();
  if (history) {
    for (const JobEvent& past : job->history) stream->Push(past, false);
  }
  JobEvent e;
  e.kind = JobEvent::Kind::kState;
  e.info = InfoLocked(*job);
  e.time = Now();
  stream->Push(e, IsTerminal(job->info.state));
  job->subscribers.push_back(stream);
  // The caller owns a handle that keeps the stream alive.
  struct Handle final : JobEventStream {
    std::shared_ptr<Stream> s;
    std::optional<JobEvent> Next(std::chrono::milliseconds t) override { return s->Next(t); }
    bool timed_out() const override { return s->timed_out(); }
    void Close() override { s->Close(); }
    void SetWaker(std::function<void()> wake) override { s->SetWaker(std::move(wake)); }
    ~Handle() override {
      s->SetWaker(nullptr);  // its consumer is going away
      s->Close();
    }
  };
  auto h = std::make_unique<Handle>();
  h->s = stream;
  return std::unique_ptr<JobEventStream>(std::move(h));
}

void JobManager::WorkerLoop() {
  MutexLock l(mu_);
  while (true) {
    while (!stopping_ && ready_.empty()) work_cv_.Wait(mu_);
    if (stopping_) return;
    auto pick = PickReadyLocked();
    std::string id = std::move(*pick);
    ready_.erase(pick);
    std::shared_ptr<Job> job = jobs_.at(id);
    if (job->info.state != JobState::kRunning || job->busy) continue;
    job->busy = true;
    for (int d : job->devices) ++devices_[d].stepping;  // fixed since its admission
    ++slices_in_flight_;
    l.Unlock();
    RunSlice(job);
    l.Lock();
    job->busy = false;
    for (int d : job->devices) --devices_[d].stepping;
    --slices_in_flight_;
    checkpoint_cv_.NotifyAll();  // an on-demand request may wait for the job to be idle
    if (job->info.state == JobState::kRunning && job->mid_chunk) {
      // Its replicas on other tasks wait for its next step: it goes first.
      ready_.push_front(id);
      work_cv_.NotifyOne();
    } else if (job->info.state == JobState::kRunning) {
      if (std::optional<JobAction> a = std::exchange(job->requested, std::nullopt)) {
        FaultPointLocked(*job, a == JobAction::kCancel ? fault_points::kCancelPending
                                                       : fault_points::kPausePending);
        if (job->started && job->info.step != job->snapshot_step) {
          SnapshotLocked(job.get(), job, a == JobAction::kCancel ? "cancel" : "pause");
        }
        TransitionLocked(job.get(), *a);
      } else {
        ready_.push_back(id);  // round-robin: to the back of the line
        work_cv_.NotifyOne();
      }
    }
  }
}

void JobManager::SucceedLocked(Job* j, const std::shared_ptr<Job>& job) {
  if (j->started && j->snapshot_step != j->info.step) {  // not checkpointed after its last step yet
    if (uint64_t seq = SnapshotLocked(j, job, "final"); seq != 0) WaitForWriteLocked(j, seq);
  }
  TransitionLocked(j, JobAction::kSucceed);
}

// One unit of a job's work, outside the lock; bookkeeping under it.
void JobManager::RunSlice(const std::shared_ptr<Job>& job) {
  Job* j = job.get();
  if (!j->started) {
    // Replicas on other tasks: those whose task answers (or wait for them).
    if (AcrossTasks(j->spec) && !PrepareMembership(job)) return;
    int64_t restored = -1;
    Status s = StartRunner(j, /*load_data=*/true, &restored);
    MutexLock l(mu_);
    if (!s.ok()) {
      if (OnReplicaFailureLocked(j, s, "starting the replicas")) return;
      TransitionLocked(j, JobAction::kFail, s.ToString());
      return;
    }
    j->started = true;
    j->info.total_steps = j->runner->total_steps();
    j->snapshot_at = std::chrono::steady_clock::now();
    if (j->restore_on_start) {
      j->restore_on_start = false;
      j->info.step = j->runner->step();
      j->curves.TruncateAfter(j->info.step);  // the steps after it run again
      j->snapshot_step = restored;
      // What was left after the checkpoint's step: more steps, an
      // evaluation not recorded yet, or (training complete) only finishing.
      const StepResult last = j->runner->LastStep();
      j->loop = TrainingLoop();
      j->loop.Resume(j->spec.eval, last, j->curves.HasEvalAt(last.step));
      if (restored >= 0) {
        j->info.resumed_from_step = restored;
        PublishLocked(j, JobEvent::Kind::kResume,
                      "resumed from the checkpoint at step " + std::to_string(restored) +
                          (!j->membership.note.empty() ? " " + j->membership.note
                           : j->spec.replicas > 1
                               ? " with " + std::to_string(j->spec.replicas) + " replicas"
                               : ""));
        ++j->info.restarts;
        if (options_.observer) options_.observer->OnRestart(InfoLocked(*j));
      } else if (j->was_running) {
        j->info.resumed_from_step = 0;
        PublishLocked(j, JobEvent::Kind::kResume,
                      "restarted from step 0: no checkpoint had been written" +
                          (j->membership.note.empty() ? "" : " (" + j->membership.note + ")"));
        ++j->info.restarts;
        if (options_.observer) options_.observer->OnRestart(InfoLocked(*j));
      } else {
        PublishLocked(j, JobEvent::Kind::kState);
      }
      j->membership.note.clear();
      PersistLocked(*j, true);
      return;
    }
    PublishLocked(j, JobEvent::Kind::kState);
    return;
  }
  if (j->loop.next() == TrainingLoop::Next::kEvaluate) {
    StatusOr<std::map<std::string, double>> m = j->runner->Evaluate();
    MutexLock l(mu_);
    if (!m.ok()) {
      TransitionLocked(j, JobAction::kFail, "evaluation: " + m.status().ToString());
      return;
    }
    const bool last = j->loop.AfterEvaluate() == TrainingLoop::Next::kFinish;
    if (last) FaultPointLocked(*j, fault_points::kFinalEvaluation);
    j->info.metrics = *m;
    RecordEvalLocked(j);
    PublishLocked(j, JobEvent::Kind::kEval);
    PersistLocked(*j, true);
    if (last) {
      FaultPointLocked(*j, fault_points::kFinalEvaluationRecorded);
      SucceedLocked(j, job);
    }
    return;
  }
  if (j->loop.next() == TrainingLoop::Next::kFinish) {  // resumed with its training complete
    MutexLock l(mu_);
    SucceedLocked(j, job);
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  StatusOr<StepResult> r = j->runner->Step();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool mid_chunk = j->runner->mid_chunk();
  const bool snapshot_waits = j->runner->snapshot_waits_for_chunk();
  MutexLock l(mu_);
  j->mid_chunk = mid_chunk;
  j->snapshot_waits = snapshot_waits;
  if (!r.ok()) {
    if (j->runner->IsNanError(r.status())) {  // on_nan "fail": the message names the step
      PublishLocked(j, JobEvent::Kind::kNan, r.status().message());
      if (options_.observer) options_.observer->OnNan(InfoLocked(*j), false);
      TransitionLocked(j, JobAction::kFail, r.status().message());
      return;
    }
    const std::string what = "step " + std::to_string(j->info.step + 1);
    if (OnReplicaFailureLocked(j, r.status(), what)) return;
    TransitionLocked(j, JobAction::kFail, what + ": " + r.status().ToString());
    return;
  }
  j->membership.rebuilds_without_step = 0;
  j->membership.last_error.clear();
  j->info.step = r->step;
  j->info.epoch = r->epoch;
  if (r->skipped) {  // on_nan "skip_step": the loss stays the last finite one
    ++j->info.skipped_steps;
    PublishLocked(j, JobEvent::Kind::kNan, r->nan_message);
    if (options_.observer) options_.observer->OnNan(InfoLocked(*j), true);
  } else {
    j->info.loss = r->loss;
  }
  j->train_seconds += secs;
  j->examples += r->examples;
  RecordStepLocked(j, &*r, secs);
  if (options_.observer) options_.observer->OnStep(InfoLocked(*j), secs, r->examples);
  if (options_.observer && !r->replicas.empty()) {
    options_.observer->OnReplicaStep(InfoLocked(*j), r->replicas);
  }
  std::string replica_note;
  if (j->spec.backup_replicas > 0) {
    // Backup replicas: step events say how often each replica was dropped.
    std::vector<int64_t> dropped = j->runner->dropped_steps();
    replica_note = "steps each replica was dropped from (backup replicas):";
    for (size_t i = 0; i < dropped.size(); ++i) {
      replica_note += (i ? ", " : " ") + std::string("replica ") + std::to_string(i) + " " +
                      std::to_string(dropped[i]);
    }
  }
  auto now = std::chrono::steady_clock::now();
  double min_gap = options_.max_step_events_per_second > 0 ? 1.0 / options_.max_step_events_per_second : 0;
  if (r->epoch_end || r->done ||
      std::chrono::duration<double>(now - j->last_step_event).count() >= min_gap) {
    j->last_step_event = now;
    PublishLocked(j, JobEvent::Kind::kStep, replica_note);
  }
  if (now - j->last_persist >= std::chrono::seconds(1)) PersistLocked(*j, false);
  const TrainingLoop::Next next = j->loop.AfterStep(j->spec.eval, *r);
  FaultPointLocked(*j, fault_points::kStepDone);
  if (r->done) {
    // Training is complete: the last step's checkpoint comes first, so that
    // neither a long final evaluation nor a crash during it loses training.
    if (uint64_t seq = SnapshotLocked(j, job, "final"); seq != 0) {
      WaitForWriteLocked(j, seq);
      if (j->info.checkpoint_step == j->info.step) {
        FaultPointLocked(*j, fault_points::kFinalCheckpointWritten);
      }
    }
    if (next == TrainingLoop::Next::kFinish) SucceedLocked(j, job);
    return;
  }
  if (options_.store == nullptr) return;
  bool requested = j->checkpoint_ticket > j->served_ticket;
  if (j->snapshot_waits) return;  // at the chunk's end
  if (requested || (CheckpointDueLocked(*j) && j->pending_writes == 0)) {
    // A lost replica's task that answers again rejoins at this checkpoint.
    if (SnapshotLocked(j, job, requested ? "on demand" : "policy") != 0) MaybeRejoinLocked(j);
  }
}

}  // namespace flowstate
