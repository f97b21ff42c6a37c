#include "server/job_manager.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "checkpoints/store.h"
#include "scheduler/thread_pool.h"
#include "server/training_job.h"

namespace flowstate {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued: return "QUEUED";
    case JobState::kRunning: return "RUNNING";
    case JobState::kPaused: return "PAUSED";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

std::string_view JobEventKindName(JobEvent::Kind k) {
  switch (k) {
    case JobEvent::Kind::kState: return "state";
    case JobEvent::Kind::kStep: return "step";
    case JobEvent::Kind::kEval: return "eval";
    case JobEvent::Kind::kCheckpoint: return "checkpoint";
    case JobEvent::Kind::kResume: return "resume";
  }
  return "state";
}

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

using Json = nlohmann::json;
using checkpoints::Store;

std::optional<JobState> StateFromName(const std::string& n) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kPaused,
                     JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (JobStateName(s) == n) return s;
  }
  return std::nullopt;
}

std::optional<JobEvent::Kind> KindFromName(const std::string& n) {
  for (JobEvent::Kind k : {JobEvent::Kind::kState, JobEvent::Kind::kStep, JobEvent::Kind::kEval,
                           JobEvent::Kind::kCheckpoint, JobEvent::Kind::kResume}) {
    if (JobEventKindName(k) == n) return k;
  }
  return std::nullopt;
}

// "job-12" -> 12; 0 for other ids.
int64_t IdNumber(const std::string& id, const std::string& prefix) {
  if (id.rfind(prefix, 0) != 0) return 0;
  try {
    return std::stoll(id.substr(prefix.size()));
  } catch (...) {
    return 0;
  }
}

std::string HumanBytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld bytes", (long long)b);
  }
  return buf;
}

std::vector<std::pair<std::string, Tensor>> ToNamed(std::vector<checkpoints::NamedTensor> t) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(t.size());
  for (auto& n : t) out.emplace_back(std::move(n.name), std::move(n.value));
  return out;
}

constexpr const char* kImportCounterKey = "server.next_import_id";

Status NoStore() {
  return Unimplemented("checkpoints need a store: this server runs without a data directory");
}

}  // namespace

struct JobManager::Job {
  std::string id;
  JobSpec spec;
  std::string spec_json;  // as submitted
  std::unique_ptr<TrainingJob> runner;
  JobState state = JobState::kQueued;
  std::string error;
  bool started = false;        // runner->Start() succeeded
  bool holds_slot = false;     // counted in running_
  bool busy = false;           // a worker is running a slice of it
  bool eval_pending = false;   // evaluate before the next step
  bool finish_after_eval = false;
  bool pause_requested = false;
  bool cancel_requested = false;
  int64_t epoch = 0, step = 0, total_steps = 0;
  double loss = 0, train_seconds = 0;
  int64_t examples = 0;
  std::map<std::string, double> metrics;
  double created = 0, started_at = 0, finished_at = 0;
  std::chrono::steady_clock::time_point last_step_event{};
  std::vector<std::weak_ptr<Stream>> subscribers;
  // Durability.
  bool restore_on_start = false;  // recovered: continue from its latest checkpoint
  bool was_running = false;       // recovered from RUNNING or PAUSED: a resume
  bool init_values_set = false;   // init_from values handed to the runner
  bool inference_ready = false;   // started without data to serve predictions
  std::mutex start_mu;            // serializes that lazy start
  int64_t checkpoint_step = -1, checkpoint_bytes = 0, checkpoint_failures = 0;
  double checkpoint_time = 0;
  std::string checkpoint_error;
  int64_t resumed_from_step = -1;
  int64_t snapshot_step = -1;  // of the newest snapshot taken (written or not)
  std::chrono::steady_clock::time_point snapshot_at{};
  int pending_writes = 0;      // snapshots queued or being written
  uint64_t last_write_done = 0;
  uint64_t checkpoint_ticket = 0, served_ticket = 0;  // on-demand requests
  int64_t served_step = -1;
  std::chrono::steady_clock::time_point last_persist{};
  std::deque<JobEvent> history;  // notable events, oldest first
};

struct JobManager::WriteRequest {
  std::shared_ptr<Job> job;
  uint64_t seq = 0;
  int64_t step = 0;
  std::string reason;
  checkpoints::Snapshot snapshot;
};

