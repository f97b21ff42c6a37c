// JobManager's durability half (job_manager.h): checkpoint snapshots and
// the writer thread, persisting job records, recovery after a restart, the
// checkpoint routes (take, list, export, import), and what a finished job
// keeps: releasing its memory, deleting it, retention. The scheduling half
// is job_manager.cc.
#include <malloc.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "api/views_json.h"
#include "checkpoints/npz.h"
#include "graph/mutex.h"
#include "jobs/fault_points.h"
#include "jobs/job_manager_internal.h"
#include "jobs/job_state.h"

namespace flowstate {

using namespace job_manager_internal;  // NOLINT: the two halves of one class
using Json = nlohmann::json;
using checkpoints::Store;

bool JobManager::CheckpointDueLocked(const Job& j) const {
  if (options_.store == nullptr || !j.started || j.info.step == j.snapshot_step) return false;
  const CheckpointSpec& c = j.spec.checkpoint;
  if (c.every_steps > 0 && j.info.step - std::max<int64_t>(j.snapshot_step, 0) >= c.every_steps) return true;
  if (c.every_seconds > 0 &&
      std::chrono::duration<double>(std::chrono::steady_clock::now() - j.snapshot_at).count() >=
          c.every_seconds) {
    return true;
  }
  return false;
}

uint64_t JobManager::SnapshotLocked(Job* job, const std::shared_ptr<Job>& ref, const std::string& reason) {
  if (options_.store == nullptr || !job->runner || !(job->started || job->inference_ready)) return 0;
  StatusOr<JobSnapshot> s = job->runner->Snapshot();
  if (!s.ok()) {
    ++job->info.checkpoint_failures;
    job->info.checkpoint_error = s.status().ToString();
    PublishLocked(job, JobEvent::Kind::kCheckpoint,
                  "checkpoint at step " + std::to_string(job->info.step) + " (" + reason +
                      ") failed: " + job->info.checkpoint_error);
    if (options_.observer) options_.observer->OnCheckpoint(InfoLocked(*job), 0, 0, false);
    return 0;
  }
  WriteRequest w;
  w.job = ref;
  w.seq = next_write_++;
  w.step = s->step;
  w.reason = reason;
  w.snapshot.step = s->step;
  w.snapshot.metadata = EncodeSnapshotMetadata(*s);
  w.snapshot.tensors.reserve(s->variables.size());
  for (auto& [name, t] : s->variables) w.snapshot.tensors.push_back({name, std::move(t)});
  job->snapshot_step = s->step;
  job->snapshot_at = std::chrono::steady_clock::now();
  ++job->pending_writes;
  job->served_ticket = job->checkpoint_ticket;
  job->served_step = s->step;
  uint64_t seq = w.seq;
  writes_.push_back(std::move(w));
  writer_cv_.NotifyAll();
  checkpoint_cv_.NotifyAll();
  return seq;
}

void JobManager::WaitForWriteLocked(Job* job, uint64_t seq) {
  while (job->last_write_done < seq) checkpoint_cv_.Wait(mu_);
}

void LowerThisThreadsPriority() {
#ifdef __linux__
  // On Linux nice values are per thread (the tid names the thread).
  (void)setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 10);
#endif
}