class JobManager::Stream final : public JobEventStream {
 public:
  std::optional<JobEvent> Next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    timed_out_ = false;
    bool ready = cv_.wait_for(l, timeout, [&] { return !events_.empty() || closed_ || ended_; });
    if (!events_.empty()) {
      JobEvent e = std::move(events_.front());
      events_.pop_front();
      return e;
    }
    timed_out_ = !ready;
    return std::nullopt;
  }
  bool timed_out() const override {
    std::lock_guard<std::mutex> l(mu_);
    return timed_out_;
  }
  void Close() override {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  void Push(JobEvent e, bool terminal) {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return;
    events_.push_back(std::move(e));
    if (terminal) ended_ = true;
    cv_.notify_all();
  }
  bool closed() const {
    std::lock_guard<std::mutex> l(mu_);
    return closed_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobEvent> events_;
  bool closed_ = false, ended_ = false, timed_out_ = false;
};

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
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
    work_cv_.notify_all();
  }
  for (auto& t : workers_) t.join();
  {
    std::unique_lock<std::mutex> l(mu_);
    // Every started, unfinished job gets a checkpoint of where it stopped.
    for (const std::string& id : order_) {
      std::shared_ptr<Job> job = jobs_.at(id);
      if (job->started && !IsTerminal(job->state) && job->step != job->snapshot_step) {
        SnapshotLocked(job.get(), job, "shutdown");
      }
    }
    writer_stopping_ = true;
    writer_cv_.notify_all();
  }
  writer_.join();  // after the queued writes
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, job] : jobs_) {
    if (!IsTerminal(job->state)) PersistLocked(*job, true);
  }
}

JobInfo JobManager::InfoLocked(const Job& j) const {
  JobInfo i;
  i.id = j.id;
  i.name = j.spec.name;
  i.state = j.state;
  i.epoch = j.epoch;
  i.epochs = j.spec.input.epochs;
  i.step = j.step;
  i.total_steps = j.total_steps;
  i.loss = j.loss;
  i.examples_per_sec = j.train_seconds > 0 ? double(j.examples) / j.train_seconds : 0;
  i.metrics = j.metrics;
  i.error = j.error;
  i.created = j.created;
  i.started = j.started_at;
  i.finished = j.finished_at;
  i.checkpoint_step = j.checkpoint_step;
  i.checkpoint_time = j.checkpoint_time;
  i.checkpoint_bytes = j.checkpoint_bytes;
  i.checkpoint_failures = j.checkpoint_failures;
  i.checkpoint_error = j.checkpoint_error;
  i.resumed_from_step = j.resumed_from_step;
  return i;
}

void JobManager::RememberLocked(Job* job, const JobEvent& e) {
  if (e.kind == JobEvent::Kind::kStep) return;
  job->history.push_back(e);
  while (int(job->history.size()) > std::max(1, options_.max_history_events)) job->history.pop_front();
}

void JobManager::PublishLocked(Job* job, JobEvent::Kind kind, const std::string& message) {
  JobEvent e;
  e.kind = kind;
  e.info = InfoLocked(*job);
  e.time = Now();
  e.message = message;
  RememberLocked(job, e);
  bool terminal = IsTerminal(job->state) && kind == JobEvent::Kind::kState;
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

void JobManager::SetStateLocked(Job* job, JobState s, const std::string& error) {
  JobState from = job->state;
  if (from == s) return;
  job->state = s;
  if (!error.empty()) job->error = error;
  if (s == JobState::kRunning && job->started_at == 0) job->started_at = Now();
  if (IsTerminal(s)) job->finished_at = Now();
  if (IsTerminal(s) || s == JobState::kPaused || s == JobState::kQueued) {
    if (job->holds_slot) {
      job->holds_slot = false;
      --running_;
    }
    ready_.erase(std::remove(ready_.begin(), ready_.end(), job->id), ready_.end());
  }
  if (IsTerminal(s) && job->runner && job->runner->pipeline()) job->runner->pipeline()->Cancel();
  PublishLocked(job, JobEvent::Kind::kState);
  PersistLocked(*job, true);
  if (options_.observer) options_.observer->OnStateChange(InfoLocked(*job), from);
  AdmitLocked();
}

// Moves queued jobs into free running slots, oldest first.
void JobManager::AdmitLocked() {
  while (running_ < options_.max_running && !queued_.empty()) {
    std::string id = queued_.front();
    queued_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second->state != JobState::kQueued) continue;
    Job* job = it->second.get();
    job->holds_slot = true;
    ++running_;
    ready_.push_back(id);
    SetStateLocked(job, JobState::kRunning);
    work_cv_.notify_one();
  }
}