void JobManager::WriterLoop() {
  LowerThisThreadsPriority();  // training steps come first
  MutexLock l(mu_);
  for (;;) {
    while (!writer_stopping_ && writes_.empty()) writer_cv_.Wait(mu_);
    if (writes_.empty()) {
      if (writer_stopping_) return;
      continue;
    }
    WriteRequest w = std::move(writes_.front());
    writes_.pop_front();
    Job* job = w.job.get();
    const int keep = job->spec.checkpoint.keep;
    if (options_.fault_point) {
      FaultPointLocked(*job, std::string(fault_points::kCheckpointWritePrefix) + w.reason);
    }
    l.Unlock();
    int64_t bytes = 0;
    for (const auto& t : w.snapshot.tensors) bytes += int64_t(t.value.TotalBytes());
    auto t0 = std::chrono::steady_clock::now();
    Status st = options_.store->WriteCheckpoint(job->info.id, w.snapshot);
    std::string retention;
    if (st.ok()) {
      Status r = options_.store->RetainLatest(job->info.id, std::max(1, keep));
      if (!r.ok()) retention = "; older checkpoints were kept: " + r.ToString();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w.snapshot = checkpoints::Snapshot();  // drop the tensors outside the lock
    l.Lock();
    --job->pending_writes;
    job->last_write_done = w.seq;
    std::string what = "checkpoint at step " + std::to_string(w.step) + " (" + w.reason + ")";
    if (st.ok()) {
      job->info.checkpoint_step = w.step;
      job->info.checkpoint_time = Now();
      job->info.checkpoint_bytes = bytes;
      job->info.checkpoint_error.clear();
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f ms", secs * 1e3);
      PublishLocked(job, JobEvent::Kind::kCheckpoint,
                    what + " written: " + HumanBytes(bytes) + " in " + ms + retention);
    } else {
      ++job->info.checkpoint_failures;
      job->info.checkpoint_error = st.ToString();
      std::string previous = job->info.checkpoint_step >= 0
                                 ? "; the checkpoint at step " + std::to_string(job->info.checkpoint_step) +
                                       " is still the latest"
                                 : "";
      PublishLocked(job, JobEvent::Kind::kCheckpoint, what + " failed: " + st.ToString() + previous);
    }
    PersistLocked(*job, true);
    if (options_.observer) options_.observer->OnCheckpoint(InfoLocked(*job), secs, bytes, st.ok());
    if (job->pending_writes == 0 && IsTerminal(job->info.state)) EnforceRetentionLocked();
    checkpoint_cv_.NotifyAll();
  }
}

Status JobManager::StartRunner(Job* job, bool load_data, int64_t* restored_step) {
  *restored_step = -1;
  std::optional<checkpoints::Snapshot> ckpt;
  bool restore, need_init;
  {
    MutexLock l(mu_);
    restore = job->restore_on_start && options_.store != nullptr;
    need_init = job->spec.init_from.has_value() && !job->init_values_set;
  }
  if (restore) {
    // The newest checkpoint that reads back whole; a damaged one is skipped.
    StatusOr<std::vector<checkpoints::CheckpointInfo>> list = options_.store->ListCheckpoints(job->info.id);
    if (!list.ok()) return list.status().WithPrefix("listing the job's checkpoints");
    std::string damaged;
    for (auto it = list->rbegin(); it != list->rend() && !ckpt; ++it) {
      StatusOr<checkpoints::Snapshot> s = options_.store->ReadCheckpoint(job->info.id, it->step);
      if (s.ok()) {
        ckpt = std::move(s).value();
        MutexLock l(mu_);
        if (it->step > job->info.checkpoint_step) {
          // Written just before the server died, before its record said so.
          job->info.checkpoint_step = it->step;
          job->info.checkpoint_time = double(it->unix_micros) / 1e6;
          job->info.checkpoint_bytes = it->bytes;
        }
      } else {
        damaged += (damaged.empty() ? "" : "; ") + s.status().ToString();
      }
    }
    if (!ckpt && !damaged.empty()) return DataLoss("no readable checkpoint: " + damaged);
  }
  if (!ckpt && need_init && options_.store != nullptr) {
    const InitFromSpec& f = *job->spec.init_from;
    StatusOr<checkpoints::Snapshot> from = options_.store->ReadCheckpoint(f.job, f.step);
    if (!from.ok()) return from.status().WithPrefix("init_from");
    job->runner->SetInitialValues(ToNamed(std::move(from->tensors)));
  }
  FS_RETURN_IF_ERROR(job->runner->Start(load_data));
  if (ckpt) {
    JobSnapshot snap;
    FS_RETURN_IF_ERROR(DecodeSnapshotMetadata(ckpt->metadata, &snap));
    snap.variables = ToNamed(std::move(ckpt->tensors));
    Status st = job->runner->Restore(snap);
    if (!st.ok()) return st.WithPrefix("restoring the checkpoint at step " + std::to_string(snap.step));
    *restored_step = snap.step;
  }
  return Status();
}

void JobManager::PersistLocked(Job& j, bool sync) {
  if (options_.store == nullptr) return;
  JobRecord record;
  record.info = InfoLocked(j);
  record.train_seconds = j.train_seconds;
  record.examples = j.examples;
  if (j.requested) record.pending_action = std::string(JobActionName(*j.requested));
  record.history.assign(j.history.begin(), j.history.end());
  // Best effort: a record that cannot be written now is written again at
  // the job's next change; the checkpoints are what a restart relies on.
  // The history (when changed) unsynced just before: the record's synced
  // write makes it durable too.
  if (sync) PersistHistoryLocked(j);
  Status st = options_.store->PutRecord(Store::Kind::kJobs, j.info.id, JobRecordToJson(record), sync);
  j.last_persist = std::chrono::steady_clock::now();
  (void)st;
}

Status JobManager::Recover() {
  if (options_.store == nullptr) return FailedPrecondition("there is no store to recover jobs from");
  FS_ASSIGN_OR_RETURN(auto records, options_.store->ListRecords(Store::Kind::kJobs));
  FS_ASSIGN_OR_RETURN(auto documents, options_.store->ListRecords(Store::Kind::kGraphs));
  std::map<std::string, std::string> docs(documents.begin(), documents.end());
  std::vector<std::shared_ptr<Job>> loaded;
  for (const auto& [id, text] : records) {
    auto job = std::make_shared<Job>();
    job->info.id = id;
    std::string problem;
    std::optional<JobState> state;
    StatusOr<JobRecord> record = JobRecordFromJson(text);
    if (!record.ok()) {
      problem = "its record is malformed: " + record.status().message();
    } else {
      job->info = record->info;
      job->info.id = id;
      state = record->info.state;
      job->train_seconds = record->train_seconds;
      job->examples = record->examples;
    }
    auto doc = docs.find(id);
    if (problem.empty() && doc == docs.end()) problem = "its job document is missing";
    if (problem.empty()) {
      job->spec_json = doc->second;
      StatusOr<JobSpec> spec = ParseJobSpec(job->spec_json);
      if (spec.ok()) {
        Status placed = PlaceReplicas(&*spec);
        if (!placed.ok()) spec = placed;
      }
      if (!spec.ok()) {
        problem = spec.status().ToString();
      } else {
        job->spec = *spec;
        StatusOr<std::unique_ptr<TrainingJob>> runner = TrainingJob::Create(job->spec, RunnerOptions());
        if (runner.ok()) job->spec = (*runner)->spec();  // with the graph an ONNX model became
        if (!runner.ok() && AcrossTasks(job->spec)) {
          // Replicas on other tasks, before the cluster has started: replica
          // 0 for now (a start builds the job with the tasks that answer).
          runner = TrainingJob::Create(ReplicaZeroSpec(job->spec), RunnerOptions());
        }
        if (runner.ok()) {
          job->runner = std::move(runner).value();
        } else {
          problem = runner.status().ToString();
        }
      }
    }
    job->restore_on_start = true;
    job->info.state = state.value_or(JobState::kFailed);
    job->was_running = job->info.state == JobState::kRunning || job->info.state == JobState::kPaused;
    // A resume of this process is reported anew (the history keeps the old ones).
    if (!IsTerminal(job->info.state)) job->info.resumed_from_step = -1;
    if (!problem.empty() && !IsTerminal(job->info.state)) {
      job->info.state = JobStateMachine::Next(job->info.state, JobAction::kFail).value_or(JobState::kFailed);
      job->info.error = "the job could not be reloaded after a restart: " + problem;
      job->info.finished = Now();
    }
    {
      // The job is not shared yet; the lock is what InfoLocked/RememberLocked ask for.
      MutexLock l(mu_);
      // The history, as far as it was stored, each event with the job's
      // values of its own moment (those of an older record without them: the
      // job's name and size from its document).
      if (record.ok()) {
        JobInfo base = InfoLocked(*job);
        for (JobEvent& e : record->history) {
          e.info.id = id;
          if (e.info.name.empty()) e.info.name = base.name;
          if (e.info.epochs == 0) e.info.epochs = base.epochs;
          job->history.push_back(std::move(e));
        }
      }
      // A pause or cancel asked during a step that the server did not live
      // to finish: applied now, as at the end of that step.
      if (record.ok() && problem.empty() && job->info.state == JobState::kRunning) {
        std::optional<JobAction> pending;
        if (record->pending_action == JobActionName(JobAction::kPause)) pending = JobAction::kPause;
        if (record->pending_action == JobActionName(JobAction::kCancel)) pending = JobAction::kCancel;
        if (std::optional<JobState> to = pending ? JobStateMachine::Next(job->info.state, *pending) : std::nullopt) {
          job->info.state = *to;
          if (IsTerminal(*to)) job->info.finished = Now();
          JobEvent e;
          e.kind = JobEvent::Kind::kState;
          e.info = InfoLocked(*job);
          e.time = Now();
          e.message = std::string(*pending == JobAction::kCancel ? "cancelled" : "paused") +
                      " as asked before the server stopped (the step it was asked during did not end)";
          RememberLocked(job.get(), e);
        }
      }
    }
    LoadHistory(job.get());
    loaded.push_back(job);
  }
  std::sort(loaded.begin(), loaded.end(), [](const auto& a, const auto& b) {
    int64_t na = IdNumber(a->info.id, "job-"), nb = IdNumber(b->info.id, "job-");
    return na != nb ? na < nb : a->info.id < b->info.id;
  });
  StatusOr<std::string> imports = options_.store->GetRecord(Store::Kind::kMeta, kImportCounterKey);
  StatusOr<std::string> job_ids = options_.store->GetRecord(Store::Kind::kMeta, kJobCounterKey);
  MutexLock l(mu_);
  for (auto [text, counter] : {std::pair{&imports, &next_import_}, std::pair{&job_ids, &next_id_}}) {
    if (!text->ok()) continue;
    try {
      *counter = std::max<int64_t>(*counter, std::stoll(**text));
    } catch (...) {
    }
  }
  std::deque<std::string> resume, queue;
  for (const auto& job : loaded) {
    if (jobs_.count(job->info.id)) continue;
    next_id_ = std::max(next_id_, IdNumber(job->info.id, "job-") + 1);
    if (job->info.state == JobState::kRunning) {
      // Back to QUEUED (RUNNING again when admitted), as the table says.
      job->info.state = JobStateMachine::Next(job->info.state, JobAction::kRequeue).value_or(JobState::kQueued);
      resume.push_back(job->info.id);
    } else if (job->info.state == JobState::kQueued) {
      queue.push_back(job->info.id);
    }
    jobs_[job->info.id] = job;
    order_.push_back(job->info.id);
    PersistLocked(*job, true);
    if (options_.observer) options_.observer->OnStateChange(InfoLocked(*job), job->info.state);
  }
  queued_.insert(queued_.begin(), queue.begin(), queue.end());
  queued_.insert(queued_.begin(), resume.begin(), resume.end());
  EnforceRetentionLocked();
  AdmitLocked();
  return Status();
}

void JobManager::ReleaseLocked(Job* job) {
  if (!job->runner) return;
  // A checkpoint of the last step, written or being written, is what
  // Predict loads; without one the model values stay (the only copy).
  const bool covered = options_.store != nullptr && job->snapshot_step == job->info.step &&
                       job->snapshot_step >= 0 &&
                       (job->info.checkpoint_step == job->info.step || job->pending_writes > 0);
  if (!covered && (job->started || job->inference_ready)) {
    StatusOr<std::vector<std::pair<std::string, Tensor>>> v = job->runner->ModelValues();
    if (v.ok()) job->final_values = std::move(v).value();
  }
  // Predict calls in flight keep the old runner (and its sessions) until
  // they return.
  std::shared_ptr<TrainingJob> old = std::exchange(job->runner, job->runner->Unstarted());
  job->started = false;
  job->inference_ready = false;
  job->restore_on_start = covered;
  if (old.use_count() == 1) {
    old.reset();
#ifdef __GLIBC__
    // The data's and the sessions' freed pages go back to the system, not
    // only to malloc's free lists (which keep most of them otherwise).
    malloc_trim(0);
#endif
  }
}

Status JobManager::DeleteLocked(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  if (options_.store != nullptr) {
    FS_RETURN_IF_ERROR(options_.store->PutRecord(Store::Kind::kMeta, kJobCounterKey, std::to_string(next_id_))
                           .WithPrefix("deleting job '" + id + "'"));
    FS_RETURN_IF_ERROR(DeleteHistoryLocked(*it->second).WithPrefix("deleting job '" + id + "'"));
    // The record first: without it a restart no longer sees the job, even
    // if the document below could not be deleted.
    FS_RETURN_IF_ERROR(options_.store->DeleteJobData(id).WithPrefix("deleting job '" + id + "'"));
    FS_RETURN_IF_ERROR(options_.store->DeleteRecord(Store::Kind::kGraphs, id)
                           .WithPrefix("deleting the document of job '" + id + "'"));
  }
  std::shared_ptr<Job> job = it->second;
  for (auto& w : job->subscribers) {
    if (std::shared_ptr<Stream> s = w.lock()) s->Close();
  }
  jobs_.erase(it);
  order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
  if (options_.observer) options_.observer->OnDelete(id);
  return Status();
}

Status JobManager::Delete(const std::string& id) {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  std::shared_ptr<Job> job = it->second;
  if (!IsTerminal(job->info.state)) {
    return FailedPrecondition("job '" + id + "' is " + std::string(JobStateName(job->info.state)) +
                              "; only finished jobs can be deleted (cancel it first)");
  }
  while (job->pending_writes != 0) checkpoint_cv_.Wait(mu_);
  if (jobs_.count(id) == 0) return NotFound("no job '" + id + "'");  // deleted meanwhile
  return DeleteLocked(id);
}

int JobManager::EnforceRetention() {
  MutexLock l(mu_);
  return EnforceRetentionLocked();
}

int JobManager::EnforceRetentionLocked() {
  const int max_finished = options_.retention_max_finished;
  const double max_age = options_.retention_seconds;
  if (max_finished <= 0 && max_age <= 0) return 0;
  std::vector<std::pair<double, std::string>> finished;  // (finished at, id)
  for (const auto& [id, j] : jobs_) {
    if (IsTerminal(j->info.state)) finished.emplace_back(j->info.finished, id);
  }
  std::sort(finished.begin(), finished.end(), std::greater<>());  // newest first
  const double now = Now();
  int deleted = 0;
  for (size_t i = 0; i < finished.size(); ++i) {
    bool too_many = max_finished > 0 && i >= size_t(max_finished);
    bool too_old = max_age > 0 && now - finished[i].first > max_age;
    if (!too_many && !too_old) continue;
    // One with a write in flight goes at a later pass (the writer runs one).
    if (jobs_.at(finished[i].second)->pending_writes > 0) continue;
    if (DeleteLocked(finished[i].second).ok()) ++deleted;
  }
  return deleted;
}

StatusOr<CheckpointRequestResult> JobManager::Checkpoint(const std::string& id) {
  if (options_.store == nullptr) return NoStore();
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  std::shared_ptr<Job> job = it->second;
  if (!job->started && !job->inference_ready && IsTerminal(job->info.state) && job->runner) {
    // A finished job released its variables: its final checkpoint is the
    // one asked for; without one, its kept values are loaded to take it.
    while (job->pending_writes != 0) checkpoint_cv_.Wait(mu_);
    if (job->restore_on_start && job->info.checkpoint_step == job->info.step && job->info.checkpoint_step >= 0) {
      return CheckpointRequestResult{job->info.step, true};
    }
    if (!job->final_values.empty()) {
      std::shared_ptr<TrainingJob> runner = job->runner;
      l.Unlock();
      FS_RETURN_IF_ERROR(LoadFinished(job, runner));
      l.Lock();
      if (jobs_.count(id) == 0) return NotFound("no job '" + id + "'");  // deleted meanwhile
    }
  }
  if (!job->started && !job->inference_ready) {
    return FailedPrecondition("job '" + id + "' has no variables to checkpoint yet (it is " +
                              std::string(JobStateName(job->info.state)) + ")");
  }
  if (job->busy || job->snapshot_waits) {
    // Taken by the worker right after the step it is running (with shared
    // tables, after the chunk's last step).
    uint64_t ticket = ++job->checkpoint_ticket;
    auto served = [&] { return job->served_ticket >= ticket || (!job->busy && job->info.state != JobState::kRunning); };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!served() && checkpoint_cv_.WaitUntil(mu_, deadline)) {
    }
    if (job->served_ticket >= ticket) return CheckpointRequestResult{job->served_step, false};
    if (!served()) return DeadlineExceeded("job '" + id + "' did not reach the end of its step in time");
    if (!job->busy && job->info.state != JobState::kRunning && job->checkpoint_ticket > job->served_ticket) {
      job->checkpoint_ticket = job->served_ticket;  // withdrawn: handled below, the job is idle
    }
  }
  if (job->busy) return Unavailable("job '" + id + "' is busy; try again");
  uint64_t seq = SnapshotLocked(job.get(), job, "on demand");
  if (seq == 0) return Internal("the snapshot failed: " + job->info.checkpoint_error);
  int64_t step = job->snapshot_step;
  if (job->info.state == JobState::kRunning) return CheckpointRequestResult{step, false};
  WaitForWriteLocked(job.get(), seq);
  if (job->info.checkpoint_step != step || !job->info.checkpoint_error.empty()) {
    return Unavailable("the checkpoint at step " + std::to_string(step) +
                       " could not be written: " + job->info.checkpoint_error);
  }
  return CheckpointRequestResult{step, true};
}

StatusOr<std::vector<JobCheckpointInfo>> JobManager::ListCheckpoints(const std::string& id) {
  if (options_.store == nullptr) return NoStore();
  {
    MutexLock l(mu_);
    if (!jobs_.count(id) && id.rfind("import-", 0) != 0) return NotFound("no job '" + id + "'");
  }
  if (options_.store == nullptr) {
    return NoStore();
  }
  FS_ASSIGN_OR_RETURN(std::vector<checkpoints::CheckpointInfo> list, options_.store->ListCheckpoints(id));
  std::vector<JobCheckpointInfo> out;
  for (const auto& c : list) {
    out.push_back({c.step, double(c.unix_micros) / 1e6, c.bytes, c.num_tensors});
  }
  if (out.empty() && id.rfind("import-", 0) == 0) {
    MutexLock l(mu_);
    if (!jobs_.count(id)) return NotFound("no job or imported checkpoint '" + id + "'");
  }
  return out;
}

Status JobManager::ExportCheckpoint(const std::string& id, int64_t step, const std::string& path) {
  return ExportCheckpoint(id, step, path, checkpoints::ExportFormat::kFsck);
}

Status JobManager::ExportCheckpoint(const std::string& id, int64_t step, const std::string& path,
                                    checkpoints::ExportFormat format,
                                    std::vector<std::string>* converted) {
  if (options_.store == nullptr) {
    return NoStore();
  }
  StatusOr<checkpoints::Snapshot> s = options_.store->ReadCheckpoint(id, step);
  if (!s.ok()) {
    if (s.status().code() == Code::kNotFound) {
      return NotFound("job '" + id + "' has no checkpoint at step " + std::to_string(step));
    }
    return s.status();
  }
  return checkpoints::ExportSnapshotAs(*s, path, format, converted);
}

StatusOr<std::pair<std::string, int64_t>> JobManager::ImportCheckpoint(const std::string& path) {
  if (options_.store == nullptr) {
    return NoStore();
  }
  // The bytes are the client's: what is wrong with them is INVALID_ARGUMENT,
  // and messages name "the uploaded checkpoint", not the scratch file.
  FS_ASSIGN_OR_RETURN(checkpoints::Snapshot s,
                      checkpoints::ImportSnapshot(path, "the uploaded checkpoint"));
  std::string id;
  {
    MutexLock l(mu_);
    id = "import-" + std::to_string(next_import_++);
    FS_RETURN_IF_ERROR(options_.store->PutRecord(Store::Kind::kMeta, kImportCounterKey,
                                                 std::to_string(next_import_)));
  }
  FS_RETURN_IF_ERROR(options_.store->WriteCheckpoint(id, s));
  return std::make_pair(id, s.step);
}

}  // namespace flowstate