StatusOr<JobInfo> JobManager::Submit(const std::string& job_json) {
  FS_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(job_json));
  TrainingJobOptions o;
  o.data_root = options_.data_root;
  o.devices = options_.devices;
  o.inter_op_pool = inter_op_pool_.get();
  FS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingJob> runner, TrainingJob::Create(spec, o));
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
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return Unavailable("the server is shutting down");
  auto job = std::make_shared<Job>();
  job->id = "job-" + std::to_string(next_id_++);
  job->spec = std::move(spec);
  job->spec_json = job_json;
  job->runner = std::move(runner);
  job->created = Now();
  job->init_values_set = init_values_set;
  if (options_.store != nullptr) {
    Status st = options_.store->PutRecord(Store::Kind::kGraphs, job->id, job_json);
    if (!st.ok()) return Unavailable("the job could not be stored: " + st.ToString());
    PersistLocked(*job, true);
  }
  jobs_[job->id] = job;
  order_.push_back(job->id);
  queued_.push_back(job->id);
  if (options_.observer) options_.observer->OnStateChange(InfoLocked(*job), JobState::kQueued);
  JobInfo info = InfoLocked(*job);
  AdmitLocked();
  return info;
}

StatusOr<JobInfo> JobManager::Get(const std::string& id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  return InfoLocked(*it->second);
}

std::vector<JobInfo> JobManager::List() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<JobInfo> out;
  for (const std::string& id : order_) out.push_back(InfoLocked(*jobs_.at(id)));
  return out;
}

int JobManager::queue_depth() const {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (const auto& [id, j] : jobs_) n += j->state == JobState::kQueued;
  return n;
}

std::map<JobState, int> JobManager::CountByState() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<JobState, int> out;
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kPaused,
                     JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    out[s] = 0;
  }
  for (const auto& [id, j] : jobs_) out[j->state]++;
  return out;
}

Status JobManager::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  Job* job = it->second.get();
  if (IsTerminal(job->state)) {
    return FailedPrecondition("job '" + id + "' is already " + std::string(JobStateName(job->state)));
  }
  if (job->busy) {
    job->cancel_requested = true;  // applied when its current step ends
  } else {
    queued_.erase(std::remove(queued_.begin(), queued_.end(), id), queued_.end());
    if (job->started && job->step != job->snapshot_step) SnapshotLocked(job, it->second, "cancel");
    SetStateLocked(job, JobState::kCancelled);
  }
  return Status();
}

Status JobManager::Pause(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  Job* job = it->second.get();
  if (job->state != JobState::kQueued && job->state != JobState::kRunning) {
    return FailedPrecondition("job '" + id + "' is " + std::string(JobStateName(job->state)) +
                              "; only queued or running jobs can be paused");
  }
  if (job->busy) {
    job->pause_requested = true;
  } else {
    queued_.erase(std::remove(queued_.begin(), queued_.end(), id), queued_.end());
    if (job->started && job->step != job->snapshot_step) SnapshotLocked(job, it->second, "pause");
    SetStateLocked(job, JobState::kPaused);
  }
  return Status();
}

Status JobManager::Resume(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  Job* job = it->second.get();
  if (job->state != JobState::kPaused) {
    if (job->pause_requested) {  // paused but its step has not ended yet
      job->pause_requested = false;
      return Status();
    }
    return FailedPrecondition("job '" + id + "' is " + std::string(JobStateName(job->state)) +
                              "; only paused jobs can be resumed");
  }
  queued_.push_back(id);
  SetStateLocked(job, JobState::kQueued);
  return Status();
}

Status JobManager::Predict(const std::string& id,
                           const std::vector<std::pair<std::string, Tensor>>& inputs,
                           const std::vector<std::string>& fetches, std::vector<Tensor>* outputs) {
  std::shared_ptr<Job> job;
  bool lazy_start = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job '" + id + "'");
    job = it->second;
    // A finished job reloaded after a restart predicts with the variables
    // of its final checkpoint, loaded on first use.
    lazy_start = !job->started && !job->inference_ready && IsTerminal(job->state) &&
                 job->runner != nullptr && options_.store != nullptr;
    if (!job->started && !job->inference_ready && !lazy_start) {
      return FailedPrecondition("job '" + id + "' has no trained variables yet (it is " +
                                std::string(JobStateName(job->state)) + ")");
    }
  }
  if (lazy_start) {
    std::lock_guard<std::mutex> s(job->start_mu);
    bool ready;
    {
      std::lock_guard<std::mutex> l(mu_);
      ready = job->inference_ready;
    }
    if (!ready) {
      int64_t restored = -1;
      Status st = StartRunner(job.get(), /*load_data=*/false, &restored);
      if (!st.ok()) return st.WithPrefix("job '" + id + "': loading its variables");
      if (restored < 0) {
        return FailedPrecondition("job '" + id + "' has no checkpoint to predict with");
      }
      std::lock_guard<std::mutex> l(mu_);
      job->inference_ready = true;
    }
  }
  return job->runner->Predict(inputs, fetches, outputs);
}

StatusOr<std::unique_ptr<JobEventStream>> JobManager::Watch(const std::string& id, bool history) {
  std::lock_guard<std::mutex> l(mu_);
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
  stream->Push(e, IsTerminal(job->state));
  job->subscribers.push_back(stream);
  // The caller owns a handle that keeps the stream alive.
  struct Handle final : JobEventStream {
    std::shared_ptr<Stream> s;
    std::optional<JobEvent> Next(std::chrono::milliseconds t) override { return s->Next(t); }
    bool timed_out() const override { return s->timed_out(); }
    void Close() override { s->Close(); }
    ~Handle() override { s->Close(); }
  };
  auto h = std::make_unique<Handle>();
  h->s = stream;
  return std::unique_ptr<JobEventStream>(std::move(h));
}

void JobManager::WorkerLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    work_cv_.wait(l, [&] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    std::string id = ready_.front();
    ready_.pop_front();
    std::shared_ptr<Job> job = jobs_.at(id);
    if (job->state != JobState::kRunning || job->busy) continue;
    job->busy = true;
    l.unlock();
    RunSlice(job);
    l.lock();
    job->busy = false;
    checkpoint_cv_.notify_all();  // an on-demand request may wait for the job to be idle
    if (job->state == JobState::kRunning) {
      if (job->cancel_requested) {
        if (job->started && job->step != job->snapshot_step) SnapshotLocked(job.get(), job, "cancel");
        SetStateLocked(job.get(), JobState::kCancelled);
      } else if (job->pause_requested) {
        job->pause_requested = false;
        if (job->started && job->step != job->snapshot_step) SnapshotLocked(job.get(), job, "pause");
        SetStateLocked(job.get(), JobState::kPaused);
      } else {
        ready_.push_back(id);  // round-robin: to the back of the line
        work_cv_.notify_one();
      }
    }
  }
}

// One unit of a job's work, outside the lock; bookkeeping under it.
void JobManager::RunSlice(const std::shared_ptr<Job>& job) {
  Job* j = job.get();
  if (!j->started) {
    int64_t restored = -1;
    Status s = StartRunner(j, /*load_data=*/true, &restored);
    std::lock_guard<std::mutex> l(mu_);
    if (!s.ok()) {
      SetStateLocked(j, JobState::kFailed, s.ToString());
      return;
    }
    j->started = true;
    j->total_steps = j->runner->total_steps();
    j->snapshot_at = std::chrono::steady_clock::now();
    if (j->restore_on_start) {
      j->restore_on_start = false;
      j->step = j->runner->step();
      j->snapshot_step = restored;
      if (restored >= 0) {
        j->resumed_from_step = restored;
        PublishLocked(j, JobEvent::Kind::kResume,
                      "resumed from the checkpoint at step " + std::to_string(restored));
      } else if (j->was_running) {
        j->resumed_from_step = 0;
        PublishLocked(j, JobEvent::Kind::kResume,
                      "restarted from step 0: no checkpoint had been written");
      } else {
        PublishLocked(j, JobEvent::Kind::kState);
      }
      PersistLocked(*j, true);
      return;
    }
    PublishLocked(j, JobEvent::Kind::kState);
    return;
  }
  if (j->eval_pending) {
    StatusOr<std::map<std::string, double>> m = j->runner->Evaluate();
    std::unique_lock<std::mutex> l(mu_);
    j->eval_pending = false;
    if (!m.ok()) {
      SetStateLocked(j, JobState::kFailed, "evaluation: " + m.status().ToString());
      return;
    }
    j->metrics = *m;
    PublishLocked(j, JobEvent::Kind::kEval);
    PersistLocked(*j, true);
    if (j->finish_after_eval) {
      uint64_t seq = SnapshotLocked(j, job, "final");
      if (seq) WaitForWriteLocked(l, j, seq);
      SetStateLocked(j, JobState::kSucceeded);
    }
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  StatusOr<StepResult> r = j->runner->Step();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::unique_lock<std::mutex> l(mu_);
  if (!r.ok()) {
    SetStateLocked(j, JobState::kFailed, "step " + std::to_string(j->step + 1) + ": " +
                                             r.status().ToString());
    return;
  }
  j->step = r->step;
  j->epoch = r->epoch;
  j->loss = r->loss;
  j->train_seconds += secs;
  j->examples += r->examples;
  if (options_.observer) options_.observer->OnStep(InfoLocked(*j), secs, r->examples);
  auto now = std::chrono::steady_clock::now();
  double min_gap = options_.max_step_events_per_second > 0 ? 1.0 / options_.max_step_events_per_second : 0;
  if (r->epoch_end || r->done ||
      std::chrono::duration<double>(now - j->last_step_event).count() >= min_gap) {
    j->last_step_event = now;
    PublishLocked(j, JobEvent::Kind::kStep);
  }
  if (now - j->last_persist >= std::chrono::seconds(1)) PersistLocked(*j, false);
  const auto& ev = j->spec.eval;
  bool eval_due = ev && ((r->epoch_end && (r->epoch + 1) % ev->every_epochs == 0) || r->done);
  if (eval_due) {
    j->eval_pending = true;
    j->finish_after_eval = r->done;
  } else if (r->done) {
    uint64_t seq = SnapshotLocked(j, job, "final");
    if (seq) WaitForWriteLocked(l, j, seq);
    SetStateLocked(j, JobState::kSucceeded);
    return;
  }
  if (options_.store == nullptr) return;
  bool requested = j->checkpoint_ticket > j->served_ticket;
  if (requested || (CheckpointDueLocked(*j) && j->pending_writes == 0)) {
    SnapshotLocked(j, job, requested ? "on demand" : "policy");
  }
}

bool JobManager::CheckpointDueLocked(const Job& j) const {
  if (options_.store == nullptr || !j.started || j.step == j.snapshot_step) return false;
  const CheckpointSpec& c = j.spec.checkpoint;
  if (c.every_steps > 0 && j.step - std::max<int64_t>(j.snapshot_step, 0) >= c.every_steps) return true;
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
    ++job->checkpoint_failures;
    job->checkpoint_error = s.status().ToString();
    PublishLocked(job, JobEvent::Kind::kCheckpoint,
                  "checkpoint at step " + std::to_string(job->step) + " (" + reason +
                      ") failed: " + job->checkpoint_error);
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
  writer_cv_.notify_all();
  checkpoint_cv_.notify_all();
  return seq;
}

void JobManager::WaitForWriteLocked(std::unique_lock<std::mutex>& l, Job* job, uint64_t seq) {
  checkpoint_cv_.wait(l, [&] { return job->last_write_done >= seq; });
}

void LowerThisThreadsPriority() {
#ifdef __linux__
  // On Linux nice values are per thread (the tid names the thread).
  (void)setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 10);
#endif
}

void JobManager::WriterLoop() {
  LowerThisThreadsPriority();  // training steps come first
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    writer_cv_.wait(l, [&] { return writer_stopping_ || !writes_.empty(); });
    if (writes_.empty()) {
      if (writer_stopping_) return;
      continue;
    }
    WriteRequest w = std::move(writes_.front());
    writes_.pop_front();
    Job* job = w.job.get();
    const int keep = job->spec.checkpoint.keep;
    l.unlock();
    int64_t bytes = 0;
    for (const auto& t : w.snapshot.tensors) bytes += int64_t(t.value.TotalBytes());
    auto t0 = std::chrono::steady_clock::now();
    Status st = options_.store->WriteCheckpoint(job->id, w.snapshot);
    std::string retention;
    if (st.ok()) {
      Status r = options_.store->RetainLatest(job->id, std::max(1, keep));
      if (!r.ok()) retention = "; older checkpoints were kept: " + r.ToString();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w.snapshot = checkpoints::Snapshot();  // drop the tensors outside the lock
    l.lock();
    --job->pending_writes;
    job->last_write_done = w.seq;
    std::string what = "checkpoint at step " + std::to_string(w.step) + " (" + w.reason + ")";
    if (st.ok()) {
      job->checkpoint_step = w.step;
      job->checkpoint_time = Now();
      job->checkpoint_bytes = bytes;
      job->checkpoint_error.clear();
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f ms", secs * 1e3);
      PublishLocked(job, JobEvent::Kind::kCheckpoint,
                    what + " written: " + HumanBytes(bytes) + " in " + ms + retention);
    } else {
      ++job->checkpoint_failures;
      job->checkpoint_error = st.ToString();
      std::string previous = job->checkpoint_step >= 0
                                 ? "; the checkpoint at step " + std::to_string(job->checkpoint_step) +
                                       " is still the latest"
                                 : "";
      PublishLocked(job, JobEvent::Kind::kCheckpoint, what + " failed: " + st.ToString() + previous);
    }
    PersistLocked(*job, true);
    if (options_.observer) options_.observer->OnCheckpoint(InfoLocked(*job), secs, bytes, st.ok());
    checkpoint_cv_.notify_all();
  }
}

Status JobManager::StartRunner(Job* job, bool load_data, int64_t* restored_step) {
  *restored_step = -1;
  std::optional<checkpoints::Snapshot> ckpt;
  bool restore, need_init;
  {
    std::lock_guard<std::mutex> l(mu_);
    restore = job->restore_on_start && options_.store != nullptr;
    need_init = job->spec.init_from.has_value() && !job->init_values_set;
  }
  if (restore) {
    // The newest checkpoint that reads back whole; a damaged one is skipped.
    StatusOr<std::vector<checkpoints::CheckpointInfo>> list = options_.store->ListCheckpoints(job->id);
    if (!list.ok()) return list.status().WithPrefix("listing the job's checkpoints");
    std::string damaged;
    for (auto it = list->rbegin(); it != list->rend() && !ckpt; ++it) {
      StatusOr<checkpoints::Snapshot> s = options_.store->ReadCheckpoint(job->id, it->step);
      if (s.ok()) {
        ckpt = std::move(s).value();
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
  Json r = Json::object();
  r["id"] = j.id;
  r["state"] = std::string(JobStateName(j.state));
  r["error"] = j.error;
  r["epoch"] = j.epoch;
  r["step"] = j.step;
  r["total_steps"] = j.total_steps;
  r["loss"] = std::isfinite(j.loss) ? j.loss : 0.0;
  r["train_seconds"] = j.train_seconds;
  r["examples"] = j.examples;
  Json m = Json::object();
  for (const auto& [k, v] : j.metrics) m[k] = std::isfinite(v) ? v : 0.0;
  r["metrics"] = m;
  r["created"] = j.created;
  r["started"] = j.started_at;
  r["finished"] = j.finished_at;
  r["checkpoint"] = {{"step", j.checkpoint_step}, {"time", j.checkpoint_time},
                     {"bytes", j.checkpoint_bytes}, {"failures", j.checkpoint_failures},
                     {"error", j.checkpoint_error}};
  r["resumed_from_step"] = j.resumed_from_step;
  Json h = Json::array();
  for (const JobEvent& e : j.history) {
    h.push_back({{"kind", std::string(JobEventKindName(e.kind))},
                 {"time", e.time},
                 {"message", e.message},
                 {"state", std::string(JobStateName(e.info.state))},
                 {"step", e.info.step},
                 {"epoch", e.info.epoch}});
  }
  r["history"] = h;
  // Best effort: a record that cannot be written now is written again at
  // the job's next change; the checkpoints are what a restart relies on.
  Status st = options_.store->PutRecord(Store::Kind::kJobs, j.id,
                                        r.dump(-1, ' ', false, Json::error_handler_t::replace), sync);
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
    job->id = id;
    Json r = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    std::string problem;
    if (!r.is_object()) problem = "its record is not JSON";
    std::optional<JobState> state;
    if (problem.empty()) {
      try {
        state = StateFromName(r.value("state", ""));
        if (!state) problem = "its record has no valid state";
        job->error = r.value("error", "");
        job->epoch = r.value("epoch", int64_t{0});
        job->step = r.value("step", int64_t{0});
        job->total_steps = r.value("total_steps", int64_t{0});
        job->loss = r.value("loss", 0.0);
        job->train_seconds = r.value("train_seconds", 0.0);
        job->examples = r.value("examples", int64_t{0});
        if (r.contains("metrics") && r["metrics"].is_object()) {
          for (const auto& [k, v] : r["metrics"].items()) {
            if (v.is_number()) job->metrics[k] = v.get<double>();
          }
        }
        job->created = r.value("created", 0.0);
        job->started_at = r.value("started", 0.0);
        job->finished_at = r.value("finished", 0.0);
        if (r.contains("checkpoint") && r["checkpoint"].is_object()) {
          const Json& c = r["checkpoint"];
          job->checkpoint_step = c.value("step", int64_t{-1});
          job->checkpoint_time = c.value("time", 0.0);
          job->checkpoint_bytes = c.value("bytes", int64_t{0});
          job->checkpoint_failures = c.value("failures", int64_t{0});
          job->checkpoint_error = c.value("error", "");
        }
        job->resumed_from_step = r.value("resumed_from_step", int64_t{-1});
      } catch (const std::exception& e) {
        problem = std::string("its record is malformed: ") + e.what();
      }
    }
    auto doc = docs.find(id);
    if (problem.empty() && doc == docs.end()) problem = "its job document is missing";
    if (problem.empty()) {
      job->spec_json = doc->second;
      StatusOr<JobSpec> spec = ParseJobSpec(job->spec_json);
      if (!spec.ok()) {
        problem = spec.status().ToString();
      } else {
        job->spec = *spec;
        TrainingJobOptions o;
        o.data_root = options_.data_root;
        o.devices = options_.devices;
        o.inter_op_pool = inter_op_pool_.get();
        StatusOr<std::unique_ptr<TrainingJob>> runner = TrainingJob::Create(job->spec, o);
        if (runner.ok()) {
          job->runner = std::move(runner).value();
        } else {
          problem = runner.status().ToString();
        }
      }
    }
    job->restore_on_start = true;
    job->state = state.value_or(JobState::kFailed);
    job->was_running = job->state == JobState::kRunning || job->state == JobState::kPaused;
    // A resume of this process is reported anew (the history keeps the old ones).
    if (!IsTerminal(job->state)) job->resumed_from_step = -1;
    if (!problem.empty() && !IsTerminal(job->state)) {
      job->state = JobState::kFailed;
      job->error = "the job could not be reloaded after a restart: " + problem;
      job->finished_at = Now();
    }
    // The history, as far as it was stored.
    if (r.is_object() && r.contains("history") && r["history"].is_array()) {
      JobInfo base = InfoLocked(*job);
      for (const Json& h : r["history"]) {
        if (!h.is_object()) continue;
        std::optional<JobEvent::Kind> kind = KindFromName(h.value("kind", ""));
        std::optional<JobState> hs = StateFromName(h.value("state", ""));
        if (!kind || !hs) continue;
        JobEvent e;
        e.kind = *kind;
        e.info = base;
        e.info.state = *hs;
        e.info.step = h.value("step", int64_t{0});
        e.info.epoch = h.value("epoch", int64_t{0});
        e.time = h.value("time", 0.0);
        e.message = h.value("message", "");
        job->history.push_back(std::move(e));
      }
    }
    loaded.push_back(job);
  }
  std::sort(loaded.begin(), loaded.end(), [](const auto& a, const auto& b) {
    int64_t na = IdNumber(a->id, "job-"), nb = IdNumber(b->id, "job-");
    return na != nb ? na < nb : a->id < b->id;
  });
  StatusOr<std::string> imports = options_.store->GetRecord(Store::Kind::kMeta, kImportCounterKey);
  std::lock_guard<std::mutex> l(mu_);
  if (imports.ok()) {
    try {
      next_import_ = std::max<int64_t>(next_import_, std::stoll(*imports));
    } catch (...) {
    }
  }
  std::deque<std::string> resume, queue;
  for (const auto& job : loaded) {
    if (jobs_.count(job->id)) continue;
    next_id_ = std::max(next_id_, IdNumber(job->id, "job-") + 1);
    if (job->state == JobState::kRunning) {
      job->state = JobState::kQueued;  // back to RUNNING when admitted
      resume.push_back(job->id);
    } else if (job->state == JobState::kQueued) {
      queue.push_back(job->id);
    }
    jobs_[job->id] = job;
    order_.push_back(job->id);
    PersistLocked(*job, true);
    if (options_.observer) options_.observer->OnStateChange(InfoLocked(*job), job->state);
  }
  queued_.insert(queued_.begin(), queue.begin(), queue.end());
  queued_.insert(queued_.begin(), resume.begin(), resume.end());
  AdmitLocked();
  return Status();
}

StatusOr<CheckpointRequestResult> JobManager::Checkpoint(const std::string& id) {
  if (options_.store == nullptr) return NoStore();
  std::unique_lock<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  std::shared_ptr<Job> job = it->second;
  if (!job->started && !job->inference_ready) {
    return FailedPrecondition("job '" + id + "' has no variables to checkpoint yet (it is " +
                              std::string(JobStateName(job->state)) + ")");
  }
  if (job->busy) {
    // Taken by the worker right after the step it is running.
    uint64_t ticket = ++job->checkpoint_ticket;
    bool served = checkpoint_cv_.wait_for(l, std::chrono::seconds(120), [&] {
      return job->served_ticket >= ticket || (!job->busy && job->state != JobState::kRunning);
    });
    if (job->served_ticket >= ticket) return CheckpointRequestResult{job->served_step, false};
    if (!served) return DeadlineExceeded("job '" + id + "' did not reach the end of its step in time");
    if (!job->busy && job->state != JobState::kRunning && job->checkpoint_ticket > job->served_ticket) {
      job->checkpoint_ticket = job->served_ticket;  // withdrawn: handled below, the job is idle
    }
  }
  if (job->busy) return Unavailable("job '" + id + "' is busy; try again");
  uint64_t seq = SnapshotLocked(job.get(), job, "on demand");
  if (seq == 0) return Internal("the snapshot failed: " + job->checkpoint_error);
  int64_t step = job->snapshot_step;
  if (job->state == JobState::kRunning) return CheckpointRequestResult{step, false};
  WaitForWriteLocked(l, job.get(), seq);
  if (job->checkpoint_step != step || !job->checkpoint_error.empty()) {
    return Unavailable("the checkpoint at step " + std::to_string(step) +
                       " could not be written: " + job->checkpoint_error);
  }
  return CheckpointRequestResult{step, true};
}

StatusOr<std::vector<JobCheckpointInfo>> JobManager::ListCheckpoints(const std::string& id) {
  if (options_.store == nullptr) return NoStore();
  {
    std::lock_guard<std::mutex> l(mu_);
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
    std::lock_guard<std::mutex> l(mu_);
    if (!jobs_.count(id)) return NotFound("no job or imported checkpoint '" + id + "'");
  }
  return out;
}

Status JobManager::ExportCheckpoint(const std::string& id, int64_t step, const std::string& path) {
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
  return checkpoints::ExportSnapshot(*s, path);
}

StatusOr<std::pair<std::string, int64_t>> JobManager::ImportCheckpoint(const std::string& path) {
  if (options_.store == nullptr) {
    return NoStore();
  }
  FS_ASSIGN_OR_RETURN(checkpoints::Snapshot s, checkpoints::ImportSnapshot(path));
  std::string id;
  {
    std::lock_guard<std::mutex> l(mu_);
    id = "import-" + std::to_string(next_import_++);
    FS_RETURN_IF_ERROR(options_.store->PutRecord(Store::Kind::kMeta, kImportCounterKey,
                                                 std::to_string(next_import_)));
  }
  FS_RETURN_IF_ERROR(options_.store->WriteCheckpoint(id, s));
  return std::make_pair(id, s.step);
}

}  // namespace flowstate
